package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// testWebhookKey is the HMAC key behind testWebhookSecret.
var (
	testWebhookKey    = []byte("0123456789abcdef0123456789abcdef")
	testWebhookSecret = "whsec_" + base64.StdEncoding.EncodeToString(testWebhookKey)
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// newEventFixture is a fixture whose provider has the test webhook
// secret.
func newEventFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	return newFixture(t, Config{WebhookSecret: testWebhookSecret}, objs...)
}

// signWith is the webhook-signature of one delivery under key, computed
// here independently of the provider's code.
func signWith(key []byte, id, ts string, body string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%s.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// event delivers body as webhook id, signed with the test key and
// stamped with the fixture's clock, after edit changed the headers.
func (f *fixture) event(id, body string, edit func(http.Header)) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/events", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	ts := strconv.FormatInt(f.clock.now().Unix(), 10)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", signWith(testWebhookKey, id, ts, body))
	if edit != nil {
		edit(req.Header)
	}
	rec := httptest.NewRecorder()
	f.p.routes().ServeHTTP(rec, req)
	return rec
}

// retiredEvent is an instance_retired body for testHost, "/".
type retiredEvent struct {
	instance, pod string
	at            time.Time
	min           int
}

func (e retiredEvent) body() string {
	return fmt.Sprintf(`{"event":"instance_retired","at":%q,"org_id":"default","hostname":%q,"path":"/",`+
		`"detail":{"actor":"token:t1","summary":"instance retired","client_id":"c-1","instance_id":%q,"name":%q,`+
		`"token_id":"t1","reason":"idle","idle_action":"wait","binds":[{"hostname":%q,"path":"/"}],"min":%d,"future_field":[1]}}`,
		e.at.UTC().Format(time.RFC3339Nano), testHost, e.instance, e.pod, testHost, e.min)
}

// retired is an event for instance inst of pod, a second before the
// fixture's clock.
func (f *fixture) retired(inst, pod string) retiredEvent {
	return retiredEvent{instance: inst, pod: pod, at: f.clock.now().Add(-time.Second)}
}

// created is a time before every test event.
var created = metav1.NewTime(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))

// app is a Deployment "web" (uid web-uid) annotated for testHost, its
// ReplicaSet and one pod per name, each controlled by the one above.
func app(replicas int32, pods ...string) []runtime.Object {
	d := deployment("web", replicas, forHost(testHost), nil)
	d.UID = "web-uid"
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f8", Namespace: testNS, UID: "rs-uid",
		OwnerReferences: []metav1.OwnerReference{controllerRef("Deployment", "web", d.UID)}}}
	objs := []runtime.Object{d, rs}
	for _, name := range pods {
		objs = append(objs, pod(name, controllerRef("ReplicaSet", rs.Name, rs.UID)))
	}
	return objs
}

func controllerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr(true)}
}

func pod(name string, owner metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID(name + "-uid"),
		CreationTimestamp: created, OwnerReferences: []metav1.OwnerReference{owner}}}
}

// podCost is the pod's deletion cost annotation, "" without one; gone
// reports the pod deleted.
func (f *fixture) podCost(name string) (cost string, gone bool) {
	f.t.Helper()
	obj, err := f.kube.Tracker().Get(podsGVR, testNS, name)
	if apierrors.IsNotFound(err) {
		return "", true
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return obj.(*corev1.Pod).Annotations[annPodDeletionCost], false
}

// writes counts the actions that change something in the cluster.
func (f *fixture) writes() int {
	n := 0
	for _, a := range f.kube.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			n++
		}
	}
	return n
}

func decodeRetire(t *testing.T, rec *httptest.ResponseRecorder) retireResult {
	t.Helper()
	var r retireResult
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("answer %d %q is not a retirement result: %v", rec.Code, rec.Body.String(), err)
	}
	return r
}

