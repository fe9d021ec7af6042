package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Annotations read on Deployments and StatefulSets. Only an object whose
// hostname annotation names the call's hostname is ever scaled: labels,
// names and anything else are never enough.
const (
	// annHostname lists the hostnames the object serves, comma-separated.
	annHostname = "aperio.dev/hostname"
	// annPath is the bind's path prefix; absent means "/" (the whole host).
	annPath = "aperio.dev/path"
	// annMaxReplicas caps the replicas the provider sets on the object,
	// whatever the call asks.
	annMaxReplicas = "aperio.dev/max-replicas"
)

// Kinds the provider scales, as its answers and logs name them.
const (
	kindDeployment  = "Deployment"
	kindStatefulSet = "StatefulSet"
)

// Log attribute keys.
const (
	logKeyHostname = "hostname"
	logKeyPath     = "path"
	logKeyReason   = "reason"
	logKeyDesired  = "desired"
	logKeyReplicas = "replicas"
	logKeyPrevious = "previous"
	logKeyKind     = "kind"
	logKeyName     = "name"
	logKeyKey      = "idempotency_key"
	logKeyError    = "error"
	logKeyRemote   = "remote_addr"
	logKeyGen      = "lease_generation"
)

// Bounds on what a caller may send.
const (
	maxBodyBytes     = 64 << 10 // a hook body is a few hundred bytes
	maxHostnameBytes = 253
	maxPathBytes     = 1024
	maxReasonBytes   = 64
	maxKeyBytes      = 255
	// maxInFlight is how many scaling calls run at once; Aperio makes at
	// most 8 at a time per server, so this leaves room for two servers.
	maxInFlight = 16
	// listPageSize and maxListPages bound one List of one kind: at most
	// 10,000 objects are read per call, a namespace with more must be
	// narrowed with --selector.
	listPageSize = 500
	maxListPages = 20
	// defaultRetryAfter is the Retry-After of an answer to a call the
	// cluster could not serve, when the API server suggested no delay.
	defaultRetryAfter = 5 * time.Second
)

// hookCall is Aperio's scaling call body (docs/autoscaling.md). Unknown
// keys are ignored, so a newer server's body still decodes.
type hookCall struct {
	Reason   string  `json:"reason"`
	Hostname string  `json:"hostname"`
	Path     *string `json:"path"`
	OrgID    *string `json:"org_id"`
	Current  int     `json:"current"`
	Desired  *int    `json:"desired"`
	Min      int     `json:"min"`
	Max      int     `json:"max"`
	// LeaseGeneration is the generation of the store lease Aperio made
	// the call under; nil without one (fence.go).
	LeaseGeneration *int64 `json:"lease_generation"`
}

// Result is the JSON answer to an accepted call: the object scaled and
// its replicas before and after.
type Result struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Replicas  int32  `json:"replicas"`
	Previous  int32  `json:"previous"`
}

// Config is what the provider needs beyond its Kubernetes client.
type Config struct {
	// Secret is the bearer token every call must carry; required.
	Secret string
	// WebhookSecret verifies the Standard Webhooks signature of the
	// events POST /events receives (retire.go): "whsec_" and the base64
	// of the key, or any other string used as its bytes. Empty turns the
	// route off (404): an unsigned event is never acted on. When set,
	// each scaling call with desired > 0 also stamps its object with
	// aperio.dev/scaled-at.
	WebhookSecret string
	// Namespace is the only namespace whose objects are listed and scaled.
	Namespace string
	// Selector is a label selector narrowing the objects listed; empty
	// lists every Deployment and StatefulSet of Namespace (the annotation
	// still decides).
	Selector string
	// MaxReplicas caps every replica count the provider sets, whatever
	// the call and the annotations say; 0 means 100.
	MaxReplicas int32
	// APITimeout bounds the Kubernetes API calls of one scaling call; 0
	// means 8s, under Aperio's 10 s call timeout.
	APITimeout time.Duration
	// KeyTTL is how long an Idempotency-Key's answer is replayed; 0 means
	// 10 minutes.
	KeyTTL time.Duration
	// MaxKeys bounds the remembered keys (oldest dropped first); 0 means
	// 4096.
	MaxKeys int
	// ClockSkew is the margin by which a retirement must follow the
	// object's scaled-at stamp to lower its replicas: the stamp is the
	// provider's clock, the retirement's time the Aperio server's, and a
	// server clock ahead by more than this could have a retirement that
	// came before a cold start judged to have come after it (retire.go).
	// 0 means 2s.
	ClockSkew time.Duration
	// Logger receives one line per call; nil discards.
	Logger *slog.Logger
}

