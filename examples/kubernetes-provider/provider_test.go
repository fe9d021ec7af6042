package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	testSecret = "s3cret-token"
	testNS     = "shop"
	testHost   = "app.example.com"
)

// testClock is a clock the test moves by hand.
type testClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fixture is a provider on a fake clientset that serves the scale
// subresource of Deployments and StatefulSets from the objects' replicas,
// as the API server does.
type fixture struct {
	t     *testing.T
	kube  *fake.Clientset
	p     *provider
	clock *testClock
}

func newFixture(t *testing.T, cfg Config, objs ...runtime.Object) *fixture {
	t.Helper()
	kube := fake.NewClientset(objs...)
	addScaleSubresource(kube)
	if cfg.Secret == "" {
		cfg.Secret = testSecret
	}
	if cfg.Namespace == "" {
		cfg.Namespace = testNS
	}
	clock := &testClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	p, err := newProvider(cfg, kube, clock.now)
	if err != nil {
		t.Fatalf("newProvider: %v", err)
	}
	return &fixture{t: t, kube: kube, p: p, clock: clock}
}

var (
	deploymentsGVR  = appsv1.SchemeGroupVersion.WithResource("deployments")
	statefulSetsGVR = appsv1.SchemeGroupVersion.WithResource("statefulsets")
)

// addScaleSubresource teaches kube's reactors the scale subresource, which
// the fake's object tracker does not serve: get reads spec.replicas of the
// object, update writes it.
func addScaleSubresource(kube *fake.Clientset) {
	for _, gvr := range []schema.GroupVersionResource{deploymentsGVR, statefulSetsGVR} {
		kube.PrependReactor("get", gvr.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			ga := a.(k8stesting.GetAction)
			if ga.GetSubresource() != "scale" {
				return false, nil, nil
			}
			obj, err := kube.Tracker().Get(gvr, ga.GetNamespace(), ga.GetName())
			if err != nil {
				return true, nil, err
			}
			return true, &autoscalingv1.Scale{
				ObjectMeta: metav1.ObjectMeta{Name: ga.GetName(), Namespace: ga.GetNamespace()},
				Spec:       autoscalingv1.ScaleSpec{Replicas: *replicasOf(obj)},
			}, nil
		})
		kube.PrependReactor("update", gvr.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			ua := a.(k8stesting.UpdateAction)
			if ua.GetSubresource() != "scale" {
				return false, nil, nil
			}
			sc := ua.GetObject().(*autoscalingv1.Scale)
			obj, err := kube.Tracker().Get(gvr, ua.GetNamespace(), sc.Name)
			if err != nil {
				return true, nil, err
			}
			obj = obj.DeepCopyObject()
			*replicasOf(obj) = sc.Spec.Replicas
			if err := kube.Tracker().Update(gvr, obj, ua.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, sc.DeepCopy(), nil
		})
	}
}

func replicasOf(obj runtime.Object) *int32 {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Spec.Replicas
	case *appsv1.StatefulSet:
		return o.Spec.Replicas
	}
	panic(fmt.Sprintf("replicasOf(%T)", obj))
}

func ptr[T any](v T) *T { return &v }

func deployment(name string, replicas int32, annotations, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Annotations: annotations, Labels: labels},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr(replicas)},
	}
}

func statefulSet(name string, replicas int32, annotations map[string]string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Annotations: annotations},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr(replicas)},
	}
}

func forHost(host string) map[string]string { return map[string]string{annHostname: host} }

// body is a call's JSON body.
func body(desired, min, max int) string {
	return fmt.Sprintf(`{"reason":"cold_start","hostname":%q,"path":null,"org_id":null,"current":0,"desired":%d,"min":%d,"max":%d}`,
		testHost, desired, min, max)
}

// call sends one scaling call with the test secret and key (none when "").
func (f *fixture) call(key, b string) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.callCtx(context.Background(), "Bearer "+testSecret, key, b)
}

func (f *fixture) callCtx(ctx context.Context, auth, key, b string) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.callFull(ctx, auth, key, b, nil)
}

