package webhook

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// The Standard Webhooks specification's published example vector, from
// its reference library's test TestWebhookSign:
// https://github.com/standard-webhooks/standard-webhooks/blob/main/libraries/go/webhook_test.go
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func specHeader() http.Header {
	h := http.Header{}
	h.Set(HeaderID, specID)
	h.Set(HeaderStdTimestamp, strconv.Itoa(specTimestamp))
	h.Set(HeaderStdSignature, specSignature)
	return h
}

func TestSignStandardSpecVector(t *testing.T) {
	if got := SignStandard(specSecret, specID, time.Unix(specTimestamp, 0), []byte(specBody)); got != specSignature {
		t.Errorf("SignStandard(spec vector) = %q, want %q", got, specSignature)
	}
}

func TestVerify(t *testing.T) {
	at := time.Unix(specTimestamp, 0)
	tests := []struct {
		name   string
		edit   func(http.Header)
		body   string
		secret string
		now    time.Time
		want   error
	}{
		{name: "spec vector", now: at},
		{name: "within tolerance", now: at.Add(Tolerance)},
		{name: "several signatures, one valid", now: at, edit: func(h http.Header) {
			h.Set(HeaderStdSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,xx "+specSignature)
		}},
		{name: "too old", now: at.Add(Tolerance + time.Second), want: ErrTimestamp},
		{name: "from the future", now: at.Add(-Tolerance - time.Second), want: ErrTimestamp},
		{name: "timestamp not a number", now: at, want: ErrTimestamp, edit: func(h http.Header) { h.Set(HeaderStdTimestamp, "soon") }},
		{name: "tampered body", now: at, body: `{"test": 2432232315}`, want: ErrSignature},
		{name: "wrong secret", now: at, secret: "whsec_c2VjcmV0", want: ErrSignature},
		{name: "garbage signature", now: at, want: ErrSignature, edit: func(h http.Header) { h.Set(HeaderStdSignature, "v1,!!!") }},
		{name: "signature with trailing bits set", now: at, want: ErrSignature, edit: func(h http.Header) {
			sig := strings.TrimPrefix(specSignature, "v1,")
			h.Set(HeaderStdSignature, "v1,"+b64.RespellingsForTest(sig)[2])
		}},
		{name: "missing id", now: at, want: ErrMissingHeader, edit: func(h http.Header) { h.Del(HeaderID) }},
		{name: "missing signature", now: at, want: ErrMissingHeader, edit: func(h http.Header) { h.Del(HeaderStdSignature) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := specHeader()
			if tt.edit != nil {
				tt.edit(h)
			}
			body, secret := specBody, specSecret
			if tt.body != "" {
				body = tt.body
			}
			if tt.secret != "" {
				secret = tt.secret
			}
			if err := Verify(secret, h, []byte(body), tt.now); !errors.Is(err, tt.want) {
				t.Errorf("Verify() = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestReplayRefused proves the documented check: a delivery sent again
// within the tolerance passes Verify but not Replays; sent again later, it
// fails Verify's timestamp check.
func TestReplayRefused(t *testing.T) {
	at := time.Unix(specTimestamp, 0)
	var seen Replays
	accept := func(now time.Time) error {
		if err := Verify(specSecret, specHeader(), []byte(specBody), now); err != nil {
			return err
		}
		return seen.Check(specID, now)
	}
	if err := accept(at); err != nil {
		t.Fatalf("first delivery: %v, want nil", err)
	}
	if err := accept(at.Add(time.Minute)); !errors.Is(err, ErrReplay) {
		t.Errorf("replay within the tolerance = %v, want ErrReplay", err)
	}
	if err := accept(at.Add(Tolerance + time.Minute)); !errors.Is(err, ErrTimestamp) {
		t.Errorf("replay after the tolerance = %v, want ErrTimestamp", err)
	}
}

func TestReplaysBounded(t *testing.T) {
	r := Replays{Max: 3}
	now := time.Unix(1000, 0)
	for _, id := range []string{"a", "b", "c", "d"} {
		if err := r.Check(id, now); err != nil {
			t.Fatalf("Check(%s) = %v", id, err)
		}
	}
	if len(r.seen) != 3 {
		t.Errorf("ids kept = %d, want 3 (Max)", len(r.seen))
	}
	if err := r.Check("d", now); !errors.Is(err, ErrReplay) {
		t.Errorf("Check(d) again = %v, want ErrReplay", err)
	}
}

// TestDeliveryVerifiesWithStandardVerifier sends a real delivery to an
// httptest receiver that checks it with Verify and Replays.
func TestDeliveryVerifiesWithStandardVerifier(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rcv := newReceiver(t, http.StatusOK)
	h := start(t, fakeLister{[]Subscription{{ID: "wh-1", OrgID: "org-1", URL: rcv.URL,
		Secret: secret, Events: []string{apitype.EventScalingRequested}}}}, Config{})
	h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingRequested))
	waitLog(t, h.logs, "webhook delivered")
	reqs := rcv.requests()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if err := Verify(secret, r.header, r.body, time.Now()); err != nil {
		t.Errorf("Verify(delivery) = %v, want nil", err)
	}
	if r.header.Get(HeaderID) != r.header.Get(HeaderDelivery) || r.header.Get(HeaderEvent) != apitype.EventScalingRequested {
		t.Errorf("headers = %v, want webhook-id equal to %s and %s kept", r.header, HeaderDelivery, HeaderEvent)
	}
	var seen Replays
	if err := seen.Check(r.header.Get(HeaderID), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := seen.Check(r.header.Get(HeaderID), time.Now()); !errors.Is(err, ErrReplay) {
		t.Errorf("same delivery again = %v, want ErrReplay", err)
	}
}
