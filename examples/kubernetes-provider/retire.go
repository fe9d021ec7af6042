package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
)

// Scale to zero (docs/kubernetes.md, "Scale to zero"). An aperio-client
// with idle_action: wait that has been idle for idle_timeout drains,
// disconnects and waits for SIGTERM; Aperio's server then emits the
// webhook event instance_retired, which Aperio delivers to POST /events.
// The provider lowers the replicas of the object annotated for the
// event's hostname and path by one (never below the scaling block's min),
// after marking the retired pod as the one a Deployment's ReplicaSet
// should remove first.
//
// The race with a cold start: a visitor may arrive after the instance
// retired and before the event is served, and Aperio's cold start call
// (desired 1) may reach the provider before the event. Each scaling call
// with desired > 0 stamps the object with annScaledAt (the provider's
// clock) before it writes replicas; a retirement whose at is not after
// the stamp plus Config.ClockSkew is stale: lowering would strand the
// held visitor, so the provider deletes the retired pod instead, and its
// controller starts a fresh one that connects and serves. The margin
// errs towards stale: a retirement judged stale wrongly costs one pod
// replacement and one missed scale-down (the fresh pod retires again
// after idle_timeout), one judged fresh wrongly costs the held visitors
// their cold start.

const (
	// eventInstanceRetired is the one event the provider acts on.
	eventInstanceRetired = "instance_retired"
	// retireReasonIdle is the one retirement reason acted on.
	retireReasonIdle = "idle"
	// annScaledAt is stamped on an object by each scaling call with
	// desired > 0: RFC 3339 with nanoseconds, UTC, the provider's clock.
	annScaledAt = "aperio.dev/scaled-at"
	// annPodDeletionCost ranks a ReplicaSet's pods for removal on a
	// scale-down, lowest first.
	annPodDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
	// retiredPodDeletionCost is set on the retired pod: far below the
	// default 0 of the others.
	retiredPodDeletionCost = "-1000000"
	// retiredTTL is how long delivery ids and instance ids already
	// applied are remembered; maxRetiredIDs bounds each set.
	retiredTTL    = 10 * time.Minute
	maxRetiredIDs = 10_000
)

// Bounds on an event's fields (the body as a whole is bounded by
// maxBodyBytes).
const (
	maxEventNameBytes = 64
	maxAtBytes        = 64
	maxIDBytes        = 128
	maxPodNameBytes   = 253
	maxActorBytes     = 256
	maxSummaryBytes   = 4096
	maxBinds          = 10
	maxMin            = 1 << 20
)

// Log attribute keys of the events route.
const (
	logKeyEvent     = "event"
	logKeyWebhookID = "webhook_id"
	logKeyInstance  = "instance_id"
	logKeyPod       = "pod"
	logKeyAction    = "action"
	logKeyAt        = "at"
	logKeyStamp     = "scaled_at"
)

// Actions a retirement takes, as its answer and log name them.
const (
	// actionLowered: the replicas went down by one.
	actionLowered = "lowered"
	// actionReplaced: stale, the retired pod was deleted for its
	// controller to replace.
	actionReplaced = "replaced"
	// actionStale: stale, and no pod of the object by that name to
	// delete.
	actionStale = "stale"
	// actionAtMin: the replicas are already at the floor.
	actionAtMin = "at_min"
)

// webhookEvent is Aperio's generic webhook envelope (docs/webhooks.md).
// Unknown keys are ignored, so a newer server's body still decodes.
type webhookEvent struct {
	Event    string          `json:"event"`
	At       string          `json:"at"`
	OrgID    string          `json:"org_id"`
	Hostname string          `json:"hostname"`
	Path     string          `json:"path"`
	Detail   json.RawMessage `json:"detail"`
}