// callWith sends one call with the test secret, key and body, after edit
// changed its headers.
func (f *fixture) callWith(key, b string, edit func(http.Header)) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.callFull(context.Background(), "Bearer "+testSecret, key, b, edit)
}

func (f *fixture) callFull(ctx context.Context, auth, key, b string, edit func(http.Header)) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/scale", strings.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if edit != nil {
		edit(req.Header)
	}
	rec := httptest.NewRecorder()
	f.p.routes().ServeHTTP(rec, req)
	return rec
}

// replicas is the object's replicas in the fake cluster.
func (f *fixture) replicas(gvr schema.GroupVersionResource, name string) int32 {
	f.t.Helper()
	obj, err := f.kube.Tracker().Get(gvr, testNS, name)
	if err != nil {
		f.t.Fatalf("get %s %s: %v", gvr.Resource, name, err)
	}
	return *replicasOf(obj)
}

// scaleUpdates counts the scale updates the provider sent.
func (f *fixture) scaleUpdates() int {
	n := 0
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "scale" {
			n++
		}
	}
	return n
}

// apiCalls counts every action the provider sent to the API server.
func (f *fixture) apiCalls() int { return len(f.kube.Actions()) }

func decodeResult(t *testing.T, rec *httptest.ResponseRecorder) Result {
	t.Helper()
	var r Result
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("answer %d %q is not a Result: %v", rec.Code, rec.Body.String(), err)
	}
	return r
}

func TestAuth(t *testing.T) {
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"none", "", http.StatusUnauthorized},
		{"wrong", "Bearer nope", http.StatusUnauthorized},
		{"prefix of the secret", "Bearer " + testSecret[:4], http.StatusUnauthorized},
		{"secret with more", "Bearer " + testSecret + "x", http.StatusUnauthorized},
		{"other scheme", "Basic " + testSecret, http.StatusUnauthorized},
		{"bare secret", testSecret, http.StatusUnauthorized},
		{"right", "Bearer " + testSecret, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
			rec := f.callCtx(context.Background(), tc.auth, "", body(1, 0, 8))
			if rec.Code != tc.want {
				t.Fatalf("status = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
			wantReplicas, wantCalls := int32(1), 1
			if tc.want == http.StatusUnauthorized {
				wantReplicas, wantCalls = 0, 0
				if got := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
					t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", got)
				}
				if n := f.apiCalls(); n != 0 {
					t.Errorf("an unauthorized call made %d API requests, want 0", n)
				}
			}
			if got := f.replicas(deploymentsGVR, "web"); got != wantReplicas {
				t.Errorf("replicas = %d, want %d", got, wantReplicas)
			}
			if n := f.scaleUpdates(); n != wantCalls {
				t.Errorf("scale updates = %d, want %d", n, wantCalls)
			}
		})
	}
}

func TestScaleDeployment(t *testing.T) {
	f := newFixture(t, Config{},
		deployment("web", 0, forHost(testHost), nil),
		deployment("other", 2, forHost("other.example.com"), nil))
	rec := f.call("", body(1, 0, 8))
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d %q, want 200", rec.Code, rec.Body.String())
	}
	want := Result{Kind: kindDeployment, Namespace: testNS, Name: "web", Replicas: 1, Previous: 0}
	if got := decodeResult(t, rec); got != want {
		t.Errorf("answer = %+v, want %+v", got, want)
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 1 {
		t.Errorf("web replicas = %d, want 1", got)
	}
	if got := f.replicas(deploymentsGVR, "other"); got != 2 {
		t.Errorf("other replicas = %d, want 2 (untouched)", got)
	}
}

