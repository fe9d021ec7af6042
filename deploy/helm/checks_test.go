package helm

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkServerPod holds what every aperio-server pod must have, from the
// chart or the plain manifests: the probes on the reserved paths, a
// master token from a Secret, and a locked-down container.
func checkServerPod(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	spec := d.Spec.Template.Spec
	c := containerNamed(t, spec, "server")

	checkProbe(t, "readiness", c, c.ReadinessProbe, "/aperio/readyz")
	checkProbe(t, "liveness", c, c.LivenessProbe, "/aperio/healthz")

	tok, ok := envOf(c, "APERIO_SERVER_TOKEN")
	if !ok || tok.Value != "" || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil {
		t.Errorf("APERIO_SERVER_TOKEN = %+v, want it from a Secret", tok)
	}
	if db, ok := envOf(c, "APERIO_DATABASE_URL"); ok && (db.Value != "" || db.ValueFrom == nil || db.ValueFrom.SecretKeyRef == nil) {
		t.Errorf("APERIO_DATABASE_URL = %+v, want it from a Secret", db)
	}

	if a := spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the server's pod mounts a service account token; it never calls the API server")
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("the server container has no securityContext")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("the server container is privileged")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities = %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}
	// With a read-only root, the store and temporary files need volumes.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for _, p := range []string{"/data", "/tmp"} {
		name, ok := mounts[p]
		if !ok {
			t.Errorf("nothing mounted at %s on a read-only root", p)
			continue
		}
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == name }) {
			t.Errorf("mount %s names volume %q, which the pod does not have", p, name)
		}
	}

	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("Deployment selector %v does not select its own pods %v (%v)", d.Spec.Selector, d.Spec.Template.Labels, err)
	}
	return c
}

// checkService wants svc to select d's pods and every one of its ports
// to reach a port of the server container c.
func checkService(t *testing.T, svc *corev1.Service, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("Service selector %v misses the server's pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) == 0 {
		t.Error("the Service has no ports")
	}
	for _, p := range svc.Spec.Ports {
		if !portOf(c, p.TargetPort) {
			t.Errorf("Service port %s targets %s, which the server does not expose", p.Name, p.TargetPort.String())
		}
	}
}

// checkProbe wants an HTTP GET of path on one of c's ports.
func checkProbe(t *testing.T, what string, c corev1.Container, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s probe = %+v, want GET %s", what, p, path)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s probe path = %q, want %q", what, p.HTTPGet.Path, path)
	}
	if !portOf(c, p.HTTPGet.Port) {
		t.Errorf("%s probe port %s is none of the container's ports", what, p.HTTPGet.Port.String())
	}
}

// portOf reports whether port (a name or number) is one of c's ports.
func portOf(c corev1.Container, port intstr.IntOrString) bool {
	return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		if port.Type == intstr.String {
			return p.Name == port.StrVal
		}
		return p.ContainerPort == port.IntVal
	})
}

// selects reports whether a Service or PDB selector, given as a set,
// picks pods carrying podLabels. An empty set selects nothing here: a
// Service without a selector would not reach the server.
func selects(selector map[string]string, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}