// withDefaults fills in the zero fields of c.
func (c Config) withDefaults() Config {
	if c.MaxReplicas == 0 {
		c.MaxReplicas = 100
	}
	if c.APITimeout == 0 {
		c.APITimeout = 8 * time.Second
	}
	if c.KeyTTL == 0 {
		c.KeyTTL = 10 * time.Minute
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = 4096
	}
	if c.ClockSkew == 0 {
		c.ClockSkew = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate reports every problem of c.
func (c Config) validate() error {
	var errs []error
	if c.Secret == "" {
		errs = append(errs, errors.New("no secret: Aperio's calls must be authenticated"))
	}
	if c.Namespace == "" {
		errs = append(errs, errors.New("no namespace"))
	}
	if c.WebhookSecret != "" {
		if _, err := webhookKey(c.WebhookSecret); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxReplicas < 0 || c.APITimeout < 0 || c.KeyTTL < 0 || c.MaxKeys < 0 || c.ClockSkew < 0 {
		errs = append(errs, errors.New("max replicas, API timeout, key TTL, max keys and clock skew must not be negative"))
	}
	return errors.Join(errs...)
}

// provider serves Aperio's scaling calls by setting the replicas of the
// one Deployment or StatefulSet annotated with the call's hostname. It is
// safe for concurrent use.
type provider struct {
	cfg  Config
	kube kubernetes.Interface
	now  func() time.Time
	keys *keyCache
	gens *generations
	sem  chan struct{} // one token per call or event being served
	// locks serializes the writes of scaling calls and retirements to
	// one object.
	locks *objectLocks

	// webhookKey is the HMAC key of cfg.WebhookSecret; nil without one.
	webhookKey []byte
	// deliveries and instances are the webhook ids and instance ids of
	// the events already applied (or ignored, for deliveries).
	deliveries *seenSet
	instances  *seenSet
	// noWebhookSecretOnce logs, once, an event refused for want of a
	// webhook secret.
	noWebhookSecretOnce sync.Once

	// followerWaitingForTest, when set, is called as a call starts
	// waiting for the answer of an earlier call with its key.
	followerWaitingForTest func()
	// retireReadForTest, when set, is called by a retirement holding its
	// object's lock, each time it has read the object.
	retireReadForTest func()
}

// newProvider returns a provider; cfg must pass validate.
func newProvider(cfg Config, kube kubernetes.Interface, now func() time.Time) (*provider, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	p := &provider{
		cfg:        cfg,
		kube:       kube,
		now:        now,
		keys:       newKeyCache(cfg.MaxKeys, cfg.KeyTTL, now),
		gens:       newGenerations(),
		sem:        make(chan struct{}, maxInFlight),
		locks:      newObjectLocks(),
		deliveries: newSeenSet(maxRetiredIDs, retiredTTL, now),
		instances:  newSeenSet(maxRetiredIDs, retiredTTL, now),
	}
	if cfg.WebhookSecret != "" {
		key, err := webhookKey(cfg.WebhookSecret)
		if err != nil {
			return nil, err
		}
		p.webhookKey = key
	}
	return p, nil
}

func (p *provider) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /scale", p.handleScale)
	mux.HandleFunc("POST /events", p.handleEvents)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	return mux
}

// authorized checks the bearer secret in constant time.
func (p *provider) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(p.cfg.Secret)) == 1
}

// answer is one response: status, optional Retry-After, body.
type answer struct {
	status     int
	retryAfter time.Duration // sent as whole seconds when > 0
	body       []byte
	json       bool
}

func textAnswer(status int, msg string) answer {
	return answer{status: status, body: []byte(msg + "\n")}
}

func (a answer) write(w http.ResponseWriter, replayed bool) {
	h := w.Header()
	if a.json {
		h.Set("Content-Type", "application/json")
	} else {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
	}
	if a.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(a.retryAfter.Seconds()))))
	}
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(a.status)
	w.Write(a.body)
}