func TestReplicaCounts(t *testing.T) {
	for _, tc := range []struct {
		name             string
		start            int32
		desired, lo, hi  int
		annotations      map[string]string
		providerMax      int32
		statefulSet      bool
		want             int32
		wantScaleUpdates int
	}{
		{name: "scale out", start: 2, desired: 3, lo: 0, hi: 8, want: 3, wantScaleUpdates: 1},
		{name: "scale in", start: 3, desired: 2, lo: 0, hi: 8, want: 2, wantScaleUpdates: 1},
		{name: "scale in to zero", start: 1, desired: 0, lo: 0, hi: 8, want: 0, wantScaleUpdates: 1},
		{name: "cold start from zero", start: 0, desired: 1, lo: 0, hi: 8, want: 1, wantScaleUpdates: 1},
		{name: "already there", start: 2, desired: 2, lo: 0, hi: 8, want: 2, wantScaleUpdates: 0},
		{name: "capped by the call's max", start: 1, desired: 12, lo: 0, hi: 8, want: 8, wantScaleUpdates: 1},
		{name: "raised to the call's min", start: 0, desired: 1, lo: 3, hi: 8, want: 3, wantScaleUpdates: 1},
		{name: "max 0 is cold starts only", start: 0, desired: 4, lo: 0, hi: 0, want: 1, wantScaleUpdates: 1},
		{name: "absurd desired", start: 1, desired: 1 << 40, lo: 0, hi: 1 << 40, want: 100, wantScaleUpdates: 1},
		{name: "provider max", start: 1, desired: 9, lo: 0, hi: 20, providerMax: 5, want: 5, wantScaleUpdates: 1},
		{name: "annotation max", start: 1, desired: 6, lo: 0, hi: 8,
			annotations: map[string]string{annMaxReplicas: "4"}, want: 4, wantScaleUpdates: 1},
		{name: "annotation max wins over the call's min", start: 1, desired: 2, lo: 5, hi: 8,
			annotations: map[string]string{annMaxReplicas: " 3 "}, want: 3, wantScaleUpdates: 1},
		{name: "annotation max 0 keeps it at zero", start: 0, desired: 1, lo: 0, hi: 8,
			annotations: map[string]string{annMaxReplicas: "0"}, want: 0, wantScaleUpdates: 0},
		{name: "statefulset", start: 1, desired: 3, lo: 0, hi: 8, statefulSet: true, want: 3, wantScaleUpdates: 1},
		{name: "statefulset to zero", start: 2, desired: 0, lo: 0, hi: 8, statefulSet: true, want: 0, wantScaleUpdates: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := forHost(testHost)
			for k, v := range tc.annotations {
				ann[k] = v
			}
			obj, gvr, kind := runtime.Object(deployment("web", tc.start, ann, nil)), deploymentsGVR, kindDeployment
			if tc.statefulSet {
				obj, gvr, kind = statefulSet("web", tc.start, ann), statefulSetsGVR, kindStatefulSet
			}
			f := newFixture(t, Config{MaxReplicas: tc.providerMax}, obj)
			rec := f.call("", body(tc.desired, tc.lo, tc.hi))
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d %q, want 200", rec.Code, rec.Body.String())
			}
			if got := f.replicas(gvr, "web"); got != tc.want {
				t.Errorf("replicas = %d, want %d", got, tc.want)
			}
			want := Result{Kind: kind, Namespace: testNS, Name: "web", Replicas: tc.want, Previous: tc.start}
			if got := decodeResult(t, rec); got != want {
				t.Errorf("answer = %+v, want %+v", got, want)
			}
			if n := f.scaleUpdates(); n != tc.wantScaleUpdates {
				t.Errorf("scale updates = %d, want %d", n, tc.wantScaleUpdates)
			}
		})
	}
}