// retiredDetail is the detail of instance_retired.
type retiredDetail struct {
	Actor      string       `json:"actor"`
	Summary    string       `json:"summary"`
	ClientID   string       `json:"client_id"`
	InstanceID string       `json:"instance_id"`
	Name       string       `json:"name"`
	TokenID    string       `json:"token_id"`
	Reason     string       `json:"reason"`
	IdleAction string       `json:"idle_action"`
	Binds      []retireBind `json:"binds"`
	Min        int          `json:"min"`
}

// retireBind is one hostname and path the retired instance served.
type retireBind struct {
	Hostname string `json:"hostname"`
	Path     string `json:"path"`
}

// retirement is a checked instance_retired event.
type retirement struct {
	at       time.Time
	hostname string
	path     string // "/" for the whole hostname
	detail   retiredDetail
}

// retireResult is the JSON answer to a retirement acted on.
type retireResult struct {
	Action    string `json:"action"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Replicas  int32  `json:"replicas"`
	Previous  int32  `json:"previous"`
	// Pod is the pod marked for removal (lowered) or deleted (replaced).
	Pod string `json:"pod,omitempty"`
}

// decodeEnvelope reads one event body: a single JSON object whose
// envelope fields are bounded. Its detail is decoded by the event's own
// decoder.
func decodeEnvelope(body []byte) (webhookEvent, error) {
	var ev webhookEvent
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&ev); err != nil {
		return ev, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ev, errors.New("more than one JSON value")
	}
	var errs []error
	if ev.Event == "" || len(ev.Event) > maxEventNameBytes || !printable(ev.Event) {
		errs = append(errs, fmt.Errorf("event %.64q is not a name of 1 to %d bytes", ev.Event, maxEventNameBytes))
	}
	if len(ev.OrgID) > maxIDBytes {
		errs = append(errs, fmt.Errorf("org_id above %d bytes", maxIDBytes))
	}
	if len(ev.Hostname) > maxHostnameBytes {
		errs = append(errs, fmt.Errorf("hostname above %d bytes", maxHostnameBytes))
	}
	if len(ev.Path) > maxPathBytes {
		errs = append(errs, fmt.Errorf("path above %d bytes", maxPathBytes))
	}
	if len(ev.At) > maxAtBytes {
		errs = append(errs, fmt.Errorf("at above %d bytes", maxAtBytes))
	}
	return ev, errors.Join(errs...)
}

// decodeRetirement checks an instance_retired event: its time, hostname,
// path and detail, every field bounded.
func decodeRetirement(ev webhookEvent) (retirement, error) {
	var rt retirement
	if len(ev.Detail) == 0 || string(ev.Detail) == "null" {
		return rt, errors.New("detail is missing")
	}
	if err := json.Unmarshal(ev.Detail, &rt.detail); err != nil {
		return rt, fmt.Errorf("detail: %w", err)
	}
	d := rt.detail
	var errs []error
	at, err := time.Parse(time.RFC3339Nano, ev.At)
	if err != nil {
		errs = append(errs, fmt.Errorf("at %.64q is not an RFC 3339 time", ev.At))
	}
	rt.at = at
	rt.hostname, rt.path = ev.Hostname, ev.Path
	if rt.hostname == "" && len(d.Binds) > 0 {
		rt.hostname, rt.path = d.Binds[0].Hostname, d.Binds[0].Path
	}
	if rt.path == "" {
		rt.path = "/"
	}
	if err := checkHostname(rt.hostname); err != nil {
		errs = append(errs, err)
	}
	if err := checkEventPath(rt.path); err != nil {
		errs = append(errs, err)
	}
	if len(d.Binds) > maxBinds {
		errs = append(errs, fmt.Errorf("%d binds, at most %d", len(d.Binds), maxBinds))
	} else {
		for i, b := range d.Binds {
			if err := checkHostname(b.Hostname); err != nil {
				errs = append(errs, fmt.Errorf("binds[%d]: %w", i, err))
			}
			if err := checkEventPath(b.Path); b.Path != "" && err != nil {
				errs = append(errs, fmt.Errorf("binds[%d]: %w", i, err))
			}
		}
	}
	if d.InstanceID == "" || len(d.InstanceID) > maxIDBytes || !printable(d.InstanceID) {
		errs = append(errs, fmt.Errorf("instance_id %.64q is not an id of 1 to %d printable bytes", d.InstanceID, maxIDBytes))
	}
	// Only bounded: a name that is no pod's name (a client named in
	// another script, say) still lowers, without marking a pod.
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"client_id", d.ClientID, maxIDBytes},
		{"token_id", d.TokenID, maxIDBytes},
		{"name", d.Name, maxPodNameBytes},
		{"reason", d.Reason, maxReasonBytes},
		{"idle_action", d.IdleAction, maxReasonBytes},
	} {
		if len(f.value) > f.max {
			errs = append(errs, fmt.Errorf("%s above %d bytes", f.name, f.max))
		}
	}
	if len(d.Actor) > maxActorBytes || len(d.Summary) > maxSummaryBytes {
		errs = append(errs, fmt.Errorf("actor or summary above %d or %d bytes", maxActorBytes, maxSummaryBytes))
	}
	if d.Min < 0 || d.Min > maxMin {
		errs = append(errs, fmt.Errorf("min %d is not in [0, %d]", d.Min, maxMin))
	}
	return rt, errors.Join(errs...)
}

// checkEventPath accepts a bind path as the scaling calls' paths are
// accepted: starting with "/", at most maxPathBytes printable bytes.
func checkEventPath(p string) error {
	if len(p) > maxPathBytes || !strings.HasPrefix(p, "/") || !printable(p) {
		return fmt.Errorf("path %.64q is not a path of at most %d bytes", p, maxPathBytes)
	}
	return nil
}

// handleEvents serves one webhook delivery: 404 when the provider has no
// webhook secret (it never acts on an unsigned event), 413 for a body
// above 64 KiB, 401 unless the Standard Webhooks signature verifies with
// a timestamp within 5 minutes, 200 "already applied" for a delivery id or
// an instance id applied within 10 minutes, 400 for a bad body, 200
// without action for another event or reason, and for instance_retired
// what retire answers.
func (p *provider) handleEvents(w http.ResponseWriter, r *http.Request) {
	if p.webhookKey == nil {
		p.noWebhookSecretOnce.Do(func() {
			p.cfg.Logger.Warn("webhook event refused: no webhook secret is configured (PROVIDER_WEBHOOK_SECRET); events are never acted on unsigned")
		})
		textAnswer(http.StatusNotFound, "no webhook secret configured").write(w, false)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		status := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status = http.StatusRequestEntityTooLarge
		}
		textAnswer(status, "bad event: body not read").write(w, false)
		return
	}
	id, err := verifyWebhook(p.webhookKey, r.Header, body, p.now())
	if err != nil {
		p.cfg.Logger.Warn("webhook event refused", logKeyError, err, logKeyRemote, r.RemoteAddr)
		textAnswer(http.StatusUnauthorized, "unauthorized").write(w, false)
		return
	}
	log := p.cfg.Logger.With(logKeyWebhookID, id, logKeyRemote, r.RemoteAddr)
	if p.deliveries.has(id) {
		log.Info("webhook event already applied")
		textAnswer(http.StatusOK, "already applied").write(w, false)
		return
	}
	ev, err := decodeEnvelope(body)
	if err != nil {
		log.Warn("bad webhook event", logKeyError, err)
		textAnswer(http.StatusBadRequest, "bad event: "+err.Error()).write(w, false)
		return
	}
	log = log.With(logKeyEvent, ev.Event)
	if ev.Event != eventInstanceRetired {
		p.deliveries.add(id)
		log.Debug("webhook event ignored")
		textAnswer(http.StatusOK, "ignored: not "+eventInstanceRetired).write(w, false)
		return
	}
	rt, err := decodeRetirement(ev)
	if err != nil {
		log.Warn("bad webhook event", logKeyError, err)
		textAnswer(http.StatusBadRequest, "bad event: "+err.Error()).write(w, false)
		return
	}
	log = log.With(logKeyHostname, rt.hostname, logKeyPath, rt.path, logKeyInstance, rt.detail.InstanceID,
		logKeyPod, rt.detail.Name, logKeyReason, rt.detail.Reason, logKeyAt, ev.At)
	if rt.detail.Reason != retireReasonIdle {
		p.deliveries.add(id)
		log.Info("retirement ignored: reason is not idle")
		textAnswer(http.StatusOK, "ignored: reason is not "+retireReasonIdle).write(w, false)
		return
	}
	p.retire(r.Context(), id, rt, log).write(w, false)
}

// retire acts on one checked retirement: it finds the object as a scaling
// call does, and under the object's lock lowers its replicas or, when a
// scaling call stamped it since the retirement, replaces the retired pod.
// The delivery id and the instance id are remembered once applied, so
// either seen again is answered "already applied".
func (p *provider) retire(ctx context.Context, deliveryID string, rt retirement, log *slog.Logger) answer {
	select {
	case p.sem <- struct{}{}:
		defer func() { <-p.sem }()
	default:
		log.Warn("retirement refused: too many calls in flight")
		return answer{status: http.StatusTooManyRequests, retryAfter: time.Second, body: []byte("too many calls in flight\n")}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.APITimeout)
	defer cancel()

	if p.instances.has(rt.detail.InstanceID) {
		p.deliveries.add(deliveryID)
		log.Info("retirement already applied for this instance")
		return textAnswer(http.StatusOK, "already applied")
	}
	objs, err := p.candidates(ctx, rt.hostname, rt.path)
	if err != nil {
		log.Error("list objects", logKeyError, err)
		return apiFailure(err)
	}
	switch len(objs) {
	case 0:
		log.Warn("retirement not applied: no object for hostname")
		return textAnswer(http.StatusNotFound, fmt.Sprintf("no Deployment or StatefulSet in namespace %s is annotated %s=%s (path %s)",
			p.cfg.Namespace, annHostname, rt.hostname, rt.path))
	case 1:
	default:
		names := make([]string, len(objs))
		for i, o := range objs {
			names[i] = o.kind + "/" + o.name
		}
		log.Warn("retirement not applied: several objects for hostname", "objects", strings.Join(names, ","))
		return textAnswer(http.StatusConflict, "ambiguous: several objects carry this hostname and path: "+strings.Join(names, ", "))
	}
	obj := objs[0]
	log = log.With(logKeyKind, obj.kind, logKeyName, obj.name)
	unlock, err := p.locks.lock(ctx, obj.kind+"/"+obj.name)
	if err != nil {
		log.Warn("retirement not applied: gave up waiting for the object's lock", logKeyError, err)
		return answer{status: http.StatusServiceUnavailable, retryAfter: time.Second, body: []byte("the object is busy\n")}
	}
	defer unlock()
	// A concurrent delivery of the same retirement may have applied it
	// while this one waited for the lock.
	if p.deliveries.has(deliveryID) || p.instances.has(rt.detail.InstanceID) {
		p.deliveries.add(deliveryID)
		log.Info("retirement already applied")
		return textAnswer(http.StatusOK, "already applied")
	}
	res, err := p.applyRetirement(ctx, obj, rt, log)
	if err != nil {
		switch {
		case apierrors.IsNotFound(err):
			log.Warn("object vanished", logKeyError, err)
			return textAnswer(http.StatusNotFound, fmt.Sprintf("%s/%s is gone", obj.kind, obj.name))
		case errors.Is(err, errNotAnnotated):
			log.Warn("retirement not applied", logKeyError, err)
			return textAnswer(http.StatusConflict, err.Error())
		}
		log.Error("retirement not applied", logKeyError, err)
		return apiFailure(err)
	}
	p.deliveries.add(deliveryID)
	p.instances.add(rt.detail.InstanceID)
	body, err := json.Marshal(res)
	if err != nil {
		panic("kubernetes-provider: marshal retirement: " + err.Error()) // a struct of strings and ints
	}
	return answer{status: http.StatusOK, body: append(body, '\n'), json: true}
}

// errNotAnnotated is an object whose annotations no longer name the
// retirement's hostname and path when it is read again.
var errNotAnnotated = errors.New("the object is no longer annotated for this hostname and path")

// applyRetirement reads the object and either lowers its replicas by one
// (not below the event's min), after marking the retired pod of a
// Deployment for removal, or, when the object's scaled-at stamp is not
// before the retirement, deletes the retired pod. The caller holds the
// object's lock; the scale update carries the resourceVersion read, so a
// stamp written meanwhile by another process conflicts and is read again.
func (p *provider) applyRetirement(ctx context.Context, obj object, rt retirement, log *slog.Logger) (retireResult, error) {
	floor := int32(max(rt.detail.Min, 0))
	var res retireResult
	var st objectState
	marked := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		st, err = p.getObject(ctx, obj)
		if err != nil {
			return err
		}
		if p.retireReadForTest != nil {
			p.retireReadForTest()
		}
		if !annotatedFor(st.annotations, rt.hostname, rt.path) {
			return fmt.Errorf("%s/%s: %w", obj.kind, obj.name, errNotAnnotated)
		}
		res = retireResult{Kind: obj.kind, Namespace: p.cfg.Namespace, Name: obj.name, Previous: st.replicas, Replicas: st.replicas}
		if stamp, ok := st.annotations[annScaledAt]; ok {
			at, err := time.Parse(time.RFC3339Nano, stamp)
			switch {
			case err != nil:
				log.Warn("bad scaled-at stamp ignored", logKeyStamp, stamp)
			case !rt.at.After(at.Add(p.cfg.ClockSkew)):
				log = log.With(logKeyStamp, stamp)
				res.Action = actionStale
				return nil
			}
		}
		if st.replicas <= floor {
			res.Action = actionAtMin
			return nil
		}
		if obj.kind == kindDeployment && !marked {
			pod, err := p.retiredPod(ctx, obj, st.uid, rt, log)
			if err != nil {
				return err
			}
			if pod != nil {
				if err := p.markForRemoval(ctx, pod); err != nil {
					return err
				}
				res.Pod = pod.Name
			}
			marked = true
		}
		sc := &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: obj.name, Namespace: p.cfg.Namespace, ResourceVersion: st.resourceVersion},
			Spec:       autoscalingv1.ScaleSpec{Replicas: st.replicas - 1},
		}
		if _, err := p.updateScale(ctx, obj, sc); err != nil {
			return err
		}
		res.Action, res.Replicas = actionLowered, st.replicas-1
		return nil
	})
	if err != nil {
		return res, err
	}
	if res.Action == actionStale {
		// A scaling call came after the retirement: a visitor may be
		// waiting for this instance. Replace it rather than lower.
		pod, err := p.retiredPod(ctx, obj, st.uid, rt, log)
		if err != nil {
			return res, err
		}
		if pod != nil {
			err := p.kube.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				return res, fmt.Errorf("delete pod %s: %w", pod.Name, err)
			}
			res.Action, res.Pod = actionReplaced, pod.Name
		}
	}
	log.Info("retirement applied", logKeyAction, res.Action, logKeyPrevious, res.Previous, logKeyReplicas, res.Replicas, logKeyPod+"_acted_on", res.Pod)
	return res, nil
}

// objectState is what a retirement reads of the object.
type objectState struct {
	uid             types.UID
	resourceVersion string
	replicas        int32
	annotations     map[string]string
}

// getObject reads the object's identity, version, replicas and
// annotations.
func (p *provider) getObject(ctx context.Context, o object) (objectState, error) {
	apps := p.kube.AppsV1()
	var m metav1.ObjectMeta
	var replicas *int32
	if o.kind == kindStatefulSet {
		s, err := apps.StatefulSets(p.cfg.Namespace).Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			return objectState{}, err
		}
		m, replicas = s.ObjectMeta, s.Spec.Replicas
	} else {
		d, err := apps.Deployments(p.cfg.Namespace).Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			return objectState{}, err
		}
		m, replicas = d.ObjectMeta, d.Spec.Replicas
	}
	st := objectState{uid: m.UID, resourceVersion: m.ResourceVersion, replicas: 1, annotations: m.Annotations}
	if replicas != nil {
		st.replicas = *replicas
	}
	return st, nil
}

// retiredPod returns the pod the retirement names (detail.name, the
// client's name, which defaults to the pod's) when it exists, is not
// being deleted, was created no later than the retirement (a pod of the
// same name made since, as a StatefulSet makes, is a fresh instance), and
// is controlled by the object: directly for a StatefulSet, through a
// ReplicaSet the Deployment controls for a Deployment. Otherwise nil.
func (p *provider) retiredPod(ctx context.Context, obj object, uid types.UID, rt retirement, log *slog.Logger) (*corev1.Pod, error) {
	name := rt.detail.Name
	if name == "" || len(validation.IsDNS1123Subdomain(name)) > 0 {
		log.Info("retired instance's name is not a pod name")
		return nil, nil
	}
	pod, err := p.kube.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		log.Info("retired instance's pod not found")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get pod %s: %w", name, err)
	}
	if pod.DeletionTimestamp != nil {
		log.Info("retired instance's pod is already being deleted")
		return nil, nil
	}
	if pod.CreationTimestamp.After(rt.at) {
		log.Info("pod of the retired instance's name was created after the retirement: not the retired instance")
		return nil, nil
	}
	ref := metav1.GetControllerOf(pod)
	owned := false
	switch {
	case ref == nil:
	case obj.kind == kindStatefulSet:
		owned = ref.Kind == kindStatefulSet && ref.Name == obj.name && ref.UID == uid
	case ref.Kind == "ReplicaSet":
		rs, err := p.kube.AppsV1().ReplicaSets(p.cfg.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("get replicaset %s: %w", ref.Name, err)
		}
		owned = rs.UID == ref.UID && controlledBy(rs, kindDeployment, obj.name, uid)
	}
	if !owned {
		log.Warn("retired instance's pod is not the object's: left alone")
		return nil, nil
	}
	return pod, nil
}

// controlledBy reports whether rs's controller is the object of kind,
// name and uid.
func controlledBy(rs *appsv1.ReplicaSet, kind, name string, uid types.UID) bool {
	ref := metav1.GetControllerOf(rs)
	return ref != nil && ref.Kind == kind && ref.Name == name && ref.UID == uid
}

// markForRemoval sets the pod's deletion cost far below the others', so
// the ReplicaSet removes it first when the replicas go down. The patch
// names the pod's uid, so it fails rather than mark a new pod of the same
// name.
func (p *provider) markForRemoval(ctx context.Context, pod *corev1.Pod) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{annPodDeletionCost: retiredPodDeletionCost},
	}})
	if err != nil {
		return err
	}
	_, err = p.kube.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("mark pod %s for removal: %w", pod.Name, err)
	}
	return nil
}

// stamp records on the object that a scaling call with desired > 0 is
// being served now, before its replicas are written: a retirement from
// before this moment is stale.
func (p *provider) stamp(ctx context.Context, o object) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{annScaledAt: p.now().UTC().Format(time.RFC3339Nano)},
	}})
	if err != nil {
		return err
	}
	apps := p.kube.AppsV1()
	if o.kind == kindStatefulSet {
		_, err = apps.StatefulSets(p.cfg.Namespace).Patch(ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = apps.Deployments(p.cfg.Namespace).Patch(ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	return err
}
