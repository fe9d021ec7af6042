package helm

import (
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// plainDir holds the manifests for users without Helm.
const plainDir = "../kubernetes"

func decodeFiles(t *testing.T, pattern string) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no files match %s (%v)", pattern, err)
	}
	var objs []runtime.Object
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeAll(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(got) == 0 {
			t.Errorf("%s: no objects", f)
		}
		objs = append(objs, got...)
	}
	return objs
}

// TestPlainManifestsDecodeStrictly decodes every document of
// deploy/kubernetes/*.yaml strictly and holds the server there to the
// same pod checks as the chart's, with the Service reaching it.
func TestPlainManifestsDecodeStrictly(t *testing.T) {
	objs := decodeFiles(t, filepath.Join(plainDir, "*.yaml"))
	server := named[*appsv1.Deployment](t, objs, "aperio-server")
	c := checkServerPod(t, server)
	svc := named[*corev1.Service](t, objs, "aperio-server")
	checkService(t, svc, server, c)
}

// TestSidecarExample decodes the chart's client example and checks that
// the sidecar dials the chart's Service (release and namespace "aperio")
// with a token of its own, never the chart's master-token Secret.
func TestSidecarExample(t *testing.T) {
	objs := decodeFiles(t, "examples/*.yaml")
	d := one[*appsv1.Deployment](t, objs)
	c := containerNamed(t, d.Spec.Template.Spec, "aperio-client")

	rel := mustRender(t, "")
	chartSecret := one[*corev1.Secret](t, rel.objs)
	chartSvc := one[*corev1.Service](t, rel.objs)

	tok, _ := envOf(c, "APERIO_SERVER_TOKEN")
	ref := tok.ValueFrom
	if tok.Value != "" || ref == nil || ref.SecretKeyRef == nil {
		t.Fatalf("sidecar APERIO_SERVER_TOKEN = %+v, want it from a Secret", tok)
	}
	if ref.SecretKeyRef.Name == chartSecret.Name || ref.SecretKeyRef.Key == "server-token" {
		t.Errorf("the sidecar reads %s/%s: that is the master token; give it a scoped client token", ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
	}
	url, _ := envOf(c, "APERIO_SERVER_URL")
	want := "http://" + chartSvc.Name + "." + chartSvc.Namespace + ".svc.cluster.local:8080"
	if url.Value != want || d.Namespace != chartSvc.Namespace {
		t.Errorf("sidecar dials %q from namespace %s, want the chart's Service %q", url.Value, d.Namespace, want)
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Error("the app's grace period does not cover the client's 30 s drain")
	}
	if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the example app mounts a service account token")
	}
}