func TestSelection(t *testing.T) {
	labelled := map[string]string{annHostname: testHost} // a label, not an annotation
	for _, tc := range []struct {
		name     string
		objs     []runtime.Object
		path     string // the call's path; "" sends null
		want     int
		wantName string
	}{
		{name: "no object", want: http.StatusNotFound},
		{name: "matching label but no annotation", want: http.StatusNotFound,
			objs: []runtime.Object{deployment("web", 1, nil, labelled), deployment("app.example.com", 1, map[string]string{"note": testHost}, labelled)}},
		{name: "annotation for another hostname", want: http.StatusNotFound,
			objs: []runtime.Object{deployment("web", 1, forHost("api.example.com"), nil)}},
		{name: "annotation with a longer hostname", want: http.StatusNotFound,
			objs: []runtime.Object{deployment("web", 1, forHost("x"+testHost), nil)}},
		{name: "another namespace", want: http.StatusNotFound,
			objs: []runtime.Object{&appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "kube-system", Annotations: forHost(testHost)},
				Spec:       appsv1.DeploymentSpec{Replicas: ptr(int32(1))},
			}}},
		{name: "being deleted", want: http.StatusNotFound,
			objs: []runtime.Object{&appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, Annotations: forHost(testHost),
					DeletionTimestamp: ptr(metav1.Now()), Finalizers: []string{"test"}},
				Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1))},
			}}},
		{name: "one of several hostnames, other case, trailing dot", want: http.StatusOK, wantName: "web",
			objs: []runtime.Object{deployment("web", 1, forHost("api.example.com, App.Example.COM."), nil)}},
		{name: "path annotation without a path in the call", want: http.StatusNotFound,
			objs: []runtime.Object{deployment("web", 1, map[string]string{annHostname: testHost, annPath: "/api"}, nil)}},
		{name: "path annotation matches the call's path", path: "/api", want: http.StatusOK, wantName: "api",
			objs: []runtime.Object{
				deployment("web", 1, forHost(testHost), nil),
				deployment("api", 1, map[string]string{annHostname: testHost, annPath: "/api"}, nil),
			}},
		{name: "root path annotation matches a null path", want: http.StatusOK, wantName: "web",
			objs: []runtime.Object{
				deployment("web", 1, map[string]string{annHostname: testHost, annPath: "/"}, nil),
				deployment("api", 1, map[string]string{annHostname: testHost, annPath: "/api"}, nil),
			}},
		{name: "ambiguous deployment and statefulset", want: http.StatusConflict,
			objs: []runtime.Object{deployment("web", 1, forHost(testHost), nil), statefulSet("web-db", 1, forHost(testHost))}},
		{name: "ambiguous deployments", want: http.StatusConflict,
			objs: []runtime.Object{deployment("a", 1, forHost(testHost), nil), deployment("b", 1, forHost(testHost), nil)}},
		{name: "bad max-replicas annotation", want: http.StatusConflict,
			objs: []runtime.Object{deployment("web", 1, map[string]string{annHostname: testHost, annMaxReplicas: "-2"}, nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, tc.objs...)
			path := "null"
			if tc.path != "" {
				path = fmt.Sprintf("%q", tc.path)
			}
			rec := f.call("", fmt.Sprintf(`{"reason":"scale_out","hostname":%q,"path":%s,"desired":3,"min":0,"max":8}`, testHost, path))
			if rec.Code != tc.want {
				t.Fatalf("status = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if tc.want != http.StatusOK {
				if n := f.scaleUpdates(); n != 0 {
					t.Errorf("a refused call made %d scale updates, want 0", n)
				}
				return
			}
			if got := decodeResult(t, rec).Name; got != tc.wantName {
				t.Errorf("scaled %q, want %q", got, tc.wantName)
			}
			if got := f.replicas(deploymentsGVR, tc.wantName); got != 3 {
				t.Errorf("replicas = %d, want 3", got)
			}
			if n := f.scaleUpdates(); n != 1 {
				t.Errorf("scale updates = %d, want 1", n)
			}
		})
	}
}