func TestRetireLowersToZero(t *testing.T) {
	f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
	rec := f.event("msg_1", f.retired("i-1", "web-7d9f8-aaaaa").body(), nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d %q, want 200", rec.Code, rec.Body.String())
	}
	want := retireResult{Action: actionLowered, Kind: kindDeployment, Namespace: testNS, Name: "web", Replicas: 0, Previous: 1, Pod: "web-7d9f8-aaaaa"}
	if got := decodeRetire(t, rec); got != want {
		t.Errorf("answer = %+v, want %+v", got, want)
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 0 {
		t.Errorf("replicas = %d, want 0", got)
	}
}

func TestRetireMarksTheRetiredPod(t *testing.T) {
	f := newEventFixture(t, app(3, "web-7d9f8-aaaaa", "web-7d9f8-bbbbb", "web-7d9f8-ccccc")...)
	rec := f.event("msg_1", f.retired("i-2", "web-7d9f8-bbbbb").body(), nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d %q, want 200", rec.Code, rec.Body.String())
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 2 {
		t.Errorf("replicas = %d, want 2", got)
	}
	for name, want := range map[string]string{"web-7d9f8-aaaaa": "", "web-7d9f8-bbbbb": retiredPodDeletionCost, "web-7d9f8-ccccc": ""} {
		if got, gone := f.podCost(name); got != want || gone {
			t.Errorf("pod %s: deletion cost %q (deleted %v), want %q", name, got, gone, want)
		}
	}
	// The mark is written before the replicas go down, or the
	// ReplicaSet could already have picked another pod.
	var order []string
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "patch" || a.GetVerb() == "update" {
			order = append(order, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	if strings.Join(order, ",") != "patch pods,update deployments" {
		t.Errorf("writes = %v, want the pod's mark, then the scale", order)
	}
}

func TestRetireLeavesOtherPodsAlone(t *testing.T) {
	other := deployment("other", 1, nil, nil)
	other.UID = "other-uid"
	otherRS := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "other-1", Namespace: testNS, UID: "other-rs-uid",
		OwnerReferences: []metav1.OwnerReference{controllerRef("Deployment", "other", other.UID)}}}
	late := pod("web-7d9f8-late", controllerRef("ReplicaSet", "web-7d9f8", "rs-uid"))
	late.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	objs := append(app(3, "web-7d9f8-aaaaa"), other, otherRS,
		pod("other-1-xxxxx", controllerRef("ReplicaSet", "other-1", "other-rs-uid")),
		pod("bare", metav1.OwnerReference{}), late)
	for _, name := range []string{"other-1-xxxxx", "bare", "web-7d9f8-late", "no-such-pod", "Not_A_Pod", "café-1", ""} {
		t.Run("name "+name, func(t *testing.T) {
			f := newEventFixture(t, objs...)
			rec := f.event("msg_1", f.retired("i-1", name).body(), nil)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d %q, want 200", rec.Code, rec.Body.String())
			}
			if got := f.replicas(deploymentsGVR, "web"); got != 2 {
				t.Errorf("replicas = %d, want 2: the retirement still lowers", got)
			}
			for _, a := range f.kube.Actions() {
				if a.GetResource().Resource == "pods" && a.GetVerb() != "get" {
					t.Errorf("%s on a pod that is not the object's retired instance", a.GetVerb())
				}
			}
		})
	}
}

func TestRetireNeverBelowMin(t *testing.T) {
	for _, tc := range []struct {
		start  int32
		min    int
		want   int32
		action string
	}{
		{start: 2, min: 2, want: 2, action: actionAtMin},
		{start: 1, min: 3, want: 1, action: actionAtMin},
		{start: 0, min: 0, want: 0, action: actionAtMin},
		{start: 2, min: 1, want: 1, action: actionLowered},
	} {
		t.Run(fmt.Sprintf("%d min %d", tc.start, tc.min), func(t *testing.T) {
			f := newEventFixture(t, app(tc.start, "web-7d9f8-aaaaa")...)
			ev := f.retired("i-1", "web-7d9f8-aaaaa")
			ev.min = tc.min
			rec := f.event("msg_1", ev.body(), nil)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d %q, want 200", rec.Code, rec.Body.String())
			}
			if got := decodeRetire(t, rec).Action; got != tc.action {
				t.Errorf("action = %q, want %q", got, tc.action)
			}
			if got := f.replicas(deploymentsGVR, "web"); got != tc.want {
				t.Errorf("replicas = %d, want %d", got, tc.want)
			}
			if tc.action == actionAtMin {
				if n := f.writes(); n != 0 {
					t.Errorf("%d writes at the floor, want 0", n)
				}
			}
		})
	}
}

func TestRetireSelection(t *testing.T) {
	labelled := deployment("web", 2, nil, forHost(testHost)) // a label, not an annotation
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want int
	}{
		{name: "unannotated", want: http.StatusNotFound,
			objs: []runtime.Object{labelled, pod("web-7d9f8-aaaaa", metav1.OwnerReference{})}},
		{name: "two annotated", want: http.StatusConflict,
			objs: []runtime.Object{deployment("web", 2, forHost(testHost), nil), statefulSet("web-db", 2, forHost(testHost))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newEventFixture(t, tc.objs...)
			rec := f.event("msg_1", f.retired("i-1", "web-7d9f8-aaaaa").body(), nil)
			if rec.Code != tc.want {
				t.Fatalf("status = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if n := f.writes(); n != 0 {
				t.Errorf("%d writes, want none", n)
			}
			// Not applied, so not remembered: the same delivery is
			// served again once the annotations are fixed.
			if f.p.deliveries.has("msg_1") || f.p.instances.has("i-1") {
				t.Error("a retirement not applied was remembered as applied")
			}
		})
	}
}

