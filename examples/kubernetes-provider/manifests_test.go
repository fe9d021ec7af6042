package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// manifestDir is deploy/kubernetes, seen from this package.
const manifestDir = "../../deploy/kubernetes"

// manifests decodes every document of deploy/kubernetes/*.yaml strictly:
// an unknown or duplicated field, a misspelled kind or a bad value fails.
func manifests(t *testing.T) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", manifestDir, err)
	}
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var objs []runtime.Object
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// stripComments drops the comment lines of a YAML document.
func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// find returns the objects of type T among objs.
func find[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func deploymentNamed(t *testing.T, objs []runtime.Object, name string) *appsv1.Deployment {
	t.Helper()
	for _, d := range find[*appsv1.Deployment](objs) {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no Deployment %q in %s", name, manifestDir)
	return nil
}

func envOf(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func containerNamed(t *testing.T, d *appsv1.Deployment, name string) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %q", d.Name, name)
	return corev1.Container{}
}

// TestRBACIsLeast fails when the provider's Role grants more than what
// scaling and retirements need (listing, getting and patching Deployments
// and StatefulSets, getting and updating their scale, getting
// ReplicaSets, getting, patching and deleting pods), or when anything
// grants cluster-wide rights.
func TestRBACIsLeast(t *testing.T) {
	objs := manifests(t)
	if n := len(find[*rbacv1.ClusterRole](objs)) + len(find[*rbacv1.ClusterRoleBinding](objs)); n != 0 {
		t.Errorf("%d cluster-wide RBAC objects: the provider needs its namespace only", n)
	}
	roles := find[*rbacv1.Role](objs)
	if len(roles) != 1 {
		t.Fatalf("%d Roles, want 1", len(roles))
	}
	var got []string
	for _, rule := range roles[0].Rules {
		if len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: unexpected resource names or URLs", rule)
		}
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				for _, v := range rule.Verbs {
					if g == "" {
						g = "core"
					}
					got = append(got, g+" "+r+" "+v)
				}
			}
		}
	}
	slices.Sort(got)
	want := []string{
		"apps deployments get",
		"apps deployments list",
		"apps deployments patch",
		"apps deployments/scale get",
		"apps deployments/scale update",
		"apps replicasets get",
		"apps statefulsets get",
		"apps statefulsets list",
		"apps statefulsets patch",
		"apps statefulsets/scale get",
		"apps statefulsets/scale update",
		"core pods delete",
		"core pods get",
		"core pods patch",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Role grants\n  %s\nwant exactly\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	bindings := find[*rbacv1.RoleBinding](objs)
	if len(bindings) != 1 {
		t.Fatalf("%d RoleBindings, want 1", len(bindings))
	}
	b := bindings[0]
	if b.RoleRef.Kind != "Role" || b.RoleRef.Name != roles[0].Name || b.Namespace != roles[0].Namespace {
		t.Errorf("RoleBinding refers to %s %s in %s, want Role %s in %s", b.RoleRef.Kind, b.RoleRef.Name, b.Namespace, roles[0].Name, roles[0].Namespace)
	}
	provider := deploymentNamed(t, objs, "aperio-kubernetes-provider")
	sa := provider.Spec.Template.Spec.ServiceAccountName
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != sa || b.Subjects[0].Namespace != provider.Namespace {
		t.Errorf("RoleBinding subjects = %+v, want only the provider's service account %q", b.Subjects, sa)
	}
	// Only the provider talks to the API server.
	for _, d := range find[*appsv1.Deployment](objs) {
		if d.Name == provider.Name {
			continue
		}
		if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("Deployment %s mounts a service account token; only the provider needs one", d.Name)
		}
	}
}