// handleScale serves one call: 200 with a Result once the object's
// replicas are set (or already were), the same answer again for a repeated
// Idempotency-Key, 400 for a bad call, 401 without the secret, 404 when no
// object carries the hostname, 409 when several do or the object's
// annotations are wrong or the call's lease generation is older than one
// already admitted for its hostname and path (fence.go), 422 for a key reused with another call, 429 when
// too many calls are in flight, 503 with Retry-After when the cluster
// failed.
func (p *provider) handleScale(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="aperio-kubernetes-provider"`)
		textAnswer(http.StatusUnauthorized, "unauthorized").write(w, false)
		return
	}
	call, err := decodeCall(w, r)
	if err != nil {
		status := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status = http.StatusRequestEntityTooLarge
		}
		textAnswer(status, "bad call: "+err.Error()).write(w, false)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkKey(key); err != nil {
		textAnswer(http.StatusBadRequest, "bad call: "+err.Error()).write(w, false)
		return
	}
	gen, err := generationOf(r, call)
	if err != nil {
		textAnswer(http.StatusBadRequest, "bad call: "+err.Error()).write(w, false)
		return
	}
	log := p.cfg.Logger.With(logKeyHostname, call.Hostname, logKeyPath, call.path(), logKeyReason, call.Reason,
		logKeyDesired, *call.Desired, logKeyKey, key, logKeyRemote, r.RemoteAddr)
	// A call under a lease since taken over by another server's is
	// refused before its key is looked at: the newer call stands.
	if !p.gens.admit(strings.ToLower(call.Hostname)+"\x00"+call.path(), gen) {
		log.Warn("scaling call refused: its lease was taken over", logKeyGen, gen)
		textAnswer(http.StatusConflict, "lease generation superseded").write(w, false)
		return
	}

	if key == "" {
		a := p.serve(r.Context(), call, log)
		a.write(w, false)
		return
	}
	// A key names one decision: the same key with another call is not a
	// retry of it, and must not be answered with its result.
	fingerprint := fmt.Sprintf("%s\x00%s\x00%d\x00%d\x00%d", strings.ToLower(call.Hostname), call.path(), *call.Desired, call.Min, call.Max)
	for {
		e, leader, err := p.keys.begin(key, fingerprint)
		if err != nil {
			log.Warn("idempotency key reused with another call")
			textAnswer(http.StatusUnprocessableEntity, "idempotency key reused with another call").write(w, false)
			return
		}
		if leader {
			a := p.serve(r.Context(), call, log)
			// Only an accepted call is replayed: a refusal or a failure
			// may go differently when Aperio retries the same decision.
			p.keys.finish(key, e, a, a.status/100 == 2)
			a.write(w, false)
			return
		}
		if p.followerWaitingForTest != nil {
			p.followerWaitingForTest()
		}
		select {
		case <-r.Context().Done():
			// The caller left; nothing was done for it. Should anything
			// still read this, it is told to call again.
			answer{status: http.StatusServiceUnavailable, retryAfter: time.Second, body: []byte("gave up waiting for the first call with this key\n")}.write(w, false)
			return
		case <-e.done:
		}
		if a, ok := e.result(); ok {
			log.Info("scaling call replayed", logKeyReplicas, "unchanged")
			a.write(w, true)
			return
		}
		// The first call with this key was not accepted: this one tries
		// again as a new leader.
	}
}

// serve runs one call that passed the checks: it finds the object and
// sets its replicas.
func (p *provider) serve(ctx context.Context, call hookCall, log *slog.Logger) answer {
	select {
	case p.sem <- struct{}{}:
		defer func() { <-p.sem }()
	default:
		log.Warn("scaling call refused: too many in flight")
		return answer{status: http.StatusTooManyRequests, retryAfter: time.Second, body: []byte("too many calls in flight\n")}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.APITimeout)
	defer cancel()

	objs, err := p.candidates(ctx, call.Hostname, call.path())
	if err != nil {
		log.Error("list objects", logKeyError, err)
		return apiFailure(err)
	}
	switch len(objs) {
	case 0:
		log.Warn("no object for hostname")
		return textAnswer(http.StatusNotFound, fmt.Sprintf("no Deployment or StatefulSet in namespace %s is annotated %s=%s (path %s)",
			p.cfg.Namespace, annHostname, call.Hostname, call.path()))
	case 1:
	default:
		names := make([]string, len(objs))
		for i, o := range objs {
			names[i] = o.kind + "/" + o.name
		}
		log.Warn("several objects for hostname", "objects", strings.Join(names, ","))
		return textAnswer(http.StatusConflict, "ambiguous: several objects carry this hostname and path: "+strings.Join(names, ", "))
	}
	obj := objs[0]
	log = log.With(logKeyKind, obj.kind, logKeyName, obj.name)
	hi := p.cfg.MaxReplicas
	if v, ok := obj.annotations[annMaxReplicas]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil || n < 0 {
			log.Error("bad annotation", "annotation", annMaxReplicas, "value", v)
			return textAnswer(http.StatusConflict, fmt.Sprintf("%s/%s: annotation %s=%q is not a count", obj.kind, obj.name, annMaxReplicas, v))
		}
		hi = min(hi, int32(n))
	}
	want := replicasFor(call, hi)

	unlock, err := p.locks.lock(ctx, obj.kind+"/"+obj.name)
	if err != nil {
		log.Warn("scaling call refused: gave up waiting for the object's lock", logKeyError, err)
		return answer{status: http.StatusServiceUnavailable, retryAfter: time.Second, body: []byte("the object is busy\n")}
	}
	defer unlock()
	// The stamp goes first: a retirement read after it is stale, and one
	// read before it writes replicas with a resourceVersion the stamp
	// has since changed, so its write conflicts and it reads again.
	if p.webhookKey != nil && *call.Desired > 0 {
		if err := p.stamp(ctx, obj); err != nil {
			if apierrors.IsNotFound(err) {
				log.Warn("object vanished", logKeyError, err)
				return textAnswer(http.StatusNotFound, fmt.Sprintf("%s/%s is gone", obj.kind, obj.name))
			}
			log.Error("stamp object", logKeyError, err)
			return apiFailure(err)
		}
	}

	var res Result
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := p.getScale(ctx, obj)
		if err != nil {
			return err
		}
		res = Result{Kind: obj.kind, Namespace: p.cfg.Namespace, Name: obj.name, Previous: sc.Spec.Replicas, Replicas: want}
		if sc.Spec.Replicas == want {
			return nil
		}
		sc.Spec.Replicas = want
		_, err = p.updateScale(ctx, obj, sc)
		return err
	})
	if err != nil {
		if apierrors.IsNotFound(err) {
			log.Warn("object vanished", logKeyError, err)
			return textAnswer(http.StatusNotFound, fmt.Sprintf("%s/%s is gone", obj.kind, obj.name))
		}
		log.Error("scale object", logKeyError, err)
		return apiFailure(err)
	}
	log.Info("scaling call", logKeyPrevious, res.Previous, logKeyReplicas, res.Replicas)
	body, err := json.Marshal(res)
	if err != nil {
		panic("kubernetes-provider: marshal result: " + err.Error()) // a struct of strings and ints
	}
	return answer{status: http.StatusOK, body: append(body, '\n'), json: true}
}

// replicasFor is the replica count a call asks for: desired, raised to the
// call's min and capped by its max, then capped by hi (the provider's and
// the object's bound, which win over the call's min). A max of 0 means
// "cold starts only" (docs/autoscaling.md) and caps at 1.
func replicasFor(call hookCall, hi int32) int32 {
	d := max(*call.Desired, call.Min)
	d = min(d, max(call.Max, 1))
	return int32(min(int64(d), int64(hi)))
}

// apiFailure is the answer to a Kubernetes API error: 503 with the API
// server's suggested delay as Retry-After, or defaultRetryAfter, so Aperio
// calls again later rather than at once.
func apiFailure(err error) answer {
	wait := defaultRetryAfter
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		wait = min(time.Duration(s)*time.Second, 10*time.Minute)
	}
	return answer{status: http.StatusServiceUnavailable, retryAfter: wait, body: []byte("the cluster did not answer: see the provider's log\n")}
}

// object is one Deployment or StatefulSet that names the hostname.
type object struct {
	kind        string
	name        string
	annotations map[string]string
}

// candidates lists the Deployments and StatefulSets of the namespace whose
// annotations name hostname and path. An object without the hostname
// annotation is never returned, whatever its name or labels, and neither is
// one being deleted.
func (p *provider) candidates(ctx context.Context, hostname, path string) ([]object, error) {
	var out []object
	keep := func(kind string, m metav1.ObjectMeta) {
		if m.DeletionTimestamp == nil && annotatedFor(m.Annotations, hostname, path) {
			out = append(out, object{kind: kind, name: m.Name, annotations: m.Annotations})
		}
	}
	apps := p.kube.AppsV1()
	err := listPages(ctx, p.cfg.Selector, func(ctx context.Context, o metav1.ListOptions) (string, error) {
		l, err := apps.Deployments(p.cfg.Namespace).List(ctx, o)
		if err != nil {
			return "", fmt.Errorf("list deployments: %w", err)
		}
		for i := range l.Items {
			keep(kindDeployment, l.Items[i].ObjectMeta)
		}
		return l.Continue, nil
	})
	if err != nil {
		return nil, err
	}
	err = listPages(ctx, p.cfg.Selector, func(ctx context.Context, o metav1.ListOptions) (string, error) {
		l, err := apps.StatefulSets(p.cfg.Namespace).List(ctx, o)
		if err != nil {
			return "", fmt.Errorf("list statefulsets: %w", err)
		}
		for i := range l.Items {
			keep(kindStatefulSet, l.Items[i].ObjectMeta)
		}
		return l.Continue, nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b object) int { return strings.Compare(a.kind+"/"+a.name, b.kind+"/"+b.name) })
	return out, nil
}

// errTooManyObjects is a namespace too large to list in maxListPages.
var errTooManyObjects = fmt.Errorf("more than %d objects of one kind: narrow the listing with --selector", listPageSize*maxListPages)

// listPages calls list page by page until the API server has no more,
// at most maxListPages times.
func listPages(ctx context.Context, selector string, list func(context.Context, metav1.ListOptions) (string, error)) error {
	o := metav1.ListOptions{LabelSelector: selector, Limit: listPageSize}
	for range maxListPages {
		next, err := list(ctx, o)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		o.Continue = next
	}
	return errTooManyObjects
}

// annotatedFor reports whether annotations name hostname (in the
// comma-separated aperio.dev/hostname, without regard to case or a
// trailing dot) and path (aperio.dev/path, "/" when absent).
func annotatedFor(annotations map[string]string, hostname, path string) bool {
	names, ok := annotations[annHostname]
	if !ok {
		return false
	}
	want := normalHostname(hostname)
	found := false
	for name := range strings.SplitSeq(names, ",") {
		if n := normalHostname(name); n != "" && n == want {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	objPath := strings.TrimSpace(annotations[annPath])
	if objPath == "" {
		objPath = "/"
	}
	return objPath == path
}

func normalHostname(s string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), "."))
}

func (p *provider) getScale(ctx context.Context, o object) (*autoscalingv1.Scale, error) {
	apps := p.kube.AppsV1()
	if o.kind == kindStatefulSet {
		return apps.StatefulSets(p.cfg.Namespace).GetScale(ctx, o.name, metav1.GetOptions{})
	}
	return apps.Deployments(p.cfg.Namespace).GetScale(ctx, o.name, metav1.GetOptions{})
}

func (p *provider) updateScale(ctx context.Context, o object, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	apps := p.kube.AppsV1()
	if o.kind == kindStatefulSet {
		return apps.StatefulSets(p.cfg.Namespace).UpdateScale(ctx, o.name, sc, metav1.UpdateOptions{})
	}
	return apps.Deployments(p.cfg.Namespace).UpdateScale(ctx, o.name, sc, metav1.UpdateOptions{})
}

// path is the call's bind path, "/" for the whole hostname (null or "").
func (c hookCall) path() string {
	if c.Path == nil || *c.Path == "" {
		return "/"
	}
	return *c.Path
}

// decodeCall reads and checks one call body.
func decodeCall(w http.ResponseWriter, r *http.Request) (hookCall, error) {
	var c hookCall
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(&c); err != nil {
		return c, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return c, errors.New("more than one JSON value")
	}
	var errs []error
	if c.Desired == nil {
		errs = append(errs, errors.New("desired is missing"))
	} else if *c.Desired < 0 {
		errs = append(errs, fmt.Errorf("desired %d is negative", *c.Desired))
	}
	if c.Min < 0 || c.Max < 0 {
		errs = append(errs, fmt.Errorf("min %d and max %d must not be negative", c.Min, c.Max))
	}
	if c.Max > 0 && c.Min > c.Max {
		errs = append(errs, fmt.Errorf("min %d is above max %d", c.Min, c.Max))
	}
	if err := checkHostname(c.Hostname); err != nil {
		errs = append(errs, err)
	}
	if c.Path != nil && *c.Path != "" && (len(*c.Path) > maxPathBytes || !strings.HasPrefix(*c.Path, "/") || !printable(*c.Path)) {
		errs = append(errs, fmt.Errorf("path %.64q is not a path of at most %d bytes", *c.Path, maxPathBytes))
	}
	if len(c.Reason) > maxReasonBytes || !printable(c.Reason) {
		errs = append(errs, fmt.Errorf("reason %.64q is not a short word", c.Reason))
	}
	return c, errors.Join(errs...)
}

// checkHostname accepts a hostname or a wildcard pattern ("*.example.com")
// as Aperio's records name them.
func checkHostname(h string) error {
	if h == "" || len(h) > maxHostnameBytes {
		return fmt.Errorf("hostname %.64q must have 1 to %d bytes", h, maxHostnameBytes)
	}
	for i := range len(h) {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_' || c == '*') {
			return fmt.Errorf("hostname %.64q has a byte outside letters, digits and .-_*", h)
		}
	}
	return nil
}

// checkKey accepts an empty key (no dedupe) or up to maxKeyBytes of
// printable ASCII.
func checkKey(k string) error {
	if len(k) > maxKeyBytes || !printable(k) {
		return fmt.Errorf("idempotency key must be at most %d printable ASCII bytes", maxKeyBytes)
	}
	return nil
}

func printable(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