func TestRetireReplayedDeliveryID(t *testing.T) {
	f := newEventFixture(t, app(3, "web-7d9f8-aaaaa", "web-7d9f8-bbbbb")...)
	if rec := f.event("msg_1", f.retired("i-1", "web-7d9f8-aaaaa").body(), nil); rec.Code != http.StatusOK {
		t.Fatalf("first: status = %d %q", rec.Code, rec.Body.String())
	}
	// The same id again, later and freshly signed (a retry or a
	// redelivery), even with another body: not acted on.
	f.clock.advance(9 * time.Minute)
	rec := f.event("msg_1", f.retired("i-2", "web-7d9f8-bbbbb").body(), nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "already applied") {
		t.Fatalf("replay: status = %d %q, want 200 already applied", rec.Code, rec.Body.String())
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 2 {
		t.Errorf("replicas = %d, want 2: lowered once", got)
	}
	// After 10 minutes the id is forgotten.
	f.clock.advance(2 * time.Minute)
	if rec := f.event("msg_1", f.retired("i-3", "web-7d9f8-bbbbb").body(), nil); rec.Code != http.StatusOK || f.replicas(deploymentsGVR, "web") != 1 {
		t.Errorf("after the TTL: status %d %q, replicas %d; want 200 and 1", rec.Code, rec.Body.String(), f.replicas(deploymentsGVR, "web"))
	}
}

func TestRetireSameInstanceOtherID(t *testing.T) {
	f := newEventFixture(t, app(3, "web-7d9f8-aaaaa")...)
	ev := f.retired("i-1", "web-7d9f8-aaaaa")
	if rec := f.event("msg_1", ev.body(), nil); rec.Code != http.StatusOK {
		t.Fatalf("first: status = %d %q", rec.Code, rec.Body.String())
	}
	rec := f.event("msg_2", ev.body(), nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "already applied") {
		t.Fatalf("second: status = %d %q, want 200 already applied", rec.Code, rec.Body.String())
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 2 {
		t.Errorf("replicas = %d, want 2: lowered once", got)
	}
}

// TestRetireConcurrentDeliveries sends one retirement many times at once:
// it lowers once.
func TestRetireConcurrentDeliveries(t *testing.T) {
	f := newEventFixture(t, app(5, "web-7d9f8-aaaaa")...)
	body := f.retired("i-1", "web-7d9f8-aaaaa").body()
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for i := range 8 {
		wg.Go(func() { codes <- f.event(fmt.Sprintf("msg_%d", i%2), body, nil).Code })
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("status %d, want 200", c)
		}
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 4 {
		t.Errorf("replicas = %d, want 4: lowered once", got)
	}
	if n := f.p.locks.len(); n != 0 {
		t.Errorf("%d object locks left after the calls", n)
	}
}

// waiters is the number of retirements and calls holding or waiting for
// key's lock.
func (l *objectLocks) waiters(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.locks[key]; e != nil {
		return e.refs
	}
	return 0
}

// TestRetireSerializedPerObject holds a first delivery inside the
// object's lock while a second delivery of the same retirement, with
// another id, arrives: the second must wait, then find it applied.
func TestRetireSerializedPerObject(t *testing.T) {
	f := newEventFixture(t, app(5, "web-7d9f8-aaaaa")...)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.p.retireReadForTest = func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
	}
	body := f.retired("i-1", "web-7d9f8-aaaaa").body()
	done := make(chan int, 2)
	go func() { done <- f.event("msg_1", body, nil).Code }()
	<-entered
	go func() { done <- f.event("msg_2", body, nil).Code }()
	// Wait until the second waits for the lock (or, were there no
	// lock, has finished).
	deadline := time.Now().Add(10 * time.Second)
	for f.p.locks.waiters("Deployment/web") < 2 && len(done) == 0 {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the second delivery neither waited for the lock nor finished")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	for range 2 {
		if c := <-done; c != http.StatusOK {
			t.Errorf("status %d, want 200", c)
		}
	}
	// Counted as writes: the fake API server ignores resourceVersions,
	// so a second, stale write of the same count would not show in the
	// replicas.
	if got, n := f.replicas(deploymentsGVR, "web"), f.scaleUpdates(); got != 4 || n != 1 {
		t.Errorf("replicas = %d after %d scale updates, want 4 after 1: lowered once", got, n)
	}
}

// TestScalingCallWaitsForRetirement holds a retirement that has read
// the object (replicas 1, no stamp) while a cold start call arrives: the
// call must wait for the object's lock and raise the replicas after the
// retirement lowered them. Without the lock the call would find 1 and
// leave it, and the retirement would then write 0 under the visitor.
func TestScalingCallWaitsForRetirement(t *testing.T) {
	f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.p.retireReadForTest = func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
	}
	evDone := make(chan *httptest.ResponseRecorder, 1)
	body := f.retired("i-1", "web-7d9f8-aaaaa").body()
	go func() { evDone <- f.event("msg_1", body, nil) }()
	<-entered
	callDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { callDone <- f.call("", body1()) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.p.locks.waiters("Deployment/web") < 2 && len(callDone) == 0 {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the call neither waited for the lock nor finished")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if rec := <-evDone; rec.Code != http.StatusOK || decodeRetire(t, rec).Action != actionLowered {
		t.Errorf("event: status %d %q, want 200 lowered", rec.Code, rec.Body.String())
	}
	if rec := <-callDone; rec.Code != http.StatusOK {
		t.Errorf("call: status %d %q, want 200", rec.Code, rec.Body.String())
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 1 {
		t.Errorf("replicas = %d, want 1: the cold start came last", got)
	}
}

// body1 is a cold start call body: desired 1, min 0, max 8.
func body1() string { return body(1, 0, 8) }

func TestEventsAuth(t *testing.T) {
	otherKey := []byte("another key entirely, 32 bytes!!")
	for _, tc := range []struct {
		name string
		edit func(f *fixture, body string, h http.Header)
		want int
	}{
		{name: "unsigned", want: http.StatusUnauthorized, edit: func(_ *fixture, _ string, h http.Header) {
			h.Del("webhook-signature")
		}},
		{name: "no id", want: http.StatusUnauthorized, edit: func(_ *fixture, _ string, h http.Header) { h.Del("webhook-id") }},
		{name: "no timestamp", want: http.StatusUnauthorized, edit: func(_ *fixture, _ string, h http.Header) { h.Del("webhook-timestamp") }},
		{name: "wrong key", want: http.StatusUnauthorized, edit: func(_ *fixture, body string, h http.Header) {
			h.Set("webhook-signature", signWith(otherKey, h.Get("webhook-id"), h.Get("webhook-timestamp"), body))
		}},
		{name: "whole secret as key", want: http.StatusUnauthorized, edit: func(_ *fixture, body string, h http.Header) {
			h.Set("webhook-signature", signWith([]byte(testWebhookSecret), h.Get("webhook-id"), h.Get("webhook-timestamp"), body))
		}},
		{name: "other body", want: http.StatusUnauthorized, edit: func(_ *fixture, body string, h http.Header) {
			h.Set("webhook-signature", signWith(testWebhookKey, h.Get("webhook-id"), h.Get("webhook-timestamp"), body+" "))
		}},
		{name: "other id", want: http.StatusUnauthorized, edit: func(_ *fixture, body string, h http.Header) {
			h.Set("webhook-id", "msg_other")
		}},
		{name: "v2 scheme", want: http.StatusUnauthorized, edit: func(_ *fixture, _ string, h http.Header) {
			h.Set("webhook-signature", "v2,"+strings.TrimPrefix(h.Get("webhook-signature"), "v1,"))
		}},
		{name: "line break in base64", want: http.StatusUnauthorized, edit: func(_ *fixture, _ string, h http.Header) {
			s := h.Get("webhook-signature")
			h["Webhook-Signature"] = []string{s[:10] + "\n" + s[10:]}
		}},
		{name: "unpadded base64", want: http.StatusUnauthorized, edit: func(_ *fixture, _ string, h http.Header) {
			h.Set("webhook-signature", strings.TrimRight(h.Get("webhook-signature"), "="))
		}},
		{name: "stale timestamp", want: http.StatusUnauthorized, edit: func(f *fixture, body string, h http.Header) {
			ts := strconv.FormatInt(f.clock.now().Add(-5*time.Minute-time.Second).Unix(), 10)
			h.Set("webhook-timestamp", ts)
			h.Set("webhook-signature", signWith(testWebhookKey, h.Get("webhook-id"), ts, body))
		}},
		{name: "future timestamp", want: http.StatusUnauthorized, edit: func(f *fixture, body string, h http.Header) {
			ts := strconv.FormatInt(f.clock.now().Add(5*time.Minute+time.Second).Unix(), 10)
			h.Set("webhook-timestamp", ts)
			h.Set("webhook-signature", signWith(testWebhookKey, h.Get("webhook-id"), ts, body))
		}},
		{name: "timestamp not a number", want: http.StatusUnauthorized, edit: func(_ *fixture, body string, h http.Header) {
			h.Set("webhook-timestamp", "1e9")
			h.Set("webhook-signature", signWith(testWebhookKey, h.Get("webhook-id"), "1e9", body))
		}},
		{name: "huge id", want: http.StatusUnauthorized, edit: func(_ *fixture, body string, h http.Header) {
			id := strings.Repeat("x", 300)
			h.Set("webhook-id", id)
			h.Set("webhook-signature", signWith(testWebhookKey, id, h.Get("webhook-timestamp"), body))
		}},
		{name: "timestamp 4 minutes old", want: http.StatusOK, edit: func(f *fixture, body string, h http.Header) {
			ts := strconv.FormatInt(f.clock.now().Add(-4*time.Minute).Unix(), 10)
			h.Set("webhook-timestamp", ts)
			h.Set("webhook-signature", signWith(testWebhookKey, h.Get("webhook-id"), ts, body))
		}},
		{name: "one of several signatures", want: http.StatusOK, edit: func(_ *fixture, body string, h http.Header) {
			h.Set("webhook-signature", signWith(otherKey, h.Get("webhook-id"), h.Get("webhook-timestamp"), body)+" v1a,xx "+h.Get("webhook-signature"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
			ev := f.retired("i-1", "web-7d9f8-aaaaa")
			ev.at = f.clock.now().Add(-5 * time.Minute)
			body := ev.body()
			rec := f.event("msg_1", body, func(h http.Header) { tc.edit(f, body, h) })
			if rec.Code != tc.want {
				t.Fatalf("status = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if tc.want == http.StatusOK {
				if got := f.replicas(deploymentsGVR, "web"); got != 0 {
					t.Errorf("replicas = %d, want 0", got)
				}
				return
			}
			if n := f.apiCalls(); n != 0 {
				t.Errorf("a refused delivery made %d API requests, want 0", n)
			}
			if f.p.deliveries.len() != 0 {
				t.Error("a refused delivery's id was remembered")
			}
		})
	}
}

func TestEventsWithoutSecret(t *testing.T) {
	f := newFixture(t, Config{}, app(1, "web-7d9f8-aaaaa")...)
	for range 2 {
		rec := f.event("msg_1", f.retired("i-1", "web-7d9f8-aaaaa").body(), nil)
		if rec.Code != http.StatusNotFound {
			t.Errorf("status = %d %q, want 404", rec.Code, rec.Body.String())
		}
	}
	if n := f.apiCalls(); n != 0 || f.replicas(deploymentsGVR, "web") != 1 {
		t.Errorf("%d API requests, replicas %d; want none and 1", n, f.replicas(deploymentsGVR, "web"))
	}
	// And a scaling call writes no stamp: nothing would read it.
	if rec := f.call("", body(2, 0, 8)); rec.Code != http.StatusOK {
		t.Fatalf("call: status = %d %q", rec.Code, rec.Body.String())
	}
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("patch %s without a webhook secret", a.GetResource().Resource)
		}
	}
}

func TestBadWebhookSecret(t *testing.T) {
	for _, s := range []string{"whsec_not base64!", "whsec_", "whsec_QUJD\nREVG", strings.Repeat("x", 1025)} {
		if _, err := newProvider(Config{Secret: testSecret, Namespace: testNS, WebhookSecret: s}, nil, nil); err == nil {
			t.Errorf("webhook secret %.20q accepted", s)
		}
	}
	// A secret without the prefix is keyed with its bytes.
	p, err := newProvider(Config{Secret: testSecret, Namespace: testNS, WebhookSecret: "plain-secret"}, nil, nil)
	if err != nil || string(p.webhookKey) != "plain-secret" {
		t.Errorf("plain secret: key %q, %v", p.webhookKey, err)
	}
}

func TestHostileEvents(t *testing.T) {
	at := time.Date(2026, 12, 1, 11, 59, 0, 0, time.UTC).Format(time.RFC3339Nano)
	retired := func(detail string) string {
		return fmt.Sprintf(`{"event":"instance_retired","at":%q,"hostname":%q,"path":"/","detail":%s}`, at, testHost, detail)
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	binds := make([]string, 11)
	for i := range binds {
		binds[i] = fmt.Sprintf(`{"hostname":%q,"path":"/"}`, testHost)
	}
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{name: "too big", body: retired(`{"instance_id":"i-1","reason":"idle","summary":"` + long(70<<10) + `"}`), want: http.StatusRequestEntityTooLarge},
		{name: "empty", body: ``, want: http.StatusBadRequest},
		{name: "not JSON", body: `event=instance_retired`, want: http.StatusBadRequest},
		{name: "truncated", body: `{"event":"instance_retired","detail":{`, want: http.StatusBadRequest},
		{name: "two values", body: retired(`{"instance_id":"i-1","reason":"idle"}`) + `{}`, want: http.StatusBadRequest},
		{name: "array", body: `[1]`, want: http.StatusBadRequest},
		{name: "no event", body: `{"at":"` + at + `"}`, want: http.StatusBadRequest},
		{name: "event too long", body: `{"event":"` + long(65) + `"}`, want: http.StatusBadRequest},
		{name: "no detail", body: `{"event":"instance_retired","at":"` + at + `","hostname":"app.example.com"}`, want: http.StatusBadRequest},
		{name: "detail null", body: retired(`null`), want: http.StatusBadRequest},
		{name: "detail a string", body: retired(`"x"`), want: http.StatusBadRequest},
		{name: "no instance id", body: retired(`{"reason":"idle"}`), want: http.StatusBadRequest},
		{name: "instance id too long", body: retired(`{"instance_id":"` + long(129) + `","reason":"idle"}`), want: http.StatusBadRequest},
		{name: "instance id with a control byte", body: retired(`{"instance_id":"i\u0001","reason":"idle"}`), want: http.StatusBadRequest},
		{name: "name too long", body: retired(`{"instance_id":"i-1","name":"` + long(254) + `","reason":"idle"}`), want: http.StatusBadRequest},
		{name: "reason too long", body: retired(`{"instance_id":"i-1","reason":"` + long(65) + `"}`), want: http.StatusBadRequest},
		{name: "too many binds", body: retired(`{"instance_id":"i-1","reason":"idle","binds":[` + strings.Join(binds, ",") + `]}`), want: http.StatusBadRequest},
		{name: "bad bind", body: retired(`{"instance_id":"i-1","reason":"idle","binds":[{"hostname":"a/b","path":"/"}]}`), want: http.StatusBadRequest},
		{name: "min negative", body: retired(`{"instance_id":"i-1","reason":"idle","min":-1}`), want: http.StatusBadRequest},
		{name: "min huge", body: retired(`{"instance_id":"i-1","reason":"idle","min":1e30}`), want: http.StatusBadRequest},
		{name: "min a string", body: retired(`{"instance_id":"i-1","reason":"idle","min":"0"}`), want: http.StatusBadRequest},
		{name: "bad at", body: `{"event":"instance_retired","at":"yesterday","hostname":"app.example.com","detail":{"instance_id":"i-1","reason":"idle"}}`, want: http.StatusBadRequest},
		{name: "no hostname", body: `{"event":"instance_retired","at":"` + at + `","detail":{"instance_id":"i-1","reason":"idle"}}`, want: http.StatusBadRequest},
		{name: "hostname too long", body: `{"event":"instance_retired","at":"` + at + `","hostname":"` + long(254) + `","detail":{"instance_id":"i-1","reason":"idle"}}`, want: http.StatusBadRequest},
		{name: "path too long", body: `{"event":"instance_retired","at":"` + at + `","hostname":"app.example.com","path":"/` + long(1024) + `","detail":{"instance_id":"i-1","reason":"idle"}}`, want: http.StatusBadRequest},
		{name: "path not absolute", body: `{"event":"instance_retired","at":"` + at + `","hostname":"app.example.com","path":"api","detail":{"instance_id":"i-1","reason":"idle"}}`, want: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
			rec := f.event("msg_1", tc.body, nil)
			if rec.Code != tc.want {
				t.Fatalf("status = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if n := f.apiCalls(); n != 0 {
				t.Errorf("a bad event made %d API requests, want 0", n)
			}
			if rec.Body.Len() > 2048 {
				t.Errorf("answer is %d bytes: a hostile input must not be echoed whole", rec.Body.Len())
			}
		})
	}
}

func TestOtherEventsIgnored(t *testing.T) {
	at := time.Date(2026, 12, 1, 11, 59, 0, 0, time.UTC).Format(time.RFC3339Nano)
	for _, b := range []string{
		`{"event":"client_connected","at":"` + at + `","org_id":"default","hostname":"","path":"","detail":{"client_id":"c-1"}}`,
		`{"event":"ping","at":"` + at + `","org_id":"default","hostname":"","path":"","detail":{"webhook_id":"whk_1"}}`,
		`{"event":"instance_retired","at":"` + at + `","hostname":"app.example.com","path":"/","detail":{"instance_id":"i-1","reason":"drained","name":"web-7d9f8-aaaaa"}}`,
	} {
		f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
		rec := f.event("msg_1", b, nil)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "ignored") {
			t.Errorf("%.40s: status = %d %q, want 200 ignored", b, rec.Code, rec.Body.String())
		}
		if n := f.apiCalls(); n != 0 {
			t.Errorf("%.40s: %d API requests, want 0", b, n)
		}
	}
}

// TestRetireAfterColdStartReplaces is the race: the cold start call
// (desired 1) is served after the retirement happened but before its
// event arrives. Lowering would strand the visitor the server holds; the
// provider deletes the retired pod instead, and the replicas stay.
func TestRetireAfterColdStartReplaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		atAgo time.Duration // the retirement's at, before the call
	}{
		{name: "retired a second before the call", atAgo: time.Second},
		{name: "retired at the call's instant", atAgo: 0},
		// A server clock up to the margin ahead of the provider's.
		{name: "retired within the clock skew margin after the call", atAgo: -2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
			callAt := f.clock.now()
			if rec := f.call("", body(1, 0, 8)); rec.Code != http.StatusOK {
				t.Fatalf("call: status = %d %q", rec.Code, rec.Body.String())
			}
			f.clock.advance(2 * time.Second)
			ev := retiredEvent{instance: "i-1", pod: "web-7d9f8-aaaaa", at: callAt.Add(-tc.atAgo)}
			rec := f.event("msg_1", ev.body(), nil)
			if rec.Code != http.StatusOK {
				t.Fatalf("event: status = %d %q", rec.Code, rec.Body.String())
			}
			if got := decodeRetire(t, rec); got.Action != actionReplaced || got.Pod != "web-7d9f8-aaaaa" {
				t.Errorf("answer = %+v, want the pod replaced", got)
			}
			if got := f.replicas(deploymentsGVR, "web"); got != 1 {
				t.Errorf("replicas = %d, want 1: the visitor's instance stays", got)
			}
			if _, gone := f.podCost("web-7d9f8-aaaaa"); !gone {
				t.Error("the retired pod was not deleted")
			}
		})
	}
}

