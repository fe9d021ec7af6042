package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"
)

// Standard Webhooks headers (https://www.standardwebhooks.com/): every
// delivery carries them, so that any Standard Webhooks verifier can check
// it. The X-Aperio-* headers are kept beside them.
const (
	// HeaderID carries the delivery's id, the same for every attempt of
	// one delivery: receivers drop an id they have seen.
	HeaderID = "webhook-id"
	// HeaderStdTimestamp carries the attempt's send time in Unix seconds.
	HeaderStdTimestamp = "webhook-timestamp"
	// HeaderStdSignature carries "v1," and the standard base64
	// HMAC-SHA256 of "<id>.<timestamp>.<body>"; absent when the
	// subscription has no secret.
	HeaderStdSignature = "webhook-signature"
)

// SecretPrefix starts a Standard Webhooks secret: "whsec_" and the
// base64 of the key.
const SecretPrefix = "whsec_"

// Tolerance is how far a delivery's webhook-timestamp may be from the
// receiver's clock, either way, before Verify refuses it: 5 minutes, as
// the specification recommends.
const Tolerance = 5 * time.Minute

// Errors of Verify and Replays.Check; callers branch with errors.Is.
var (
	// ErrMissingHeader is a delivery without webhook-id,
	// webhook-timestamp or webhook-signature.
	ErrMissingHeader = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrTimestamp is a webhook-timestamp that is not a number or lies
	// further than Tolerance from now.
	ErrTimestamp = errors.New("webhook: timestamp outside the tolerance")
	// ErrSignature is a delivery no v1 signature of which matches.
	ErrSignature = errors.New("webhook: no matching signature")
	// ErrReplay is a delivery id already accepted.
	ErrReplay = errors.New("webhook: delivery id seen before")
)

// SigningKey returns the HMAC key of secret: the base64-decoded part
// after SecretPrefix for a Standard Webhooks secret; any other secret (a
// subscription created before signatures followed the specification) is
// used as its bytes.
func SigningKey(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, SecretPrefix); ok {
		if key, err := b64.DecodeStd(rest); err == nil && len(key) > 0 {
			return key
		}
	}
	return []byte(secret)
}

// SignStandard returns the webhook-signature value of a delivery: "v1,"
// and the base64 HMAC-SHA256, keyed with SigningKey(secret), of id, the
// Unix timestamp and body joined by dots.
func SignStandard(secret, id string, at time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(SigningKey(secret), id, strconv.FormatInt(at.Unix(), 10), body))
}

func mac(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// maxSignatures bounds the space-separated entries Verify reads from one
// webhook-signature header.
const maxSignatures = 16

// Verify checks a delivery as a receiver does: its three headers are
// present, its timestamp lies within Tolerance of now, and one of the v1
// signatures (several may be sent, space-separated, when a secret is
// being rotated) is the HMAC of id.timestamp.body under secret, compared
// in constant time. It returns nil, or an error wrapping
// ErrMissingHeader, ErrTimestamp or ErrSignature. Refusing a replay
// within the tolerance is Replays' job; Verify does not remember ids.
func Verify(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderStdTimestamp), h.Get(HeaderStdSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeader
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrTimestamp, ts)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: sent %s, now %s", ErrTimestamp, at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	want := mac(SigningKey(secret), id, ts, body)
	for i, s := range strings.Fields(sigs) {
		if i >= maxSignatures {
			break
		}
		v, enc, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := b64.DecodeStd(enc)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}

// Replays remembers the delivery ids a receiver accepted for as long as
// Verify would accept their timestamp (twice Tolerance), so that a
// delivery captured and sent again within the tolerance is refused. It
// keeps at most max ids (0 means 100,000): beyond that the oldest go
// first. The zero value is ready to use; it is safe for concurrent use.
type Replays struct {
	// Max bounds the ids kept; 0 means 100,000.
	Max int

	mu    sync.Mutex // guards the following fields
	seen  map[string]time.Time
	order []string
}

// Check records id as accepted at now and returns nil, or ErrReplay when
// id was accepted within the last 2×Tolerance. Call it after Verify.
func (r *Replays) Check(id string, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = make(map[string]time.Time)
	}
	if at, ok := r.seen[id]; ok && now.Sub(at) <= 2*Tolerance {
		return fmt.Errorf("%w: %s", ErrReplay, id)
	}
	limit := r.Max
	if limit <= 0 {
		limit = 100_000
	}
	for len(r.order) > 0 && (len(r.order) >= limit || now.Sub(r.seen[r.order[0]]) > 2*Tolerance) {
		delete(r.seen, r.order[0])
		r.order = r.order[1:]
	}
	if _, ok := r.seen[id]; !ok {
		r.order = append(r.order, id)
	}
	r.seen[id] = now
	return nil
}