func TestAmbiguousAnswerNamesTheObjects(t *testing.T) {
	f := newFixture(t, Config{}, deployment("web", 1, forHost(testHost), nil), statefulSet("web-db", 1, forHost(testHost)))
	rec := f.call("", body(2, 0, 8))
	if rec.Code != http.StatusConflict {
		t.Fatalf("status = %d, want 409", rec.Code)
	}
	for _, name := range []string{"Deployment/web", "StatefulSet/web-db"} {
		if !strings.Contains(rec.Body.String(), name) {
			t.Errorf("answer %q does not name %s", rec.Body.String(), name)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	f := newFixture(t, Config{KeyTTL: time.Minute}, deployment("web", 0, forHost(testHost), nil))
	first := f.call("key-1", body(2, 0, 8))
	if first.Code != http.StatusOK {
		t.Fatalf("first call: status = %d %q", first.Code, first.Body.String())
	}
	// Someone else changes the count: a replay must not undo it.
	f.setReplicas("web", 5)
	again := f.call("key-1", body(2, 0, 8))
	if again.Code != first.Code || again.Body.String() != first.Body.String() {
		t.Errorf("replay = %d %q, want the first answer %d %q", again.Code, again.Body.String(), first.Code, first.Body.String())
	}
	if got := again.Header().Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("replay's Idempotent-Replayed = %q, want true", got)
	}
	if n := f.scaleUpdates(); n != 1 {
		t.Errorf("scale updates after a replay = %d, want 1", n)
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 5 {
		t.Errorf("replicas = %d, want 5 (the replay changed nothing)", got)
	}

	if rec := f.call("key-1", body(3, 0, 8)); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("same key, other desired: status = %d, want 422", rec.Code)
	}
	if rec := f.call("key-2", body(2, 0, 8)); rec.Code != http.StatusOK || f.replicas(deploymentsGVR, "web") != 2 {
		t.Errorf("new key: status = %d, replicas %d, want 200 and 2", rec.Code, f.replicas(deploymentsGVR, "web"))
	}

	// After the TTL the key is forgotten: the same call is served again.
	f.setReplicas("web", 5)
	f.clock.advance(time.Minute)
	if rec := f.call("key-1", body(2, 0, 8)); rec.Code != http.StatusOK || rec.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("expired key: status = %d, replayed %q, want a fresh 200", rec.Code, rec.Header().Get("Idempotent-Replayed"))
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 2 {
		t.Errorf("replicas after the expired key's call = %d, want 2", got)
	}
}

// setReplicas changes an object's replicas behind the provider's back.
func (f *fixture) setReplicas(name string, n int32) {
	f.t.Helper()
	obj, err := f.kube.Tracker().Get(deploymentsGVR, testNS, name)
	if err != nil {
		f.t.Fatal(err)
	}
	d := obj.(*appsv1.Deployment).DeepCopy()
	d.Spec.Replicas = ptr(n)
	if err := f.kube.Tracker().Update(deploymentsGVR, d, testNS); err != nil {
		f.t.Fatal(err)
	}
}

func TestIdempotencyKeyFailureIsNotReplayed(t *testing.T) {
	f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
	fail := true
	f.kube.PrependReactor("update", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, apierrors.NewInternalError(fmt.Errorf("etcd is down"))
		}
		return false, nil, nil
	})
	if rec := f.call("key-1", body(1, 0, 8)); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("failing cluster: status = %d, want 503", rec.Code)
	}
	fail = false
	rec := f.call("key-1", body(1, 0, 8))
	if rec.Code != http.StatusOK || rec.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after a failure: status = %d, replayed %q, want a fresh 200", rec.Code, rec.Header().Get("Idempotent-Replayed"))
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 1 {
		t.Errorf("replicas = %d, want 1", got)
	}
}

func TestIdempotencyKeyConcurrent(t *testing.T) {
	f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.kube.PrependReactor("update", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(entered) })
		<-release
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	recs := make([]*httptest.ResponseRecorder, 2)
	wg.Go(func() { recs[0] = f.callCtx(ctx, "Bearer "+testSecret, "key-1", body(1, 0, 8)) })
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first call never reached the update")
	}
	waiting := make(chan struct{})
	f.p.followerWaitingForTest = func() { close(waiting) }
	wg.Go(func() { recs[1] = f.callCtx(ctx, "Bearer "+testSecret, "key-1", body(1, 0, 8)) })
	// The second call waits for the first's answer instead of scaling.
	select {
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("the second call never waited for the first")
	}
	close(release)
	wg.Wait()
	if recs[0].Code != http.StatusOK || recs[1].Code != http.StatusOK || recs[0].Body.String() != recs[1].Body.String() {
		t.Errorf("answers = %d %q and %d %q, want the same 200", recs[0].Code, recs[0].Body.String(), recs[1].Code, recs[1].Body.String())
	}
	if n := f.scaleUpdates(); n != 1 {
		t.Errorf("scale updates = %d, want 1", n)
	}
}