// TestRetireAfterTheMarginLowers: a retirement more than the clock skew
// margin after the last scaling call lowers.
func TestRetireAfterTheMarginLowers(t *testing.T) {
	f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
	callAt := f.clock.now()
	if rec := f.call("", body(1, 0, 8)); rec.Code != http.StatusOK {
		t.Fatalf("call: status = %d %q", rec.Code, rec.Body.String())
	}
	f.clock.advance(time.Minute)
	ev := retiredEvent{instance: "i-1", pod: "web-7d9f8-aaaaa", at: callAt.Add(2*time.Second + time.Millisecond)}
	rec := f.event("msg_1", ev.body(), nil)
	if got := decodeRetire(t, rec); rec.Code != http.StatusOK || got.Action != actionLowered || f.replicas(deploymentsGVR, "web") != 0 {
		t.Errorf("status %d, answer %+v, replicas %d; want 200, lowered, 0", rec.Code, got, f.replicas(deploymentsGVR, "web"))
	}
}

// TestRetireThenColdStart is the other order: the event is served first
// (1 -> 0), then the visitor's cold start call (0 -> 1).
func TestRetireThenColdStart(t *testing.T) {
	f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
	if rec := f.event("msg_1", f.retired("i-1", "web-7d9f8-aaaaa").body(), nil); rec.Code != http.StatusOK || f.replicas(deploymentsGVR, "web") != 0 {
		t.Fatalf("event: status = %d %q, replicas %d; want 200 and 0", rec.Code, rec.Body.String(), f.replicas(deploymentsGVR, "web"))
	}
	f.clock.advance(time.Second)
	if rec := f.call("", body(1, 0, 8)); rec.Code != http.StatusOK {
		t.Fatalf("call: status = %d %q", rec.Code, rec.Body.String())
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 1 {
		t.Errorf("replicas = %d, want 1", got)
	}
	if _, gone := f.podCost("web-7d9f8-aaaaa"); gone {
		t.Error("a pod was deleted although the retirement came first")
	}
}

func TestScalingCallStamps(t *testing.T) {
	f := newEventFixture(t, app(0)...)
	stamp := func() string {
		obj, err := f.kube.Tracker().Get(deploymentsGVR, testNS, "web")
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*appsv1.Deployment).Annotations[annScaledAt]
	}
	first := f.clock.now()
	if rec := f.call("", body(1, 0, 8)); rec.Code != http.StatusOK {
		t.Fatalf("status = %d %q", rec.Code, rec.Body.String())
	}
	if got, want := stamp(), first.UTC().Format(time.RFC3339Nano); got != want {
		t.Errorf("stamp after raising = %q, want %q", got, want)
	}
	// Already at the count: stamped again.
	f.clock.advance(1500 * time.Millisecond)
	second := f.clock.now()
	if rec := f.call("", body(1, 0, 8)); rec.Code != http.StatusOK {
		t.Fatalf("status = %d %q", rec.Code, rec.Body.String())
	}
	if got, want := stamp(), second.UTC().Format(time.RFC3339Nano); got != want {
		t.Errorf("stamp when already there = %q, want %q", got, want)
	}
	// Desired 0 is no visitor's call: the stamp stays.
	f.clock.advance(time.Second)
	if rec := f.call("", body(0, 0, 8)); rec.Code != http.StatusOK {
		t.Fatalf("status = %d %q", rec.Code, rec.Body.String())
	}
	if got, want := stamp(), second.UTC().Format(time.RFC3339Nano); got != want {
		t.Errorf("stamp after desired 0 = %q, want %q", got, want)
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 0 {
		t.Errorf("replicas = %d, want 0", got)
	}
}

// TestStampFailureFailsTheCall: a call whose stamp cannot be written does
// not scale, or a retirement older than it could undo its replicas.
func TestStampFailureFailsTheCall(t *testing.T) {
	f := newEventFixture(t, app(0)...)
	f.kube.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", fmt.Errorf("rbac"))
	})
	if rec := f.call("", body(1, 0, 8)); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status = %d %q, want 503", rec.Code, rec.Body.String())
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 0 {
		t.Errorf("replicas = %d, want 0", got)
	}
}

