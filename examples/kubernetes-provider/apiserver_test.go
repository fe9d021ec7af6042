package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// TestRequestsTheRoleAllows runs the provider's real client against a
// small HTTP stand-in for the API server and checks two things the fake
// clientset cannot: the requests a scaling call makes on the wire, and
// that each is allowed by the Role in deploy/kubernetes/rbac.yaml (so the
// least set of verbs there is also enough).
func TestRequestsTheRoleAllows(t *testing.T) {
	var mu sync.Mutex
	var seen []string // "METHOD path"
	replicas := int32(0)
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(v); err != nil {
			t.Errorf("encode: %v", err)
		}
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		const base = "/apis/apps/v1/namespaces/shop/"
		switch r.Method + " " + r.URL.Path {
		case "GET " + base + "deployments":
			if r.URL.Query().Get("limit") != "500" {
				t.Errorf("list without the page limit: %s", r.URL.RawQuery)
			}
			write(w, appsv1.DeploymentList{
				TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DeploymentList"},
				Items: []appsv1.Deployment{
					{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: forHost(testHost)}},
					{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "shop", Labels: forHost(testHost)}},
				},
			})
		case "GET " + base + "statefulsets":
			write(w, appsv1.StatefulSetList{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSetList"}})
		case "GET " + base + "deployments/web/scale":
			write(w, autoscalingv1.Scale{
				TypeMeta:   metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "7"},
				Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
			})
		case "PUT " + base + "deployments/web/scale":
			// The client sends protobuf or JSON, as it negotiates.
			b, err := io.ReadAll(r.Body)
			var obj runtime.Object
			if err == nil {
				obj, _, err = scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
			}
			sc, ok := obj.(*autoscalingv1.Scale)
			if err != nil || !ok || sc.ResourceVersion != "7" {
				t.Errorf("scale update %q (%v): want a Scale with the resourceVersion read, so a concurrent change conflicts", b, err)
				http.Error(w, "bad scale", http.StatusBadRequest)
				return
			}
			replicas = sc.Spec.Replicas
			sc.TypeMeta = metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"}
			write(w, sc)
		default:
			http.Error(w, "not served", http.StatusNotFound)
		}
	}))
	t.Cleanup(api.Close)

	rec := callThroughAPI(t, api.URL, Config{Secret: testSecret, Namespace: "shop"}, 2)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d %q, want 200", rec.Code, rec.Body.String())
	}

	mu.Lock()
	defer mu.Unlock()
	if replicas != 2 {
		t.Errorf("replicas on the API server = %d, want 2", replicas)
	}
	want := []string{
		"GET /apis/apps/v1/namespaces/shop/deployments",
		"GET /apis/apps/v1/namespaces/shop/statefulsets",
		"GET /apis/apps/v1/namespaces/shop/deployments/web/scale",
		"PUT /apis/apps/v1/namespaces/shop/deployments/web/scale",
	}
	if !slices.Equal(seen, want) {
		t.Errorf("requests =\n  %s\nwant\n  %s", strings.Join(seen, "\n  "), strings.Join(want, "\n  "))
	}

	roles := find[*rbacv1.Role](manifests(t))
	if len(roles) != 1 {
		t.Fatalf("%d Roles in the manifests, want 1", len(roles))
	}
	for _, s := range seen {
		group, verb, resource := rbacFor(s)
		if !allows(roles[0], group, resource, verb) {
			t.Errorf("the Role does not allow %s (%s %s): the provider would be refused", s, verb, resource)
		}
	}
}

// callThroughAPI serves one scaling call for testHost (desired, min 0,
// max 8) by a provider whose real client talks to the API server at
// apiURL, and returns the answer; the call is bounded by 10 s.
func callThroughAPI(t *testing.T, apiURL string, cfg Config, desired int) *httptest.ResponseRecorder {
	t.Helper()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: apiURL})
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProvider(cfg, kube, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/scale", strings.NewReader(body(desired, 0, 8)))
	req.Header.Set("Authorization", "Bearer "+testSecret)
	rec := httptest.NewRecorder()
	p.routes().ServeHTTP(rec, req)
	if ctx.Err() != nil {
		t.Errorf("the call took 10 s: nothing bounded it")
	}
	return rec
}

// rbacFor maps one "METHOD /apis/apps/v1/namespaces/NS/..." or
// "METHOD /api/v1/namespaces/NS/..." request to its RBAC group, verb and
// resource.
func rbacFor(s string) (group, verb, resource string) {
	method, path, _ := strings.Cut(s, " ")
	group = "apps"
	rest, ok := strings.CutPrefix(path, "/apis/apps/v1/namespaces/")
	if !ok {
		group = ""
		rest = strings.TrimPrefix(path, "/api/v1/namespaces/")
	}
	parts := strings.Split(rest, "/")
	// parts: NS, resource[, name[, subresource]]
	resource = parts[1]
	if len(parts) == 4 {
		resource += "/" + parts[3]
	}
	switch {
	case method == http.MethodGet && len(parts) == 2:
		verb = "list"
	case method == http.MethodGet:
		verb = "get"
	case method == http.MethodPut:
		verb = "update"
	default:
		verb = strings.ToLower(method)
	}
	return group, verb, resource
}

func allows(r *rbacv1.Role, group, resource, verb string) bool {
	for _, rule := range r.Rules {
		if slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb) {
			return true
		}
	}
	return false
}