func TestKeyCacheBounded(t *testing.T) {
	clock := &testClock{t: time.Unix(0, 0)}
	c := newKeyCache(64, time.Hour, clock.now)
	for i := range 10000 {
		e, leader, err := c.begin(fmt.Sprintf("k%d", i), "fp")
		if err != nil || !leader {
			t.Fatalf("begin(k%d) = leader %v, %v; want a new leader", i, leader, err)
		}
		c.finish(fmt.Sprintf("k%d", i), e, answer{status: 200}, true)
		if n := c.len(); n > 64 {
			t.Fatalf("after %d keys the cache holds %d, want at most 64", i+1, n)
		}
	}
	if _, leader, _ := c.begin("k9999", "fp"); leader {
		t.Error("the newest key was forgotten")
	}
	if _, leader, _ := c.begin("k0", "fp"); !leader {
		t.Error("the oldest key is still remembered past the bound")
	}
}

func TestManyKeysThroughTheHandler(t *testing.T) {
	f := newFixture(t, Config{MaxKeys: 16}, deployment("web", 0, forHost(testHost), nil))
	for i := range 200 {
		if rec := f.call(fmt.Sprintf("flood-%d", i), body(1, 0, 8)); rec.Code != http.StatusOK {
			t.Fatalf("call %d: status = %d", i, rec.Code)
		}
	}
	if n := f.p.keys.len(); n != 16 {
		t.Errorf("keys remembered = %d, want the bound 16", n)
	}
	if n := f.scaleUpdates(); n != 1 {
		t.Errorf("scale updates = %d, want 1 (the others found it at 1)", n)
	}
}

func TestBadCalls(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, tc := range []struct {
		name, body, key string
		want            int
	}{
		{name: "huge body", body: `{"hostname":"` + strings.Repeat("a", 1<<20) + `"}`, want: http.StatusRequestEntityTooLarge},
		{name: "empty body", body: ``, want: http.StatusBadRequest},
		{name: "not JSON", body: `desired=3`, want: http.StatusBadRequest},
		{name: "truncated JSON", body: `{"hostname":"app.example.com","desired":`, want: http.StatusBadRequest},
		{name: "two values", body: body(1, 0, 8) + body(5, 0, 8), want: http.StatusBadRequest},
		{name: "array", body: `[1,2]`, want: http.StatusBadRequest},
		{name: "desired missing", body: `{"hostname":"app.example.com","min":0,"max":8}`, want: http.StatusBadRequest},
		{name: "desired null", body: `{"hostname":"app.example.com","desired":null}`, want: http.StatusBadRequest},
		{name: "desired negative", body: body(-1, 0, 8), want: http.StatusBadRequest},
		{name: "desired a string", body: `{"hostname":"app.example.com","desired":"3"}`, want: http.StatusBadRequest},
		{name: "desired overflows", body: `{"hostname":"app.example.com","desired":1e400}`, want: http.StatusBadRequest},
		{name: "desired fractional", body: `{"hostname":"app.example.com","desired":1.5}`, want: http.StatusBadRequest},
		{name: "min negative", body: body(1, -1, 8), want: http.StatusBadRequest},
		{name: "min above max", body: body(1, 5, 2), want: http.StatusBadRequest},
		{name: "hostname missing", body: `{"desired":1}`, want: http.StatusBadRequest},
		{name: "hostname too long", body: `{"hostname":"` + strings.Repeat("a", 254) + `","desired":1}`, want: http.StatusBadRequest},
		{name: "hostname with a slash", body: `{"hostname":"a.com/../x","desired":1}`, want: http.StatusBadRequest},
		{name: "hostname with a comma", body: `{"hostname":"a.com,app.example.com","desired":1}`, want: http.StatusBadRequest},
		{name: "path not absolute", body: `{"hostname":"app.example.com","path":"api","desired":1}`, want: http.StatusBadRequest},
		{name: "path with a control byte", body: `{"hostname":"app.example.com","path":"/a\u0000","desired":1}`, want: http.StatusBadRequest},
		{name: "reason too long", body: `{"reason":"` + long + `","hostname":"app.example.com","desired":1}`, want: http.StatusBadRequest},
		{name: "key too long", body: body(1, 0, 8), key: long, want: http.StatusBadRequest},
		{name: "key with a control byte", body: body(1, 0, 8), key: "k\x01", want: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
			rec := f.call(tc.key, tc.body)
			if rec.Code != tc.want {
				t.Fatalf("status = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if n := f.apiCalls(); n != 0 {
				t.Errorf("a bad call made %d API requests, want 0", n)
			}
			if len(rec.Body.String()) > 1024 {
				t.Errorf("answer is %d bytes: a hostile input must not be echoed whole", rec.Body.Len())
			}
		})
	}
}