func statefulApp(replicas int32, pods ...string) []runtime.Object {
	s := statefulSet("web", replicas, forHost(testHost))
	s.UID = "sts-uid"
	objs := []runtime.Object{s}
	for _, name := range pods {
		objs = append(objs, pod(name, controllerRef("StatefulSet", "web", s.UID)))
	}
	return objs
}

// TestRetireStatefulSet: a StatefulSet removes its highest ordinal, so no
// deletion cost is written; the race path deletes its own pod.
func TestRetireStatefulSet(t *testing.T) {
	t.Run("lowered", func(t *testing.T) {
		f := newEventFixture(t, statefulApp(2, "web-0", "web-1")...)
		rec := f.event("msg_1", f.retired("i-1", "web-0").body(), nil)
		if rec.Code != http.StatusOK {
			t.Fatalf("status = %d %q", rec.Code, rec.Body.String())
		}
		want := retireResult{Action: actionLowered, Kind: kindStatefulSet, Namespace: testNS, Name: "web", Replicas: 1, Previous: 2}
		if got := decodeRetire(t, rec); got != want {
			t.Errorf("answer = %+v, want %+v", got, want)
		}
		if got := f.replicas(statefulSetsGVR, "web"); got != 1 {
			t.Errorf("replicas = %d, want 1", got)
		}
		for _, a := range f.kube.Actions() {
			if a.GetResource().Resource == "pods" {
				t.Errorf("%s pods for a StatefulSet's scale-down", a.GetVerb())
			}
		}
	})
	t.Run("stale", func(t *testing.T) {
		f := newEventFixture(t, statefulApp(1, "web-0")...)
		ev := f.retired("i-1", "web-0")
		if rec := f.call("", body(1, 0, 8)); rec.Code != http.StatusOK {
			t.Fatalf("call: status = %d %q", rec.Code, rec.Body.String())
		}
		rec := f.event("msg_1", ev.body(), nil)
		if got := decodeRetire(t, rec); rec.Code != http.StatusOK || got.Action != actionReplaced {
			t.Errorf("status %d, answer %+v, want 200 replaced", rec.Code, got)
		}
		if _, gone := f.podCost("web-0"); !gone || f.replicas(statefulSetsGVR, "web") != 1 {
			t.Errorf("pod deleted %v, replicas %d; want deleted and 1", gone, f.replicas(statefulSetsGVR, "web"))
		}
	})
	t.Run("a fresh pod of the same name is left alone", func(t *testing.T) {
		objs := statefulApp(1)
		fresh := pod("web-0", controllerRef("StatefulSet", "web", "sts-uid"))
		fresh.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
		f := newEventFixture(t, append(objs, fresh)...)
		ev := retiredEvent{instance: "i-1", pod: "web-0", at: f.clock.now().Add(-time.Minute)}
		if rec := f.call("", body(1, 0, 8)); rec.Code != http.StatusOK {
			t.Fatalf("call: status = %d %q", rec.Code, rec.Body.String())
		}
		rec := f.event("msg_1", ev.body(), nil)
		if got := decodeRetire(t, rec); rec.Code != http.StatusOK || got.Action != actionStale {
			t.Errorf("status %d, answer %+v, want 200 stale", rec.Code, got)
		}
		if _, gone := f.podCost("web-0"); gone {
			t.Error("a pod made after the retirement was deleted")
		}
	})
}