// TestEventRequestsTheRoleAllows is TestRequestsTheRoleAllows for a
// retirement and for a scaling call that stamps: the requests on the
// wire, the scale update carrying the resourceVersion read with the
// object (so a stamp written meanwhile conflicts), and each allowed by
// the Role.
func TestEventRequestsTheRoleAllows(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	replicas := int32(1)
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(v); err != nil {
			t.Errorf("encode: %v", err)
		}
	}
	web := func() appsv1.Deployment {
		return appsv1.Deployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "web-uid", ResourceVersion: "7", Annotations: forHost(testHost)},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr(replicas)},
		}
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		const base = "/apis/apps/v1/namespaces/shop/"
		const core = "/api/v1/namespaces/shop/"
		switch r.Method + " " + r.URL.Path {
		case "GET " + base + "deployments":
			write(w, appsv1.DeploymentList{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DeploymentList"}, Items: []appsv1.Deployment{web()}})
		case "GET " + base + "statefulsets":
			write(w, appsv1.StatefulSetList{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSetList"}})
		case "GET " + base + "deployments/web", "PATCH " + base + "deployments/web":
			write(w, web())
		case "GET " + base + "replicasets/web-1":
			write(w, appsv1.ReplicaSet{
				TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
				ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "rs-uid",
					OwnerReferences: []metav1.OwnerReference{controllerRef("Deployment", "web", "web-uid")}},
			})
		case "GET " + core + "pods/web-1-aaaaa", "PATCH " + core + "pods/web-1-aaaaa":
			write(w, corev1.Pod{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Name: "web-1-aaaaa", Namespace: "shop", UID: "pod-uid", CreationTimestamp: created,
					OwnerReferences: []metav1.OwnerReference{controllerRef("ReplicaSet", "web-1", "rs-uid")}},
			})
		case "GET " + base + "deployments/web/scale":
			write(w, autoscalingv1.Scale{
				TypeMeta:   metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "7"},
				Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
			})
		case "PUT " + base + "deployments/web/scale":
			b, err := io.ReadAll(r.Body)
			var obj runtime.Object
			if err == nil {
				obj, _, err = scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
			}
			sc, ok := obj.(*autoscalingv1.Scale)
			if err != nil || !ok || sc.ResourceVersion != "7" {
				t.Errorf("scale update %q (%v): want a Scale with the resourceVersion read", b, err)
				http.Error(w, "bad scale", http.StatusBadRequest)
				return
			}
			replicas = sc.Spec.Replicas
			sc.TypeMeta = metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"}
			write(w, sc)
		default:
			http.Error(w, "not served", http.StatusNotFound)
		}
	}))
	t.Cleanup(api.Close)

	kube, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p, err := newProvider(Config{Secret: testSecret, Namespace: "shop", WebhookSecret: testWebhookSecret}, kube, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev := retiredEvent{instance: "i-1", pod: "web-1-aaaaa", at: now.Add(-time.Second)}
	body := ev.body()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/events", strings.NewReader(body))
	ts := strconv.FormatInt(now.Unix(), 10)
	req.Header.Set("webhook-id", "msg_1")
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", signWith(testWebhookKey, "msg_1", ts, body))
	rec := httptest.NewRecorder()
	p.routes().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("event: status = %d %q, want 200", rec.Code, rec.Body.String())
	}
	req = httptest.NewRequestWithContext(ctx, http.MethodPost, "/scale", strings.NewReader(body1()))
	req.Header.Set("Authorization", "Bearer "+testSecret)
	rec = httptest.NewRecorder()
	p.routes().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("call: status = %d %q, want 200", rec.Code, rec.Body.String())
	}

	mu.Lock()
	defer mu.Unlock()
	want := []string{
		// The retirement.
		"GET /apis/apps/v1/namespaces/shop/deployments",
		"GET /apis/apps/v1/namespaces/shop/statefulsets",
		"GET /apis/apps/v1/namespaces/shop/deployments/web",
		"GET /api/v1/namespaces/shop/pods/web-1-aaaaa",
		"GET /apis/apps/v1/namespaces/shop/replicasets/web-1",
		"PATCH /api/v1/namespaces/shop/pods/web-1-aaaaa",
		"PUT /apis/apps/v1/namespaces/shop/deployments/web/scale",
		// The cold start call: stamp, then scale.
		"GET /apis/apps/v1/namespaces/shop/deployments",
		"GET /apis/apps/v1/namespaces/shop/statefulsets",
		"PATCH /apis/apps/v1/namespaces/shop/deployments/web",
		"GET /apis/apps/v1/namespaces/shop/deployments/web/scale",
		"PUT /apis/apps/v1/namespaces/shop/deployments/web/scale",
	}
	if !slices.Equal(seen, want) {
		t.Errorf("requests =\n  %s\nwant\n  %s", strings.Join(seen, "\n  "), strings.Join(want, "\n  "))
	}
	if replicas != 1 {
		t.Errorf("replicas on the API server = %d, want 1 (1, lowered to 0, then a cold start)", replicas)
	}
	roles := find[*rbacv1.Role](manifests(t))
	if len(roles) != 1 {
		t.Fatalf("%d Roles in the manifests, want 1", len(roles))
	}
	for _, s := range seen {
		group, verb, resource := rbacFor(s)
		if !allows(roles[0], group, resource, verb) {
			t.Errorf("the Role does not allow %s (%s %s): the provider would be refused", s, verb, resource)
		}
	}
}
