package servertest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/control/webhook"
)

// VerifiedReceiver is a webhook subscriber, served by an httptest server,
// that keeps the event names and bodies of the deliveries webhook.Verify
// accepts with Secret, and the reasons of those it refuses (a bad
// signature, or a body naming another event than its header). It is safe
// for concurrent use; Secret is set before the first delivery.
type VerifiedReceiver struct {
	// Secret is the subscription's signing secret.
	Secret string

	mu      sync.Mutex // guards the following fields
	kinds   []string
	bodies  []string // the verified deliveries' bodies, in kinds' order
	refused []string
}

// ServeHTTP verifies and records one delivery; it always answers 200.
func (v *VerifiedReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = webhook.Verify(v.Secret, r.Header, body, time.Now())
	}
	var p struct {
		Event string `json:"event"`
	}
	if err == nil {
		err = json.Unmarshal(body, &p)
	}
	if err == nil && p.Event != r.Header.Get(webhook.HeaderEvent) {
		err = errors.New("body names " + p.Event)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		v.refused = append(v.refused, r.Header.Get(webhook.HeaderEvent)+": "+err.Error())
		return
	}
	v.kinds = append(v.kinds, p.Event)
	v.bodies = append(v.bodies, string(body))
}

// BodiesOf returns the verified bodies of the deliveries of kind, in order
// of arrival.
func (v *VerifiedReceiver) BodiesOf(kind string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for i, k := range v.kinds {
		if k == kind {
			out = append(out, v.bodies[i])
		}
	}
	return out
}

// Count returns how many verified deliveries of kind arrived.
func (v *VerifiedReceiver) Count(kind string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, k := range v.kinds {
		if k == kind {
			n++
		}
	}
	return n
}

// Verified returns, read at one instant, how many verified deliveries of
// each event arrived and the reasons of the refused ones.
func (v *VerifiedReceiver) Verified() (counts map[string]int, refused []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	counts = make(map[string]int)
	for _, k := range v.kinds {
		counts[k]++
	}
	return counts, append([]string(nil), v.refused...)
}