// TestRetireReadsAgainOnConflict: a scale update that conflicts (another
// process stamped or scaled the object meanwhile) reads the object again.
func TestRetireReadsAgainOnConflict(t *testing.T) {
	f := newEventFixture(t, app(2, "web-7d9f8-aaaaa")...)
	failed := false
	f.kube.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" || failed {
			return false, nil, nil
		}
		failed = true
		// Meanwhile, a cold start was served elsewhere.
		obj, err := f.kube.Tracker().Get(deploymentsGVR, testNS, "web")
		if err != nil {
			t.Fatal(err)
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		d.Annotations[annScaledAt] = f.clock.now().UTC().Format(time.RFC3339Nano)
		if err := f.kube.Tracker().Update(deploymentsGVR, d, testNS); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", fmt.Errorf("changed"))
	})
	rec := f.event("msg_1", f.retired("i-1", "web-7d9f8-aaaaa").body(), nil)
	if got := decodeRetire(t, rec); rec.Code != http.StatusOK || got.Action != actionReplaced {
		t.Errorf("status %d, answer %+v, want 200 replaced after reading the new stamp", rec.Code, got)
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 2 {
		t.Errorf("replicas = %d, want 2", got)
	}
}

func TestRetireAPIFailureIsNotRemembered(t *testing.T) {
	f := newEventFixture(t, app(2, "web-7d9f8-aaaaa")...)
	fail := true
	f.kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !fail {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInternalError(fmt.Errorf("boom"))
	})
	body := f.retired("i-1", "web-7d9f8-aaaaa").body()
	if rec := f.event("msg_1", body, nil); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("status = %d %q, want 503 with Retry-After", rec.Code, rec.Body.String())
	}
	if got := f.replicas(deploymentsGVR, "web"); got != 2 {
		t.Errorf("replicas = %d, want 2: not lowered without the pod's mark", got)
	}
	// Aperio's retry of the same delivery is served.
	fail = false
	if rec := f.event("msg_1", body, nil); rec.Code != http.StatusOK || f.replicas(deploymentsGVR, "web") != 1 {
		t.Errorf("retry: status = %d %q, replicas %d; want 200 and 1", rec.Code, rec.Body.String(), f.replicas(deploymentsGVR, "web"))
	}
}