// TestManifestsFitTogether checks the names that tie the pieces together:
// the app's annotation and its client's hostname, the client's scaling URL
// and the provider's Service, the server's outbound allowlist.
func TestManifestsFitTogether(t *testing.T) {
	objs := manifests(t)
	for _, o := range objs {
		if ns, ok := o.(interface{ GetNamespace() string }); ok {
			if _, isNS := o.(*corev1.Namespace); !isNS && ns.GetNamespace() != "aperio" {
				t.Errorf("%T in namespace %q, want aperio", o, ns.GetNamespace())
			}
		}
	}
	app := deploymentNamed(t, objs, "web")
	client := containerNamed(t, app, "aperio-client")
	host, _ := envOf(client, "APERIO_HOSTNAME")
	if !annotatedFor(app.Annotations, host.Value, "/") {
		t.Errorf("app annotations %v do not name its client's hostname %q", app.Annotations, host.Value)
	}
	// Scale to zero: an idle client must retire without exiting (an
	// exited container is restarted, not removed), and the provider
	// must hold the webhook secret that makes its retirement count.
	idle, _ := envOf(client, "APERIO_IDLE_TIMEOUT")
	action, _ := envOf(client, "APERIO_IDLE_ACTION")
	if idle.Value == "" || action.Value != "wait" {
		t.Errorf("the sidecar has APERIO_IDLE_TIMEOUT %q and APERIO_IDLE_ACTION %q: the example retires idle clients, and in a pod only with wait", idle.Value, action.Value)
	}
	if lo, _ := envOf(client, "APERIO_SCALING_MIN"); lo.Value != "0" {
		t.Errorf("APERIO_SCALING_MIN = %q, want 0: the example scales to zero", lo.Value)
	}
	if app.Spec.Template.Spec.TerminationGracePeriodSeconds == nil || *app.Spec.Template.Spec.TerminationGracePeriodSeconds <= 30 {
		t.Error("the app's grace period does not cover the client's 30 s drain")
	}

	scalingURL, _ := envOf(client, "APERIO_SCALING_URL")
	u, err := url.Parse(scalingURL.Value)
	if err != nil {
		t.Fatalf("APERIO_SCALING_URL %q: %v", scalingURL.Value, err)
	}
	var svc *corev1.Service
	for _, s := range find[*corev1.Service](objs) {
		if s.Name == "aperio-kubernetes-provider" {
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("no Service for the provider")
	}
	wantHost := svc.Name + "." + svc.Namespace + ".svc.cluster.local"
	if u.Hostname() != wantHost || u.Port() != "9000" || u.Path != "/scale" || svc.Spec.Ports[0].Port != 9000 {
		t.Errorf("APERIO_SCALING_URL = %q, want http://%s:9000/scale on the provider's Service", scalingURL.Value, wantHost)
	}
	provider := deploymentNamed(t, objs, "aperio-kubernetes-provider")
	for k, v := range svc.Spec.Selector {
		if provider.Spec.Template.Labels[k] != v {
			t.Errorf("provider Service selects %s=%s, which the provider's pods do not carry", k, v)
		}
	}
	if app.Spec.Replicas != nil {
		t.Error("the app's Deployment sets replicas: re-applying it would undo the provider's count")
	}
	policies := find[*networkingv1.NetworkPolicy](objs)
	if len(policies) != 1 {
		t.Fatalf("%d NetworkPolicies, want the provider's", len(policies))
	}
	np := policies[0]
	serverLabels := deploymentNamed(t, objs, "aperio-server").Spec.Template.Labels
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if provider.Spec.Template.Labels[k] != v {
			t.Errorf("NetworkPolicy selects %s=%s, which the provider's pods do not carry", k, v)
		}
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0].PodSelector == nil {
		t.Fatalf("NetworkPolicy ingress = %+v, want one rule from the server's pods", np.Spec.Ingress)
	}
	from := np.Spec.Ingress[0].From[0]
	if from.NamespaceSelector != nil || from.IPBlock != nil || len(from.PodSelector.MatchLabels) == 0 {
		t.Errorf("NetworkPolicy admits %+v, want only the server's pods", from)
	}
	for k, v := range from.PodSelector.MatchLabels {
		if serverLabels[k] != v {
			t.Errorf("NetworkPolicy admits pods with %s=%s, which the server's pods do not carry", k, v)
		}
	}

	secret, _ := envOf(client, "APERIO_SCALING_SECRET")
	if secret.ValueFrom == nil || secret.ValueFrom.SecretKeyRef == nil || secret.ValueFrom.SecretKeyRef.Key != "scale-secret" {
		t.Errorf("the client's scaling secret comes from %+v, want the scale-secret key the provider reads", secret)
	}

	// The provider reads its webhook secret from the same Secret.
	pc := containerNamed(t, provider, "provider")
	whFile, _ := envOf(pc, "PROVIDER_WEBHOOK_SECRET_FILE")
	found := false
	for _, v := range provider.Spec.Template.Spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret.ValueFrom.SecretKeyRef.Name {
			continue
		}
		for _, m := range pc.VolumeMounts {
			if m.Name != v.Name {
				continue
			}
			for _, item := range v.Secret.Items {
				if item.Key == "webhook-secret" && whFile.Value == m.MountPath+"/"+item.Path {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("PROVIDER_WEBHOOK_SECRET_FILE = %q is not the webhook-secret key of the Secret %s mounted in the provider", whFile.Value, secret.ValueFrom.SecretKeyRef.Name)
	}

	server := containerNamed(t, deploymentNamed(t, objs, "aperio-server"), "server")
	allow, _ := envOf(server, "APERIO_OUTBOUND_ALLOWLIST")
	if allow.Value != wantHost {
		t.Errorf("server APERIO_OUTBOUND_ALLOWLIST = %q, want only the provider %q", allow.Value, wantHost)
	}
	serverURL, _ := envOf(client, "APERIO_SERVER_URL")
	if serverURL.Value != "http://aperio-server.aperio.svc.cluster.local:8080" {
		t.Errorf("client APERIO_SERVER_URL = %q, want the server's Service", serverURL.Value)
	}
}

// TestManifestsAreDecodedStrictly proves the decoder the manifest tests
// use refuses an unknown field, so a typo in a manifest cannot pass.
func TestManifestsAreDecodedStrictly(t *testing.T) {
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	doc := "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: x}\nrule:\n  - verbs: [\"*\"]\n"
	if _, _, err := dec.Decode([]byte(doc), nil, nil); err == nil {
		t.Error("a Role with the misspelled field rule decoded without error")
	}
}