func TestUnknownFieldsAreIgnored(t *testing.T) {
	f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
	rec := f.call("", `{"reason":"cold_start","hostname":"app.example.com","desired":1,"future":{"x":[1]}}`)
	if rec.Code != http.StatusOK || f.replicas(deploymentsGVR, "web") != 1 {
		t.Fatalf("status = %d %q, replicas %d; want 200 and 1", rec.Code, rec.Body.String(), f.replicas(deploymentsGVR, "web"))
	}
}

func TestAPIErrors(t *testing.T) {
	for _, tc := range []struct {
		name           string
		verb, resource string
		err            error
		times          int // how many calls fail; 0 means every one
		want           int
		wantRetryAfter string
		wantReplicas   int32
	}{
		{name: "list fails", verb: "list", resource: "deployments", err: apierrors.NewInternalError(fmt.Errorf("boom")),
			want: http.StatusServiceUnavailable, wantRetryAfter: "5", wantReplicas: 0},
		{name: "statefulset list fails", verb: "list", resource: "statefulsets", err: apierrors.NewServiceUnavailable("later"),
			want: http.StatusServiceUnavailable, wantRetryAfter: "5", wantReplicas: 0},
		{name: "throttled", verb: "get", resource: "deployments", err: apierrors.NewTooManyRequests("slow down", 7),
			want: http.StatusServiceUnavailable, wantRetryAfter: "7", wantReplicas: 0},
		{name: "timeout", verb: "update", resource: "deployments", err: apierrors.NewTimeoutError("slow", 3),
			want: http.StatusServiceUnavailable, wantRetryAfter: "3", wantReplicas: 0},
		{name: "forbidden", verb: "update", resource: "deployments",
			err:  apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments/scale"}, "web", fmt.Errorf("rbac")),
			want: http.StatusServiceUnavailable, wantRetryAfter: "5", wantReplicas: 0},
		{name: "object gone", verb: "get", resource: "deployments", err: apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web"),
			want: http.StatusNotFound, wantReplicas: 0},
		{name: "one conflict is retried", verb: "update", resource: "deployments", times: 1,
			err:  apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", fmt.Errorf("changed")),
			want: http.StatusOK, wantReplicas: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
			failed := 0
			f.kube.PrependReactor(tc.verb, tc.resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				if tc.times > 0 && failed >= tc.times {
					return false, nil, nil
				}
				failed++
				return true, nil, tc.err
			})
			rec := f.call("", body(2, 0, 8))
			if rec.Code != tc.want {
				t.Fatalf("status = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if got := rec.Header().Get("Retry-After"); got != tc.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.wantRetryAfter)
			}
			if got := f.replicas(deploymentsGVR, "web"); got != tc.wantReplicas {
				t.Errorf("replicas = %d, want %d", got, tc.wantReplicas)
			}
			if strings.Contains(rec.Body.String(), "rbac") || strings.Contains(rec.Body.String(), "boom") {
				t.Errorf("answer %q carries the API server's error: details go to the log", rec.Body.String())
			}
		})
	}
}