func TestSeenSetBounded(t *testing.T) {
	clock := &testClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	s := newSeenSet(3, time.Minute, clock.now)
	for i := range 5 {
		s.add(fmt.Sprint(i))
	}
	if s.len() != 3 || s.has("0") || s.has("1") || !s.has("4") {
		t.Errorf("after 5 adds to a set of 3: len %d, has 0 %v, 1 %v, 4 %v", s.len(), s.has("0"), s.has("1"), s.has("4"))
	}
	clock.advance(time.Minute)
	if s.has("4") || s.len() != 0 {
		t.Errorf("ids outlived their TTL: len %d", s.len())
	}
}

func TestObjectLockHonoursContext(t *testing.T) {
	l := newObjectLocks()
	unlock, err := l.lock(context.Background(), "Deployment/web")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.lock(ctx, "Deployment/web"); err == nil {
		t.Error("a second lock of a held object succeeded")
	}
	other, err := l.lock(context.Background(), "Deployment/other")
	if err != nil {
		t.Fatalf("lock of another object: %v", err)
	}
	other()
	unlock()
	if l.len() != 0 {
		t.Errorf("%d locks left", l.len())
	}
}

// FuzzEvents sends signed bodies of any shape: no panic, an answer in
// the known set, and the replicas lowered by at most one.
func FuzzEvents(f *testing.F) {
	at := time.Date(2026, 12, 1, 11, 59, 0, 0, time.UTC)
	for _, seed := range []string{
		retiredEvent{instance: "i-1", pod: "web-7d9f8-aaaaa", at: at}.body(),
		retiredEvent{instance: "i-1", pod: "web-7d9f8-aaaaa", at: at, min: 3}.body(),
		`{"event":"ping","detail":{}}`, `{"event":"instance_retired","detail":null}`, `[`, `null`,
		`{"event":"instance_retired","at":"2026-12-01T11:59:00Z","detail":{"instance_id":"i","reason":"idle","binds":[{"hostname":"app.example.com"}]}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b string) {
		fx := newEventFixture(t, app(2, "web-7d9f8-aaaaa")...)
		rec := fx.event("msg_1", b, nil)
		got := fx.replicas(deploymentsGVR, "web")
		switch rec.Code {
		case http.StatusOK:
			if got != 1 && got != 2 {
				t.Errorf("accepted %q and set replicas %d, want 1 or 2", b, got)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusNotFound, http.StatusConflict:
			if got != 2 {
				t.Errorf("refused %q with %d but replicas changed to %d", b, rec.Code, got)
			}
		default:
			t.Errorf("body %q: status %d", b, rec.Code)
		}
	})
}

// TestRetireServerShapedBody: a body exactly as aperio-server writes an
// instance_retired for a whole-host bind (its path "", its keys in the
// server's order, as internal/server's TestInstanceRetired reads them)
// lowers the object annotated for "/".
func TestRetireServerShapedBody(t *testing.T) {
	f := newEventFixture(t, app(1, "web-7d9f8-aaaaa")...)
	at := f.clock.now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	body := fmt.Sprintf(`{"event":"instance_retired","at":%q,"org_id":"org_bbtc2aranhtyq3mrvufzkrfzpr","hostname":%q,"path":"",`+
		`"detail":{"actor":"token:tok_lqtlrghccixizywsli3bxb5suj","binds":[{"hostname":%q,"path":""}],"client_id":"577d6172b1fdac79",`+
		`"idle_action":"wait","instance_id":"9f86d081884c7d65","min":0,"name":"web-7d9f8-aaaaa","reason":"idle",`+
		`"summary":"client 577d6172b1fdac79 \"web-7d9f8-aaaaa\" (instance 9f86d081884c7d65) retired idle (idle_action wait), binds %s",`+
		`"token_id":"tok_lqtlrghccixizywsli3bxb5suj"}}`, at, testHost, testHost, testHost)
	rec := f.event("msg_server_shaped", body, nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d %q, want 200", rec.Code, rec.Body.String())
	}
	if got := decodeRetire(t, rec); got.Action != actionLowered || got.Replicas != 0 {
		t.Errorf("answer = %+v, want lowered to 0", got)
	}
}
