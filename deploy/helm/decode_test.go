package helm

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// maxManifestBytes bounds what decodeAll reads: the chart and the plain
// manifests are a few KiB, so anything near this is a runaway template.
const maxManifestBytes = 1 << 20

// scheme knows only the kinds the chart and the manifests may contain,
// so a misspelled or unexpected kind fails to decode too.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, corev1.AddToScheme, networkingv1.AddToScheme,
		policyv1.AddToScheme, rbacv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict refuses unknown and duplicated fields.
var strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// decodeAll decodes every YAML document of raw strictly; documents that
// hold only comments (Helm's "# Source:" lines, file headers) are skipped.
func decodeAll(raw []byte) ([]runtime.Object, error) {
	if len(raw) > maxManifestBytes {
		return nil, errors.New("manifest larger than 1 MiB")
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if !hasContent(doc) {
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

// hasContent reports whether doc has a line that is neither blank nor a
// comment.
func hasContent(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' && !bytes.Equal(l, []byte("---")) {
			return true
		}
	}
	return false
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

// one returns the only object of type T, failing unless there is exactly one.
func one[T runtime.Object](t *testing.T, objs []runtime.Object) T {
	t.Helper()
	found := find[T](objs)
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

// named returns the object of type T called name, failing without one.
func named[T interface {
	runtime.Object
	GetName() string
}](t *testing.T, objs []runtime.Object, name string) T {
	t.Helper()
	for _, o := range find[T](objs) {
		if o.GetName() == name {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T named %q", zero, name)
	return zero
}

func envOf(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func containerNamed(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("pod has no container %q", name)
	return corev1.Container{}
}

// TestDecoderIsStrict proves decodeAll refuses an unknown field, an
// unknown kind and a duplicated field, so a typo cannot pass the checks.
func TestDecoderIsStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  selectr: {a: b}\n",
		"unknown kind":  "apiVersion: v1\nkind: Servise\nmetadata: {name: x}\n",
		"duplicate":     "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  type: ClusterIP\n  type: LoadBalancer\n",
		"too large":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  a: \"" + string(bytes.Repeat([]byte("a"), maxManifestBytes)) + "\"\n",
	} {
		if _, err := decodeAll([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	objs, err := decodeAll([]byte("# only a comment\n---\napiVersion: v1\nkind: Service\nmetadata: {name: x}\n"))
	if err != nil || len(objs) != 1 {
		t.Errorf("a valid Service after a comment-only document: %d objects, %v", len(objs), err)
	}
}