// TestAPITimeoutBoundsTheCall runs the provider against an API server that
// never answers: the call must end with a 503 once the API timeout is
// spent, not hang until Aperio gives up.
func TestAPITimeoutBoundsTheCall(t *testing.T) {
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(stuck.Close)
	rec := callThroughAPI(t, stuck.URL, Config{Secret: testSecret, Namespace: testNS, APITimeout: 100 * time.Millisecond}, 1)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("status = %d, Retry-After %q; want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
}

func TestTooManyInFlight(t *testing.T) {
	f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
	for range cap(f.p.sem) {
		f.p.sem <- struct{}{}
	}
	rec := f.call("key-1", body(1, 0, 8))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("status = %d, Retry-After %q; want 429 and 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	if n := f.apiCalls(); n != 0 {
		t.Errorf("a refused call made %d API requests", n)
	}
	for range cap(f.p.sem) {
		<-f.p.sem
	}
	// The refusal was not remembered against the key.
	if rec := f.call("key-1", body(1, 0, 8)); rec.Code != http.StatusOK {
		t.Errorf("same key once there is room: status = %d, want 200", rec.Code)
	}
}

func TestListPagesBounded(t *testing.T) {
	calls := 0
	err := listPages(context.Background(), "", func(_ context.Context, o metav1.ListOptions) (string, error) {
		calls++
		if o.Limit != listPageSize {
			t.Errorf("Limit = %d, want %d", o.Limit, listPageSize)
		}
		return "more", nil
	})
	if err != errTooManyObjects || calls != maxListPages {
		t.Errorf("endless listing: err = %v after %d pages, want errTooManyObjects after %d", err, calls, maxListPages)
	}
}

func TestHealthz(t *testing.T) {
	f := newFixture(t, Config{})
	rec := httptest.NewRecorder()
	f.p.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Errorf("GET /healthz = %d %q, want 200 ok", rec.Code, rec.Body.String())
	}
}

func TestFollowerThatGivesUp(t *testing.T) {
	f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
	// A leader that never finishes: the key's entry stays pending.
	if _, leader, err := f.p.keys.begin("key-1", fmt.Sprintf("%s\x00/\x00%d\x00%d\x00%d", testHost, 1, 0, 8)); !leader || err != nil {
		t.Fatalf("begin = leader %v, %v", leader, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.p.followerWaitingForTest = cancel // the caller leaves as soon as it waits
	rec := f.callCtx(ctx, "Bearer "+testSecret, "key-1", body(1, 0, 8))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("status = %d, Retry-After %q; want 503 with Retry-After, never a bare 200", rec.Code, rec.Header().Get("Retry-After"))
	}
	if n := f.apiCalls(); n != 0 {
		t.Errorf("a follower made %d API requests", n)
	}
}

// FuzzDecodeCall feeds arbitrary bodies to the handler: it must never
// panic, and whatever it accepts must set a count within the bounds.
func FuzzDecodeCall(f *testing.F) {
	for _, seed := range []string{
		body(1, 0, 8), body(0, 0, 0), body(1<<40, 0, 1<<40), body(-1, 0, 8), `{"hostname":"*.example.com","path":"/api","desired":2}`,
		`{"desired":1e400}`, `[`, `null`, `{"hostname":"app.example.com","desired":3,"min":9,"max":2}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b string) {
		fx := newFixture(t, Config{MaxReplicas: 5}, deployment("web", 1, map[string]string{annHostname: testHost + ",*.example.com", annPath: "/"}, nil))
		rec := fx.call("", b)
		switch rec.Code {
		case http.StatusOK:
			if got := fx.replicas(deploymentsGVR, "web"); got < 0 || got > 5 {
				t.Errorf("accepted %q and set replicas %d, outside [0, 5]", b, got)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusNotFound:
			if got := fx.replicas(deploymentsGVR, "web"); got != 1 {
				t.Errorf("refused %q with %d but replicas changed to %d", b, rec.Code, got)
			}
		default:
			t.Errorf("body %q: status %d", b, rec.Code)
		}
	})
}
