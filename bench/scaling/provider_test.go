package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestDecodeHookCall(t *testing.T) {
	c, err := decodeHookCall(strings.NewReader(`{"reason":"scale_out","hostname":"a.test","path":null,"org_id":null,"current":1,"desired":2,"min":1,"max":2}`))
	want := hookCall{Reason: reasonScaleOut, Hostname: "a.test", Current: 1, Desired: 2, Min: 1, Max: 2}
	if err != nil || c != want {
		t.Fatalf("decodeHookCall = %+v, %v, want %+v", c, err, want)
	}
}

func TestDecodeHookCallHostile(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"empty", "", "EOF"},
		{"not JSON", "reason=cold_start", "invalid character"},
		{"array", `[1,2]`, "cannot unmarshal"},
		{"unknown reason", `{"reason":"explode","hostname":"a.test"}`, `unknown reason "explode"`},
		{"long reason is cut", `{"reason":"` + strings.Repeat("x", 1000) + `","hostname":"a.test"}`, `unknown reason "` + strings.Repeat("x", 40) + `"`},
		{"no hostname", `{"reason":"cold_start"}`, "hostname of 0 bytes"},
		{"huge hostname", `{"reason":"cold_start","hostname":"` + strings.Repeat("a", 300) + `"}`, "hostname of 300 bytes"},
		{"wrong type", `{"reason":"cold_start","hostname":"a.test","desired":"two"}`, "cannot unmarshal"},
		// The limit cuts the body: the decoder sees truncated JSON.
		{"body over the limit", `{"reason":"cold_start","hostname":"` + strings.Repeat("a", maxHookBody) + `"}`, "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeHookCall(strings.NewReader(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decodeHookCall = %v, want an error containing %q", err, tt.want)
			}
			if err != nil && len(err.Error()) > 300 {
				t.Errorf("error of %d bytes quotes the input whole", len(err.Error()))
			}
		})
	}
}

// TestProviderRecordsAndDispatches: a call is answered 202, recorded with
// its (bounded) Idempotency-Key, and handed to its hostname's action, or
// the default one; malformed calls are counted and answered 400.
func TestProviderRecordsAndDispatches(t *testing.T) {
	p := newProvider(0)
	got := make(chan hookCall, 4)
	p.on("a.test", func(c hookCall) { got <- c })
	fallback := make(chan hookCall, 4)
	p.onAny(func(c hookCall) { fallback <- c })

	post := func(body, key string) int {
		req := httptest.NewRequest("POST", "/scale", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)
		return w.Code
	}
	if code := post(`{"reason":"cold_start","hostname":"a.test","desired":1}`, strings.Repeat("k", 500)); code != http.StatusAccepted {
		t.Fatalf("POST a call = %d, want 202", code)
	}
	if code := post(`{"reason":"scale_in","hostname":"b.test","current":2,"desired":1}`, "key-b"); code != http.StatusAccepted {
		t.Fatalf("POST a call = %d, want 202", code)
	}
	if code := post(`{"reason":"nope","hostname":"a.test"}`, ""); code != http.StatusBadRequest {
		t.Fatalf("POST a malformed call = %d, want 400", code)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest("GET", "/scale", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /scale = %d, want 405", w.Code)
	}
	p.wg.Wait()

	select {
	case c := <-got:
		if c.Reason != reasonColdStart || len(c.Key) != maxIdempotencyKey || c.At.IsZero() {
			t.Errorf("a.test's action got %+v, want the cold_start with a key cut to %d bytes and a time", c, maxIdempotencyKey)
		}
	default:
		t.Error("a.test's action was not run")
	}
	select {
	case c := <-fallback:
		if c.Hostname != "b.test" || c.Key != "key-b" {
			t.Errorf("the default action got %+v, want b.test's call", c)
		}
	default:
		t.Error("the default action was not run for b.test")
	}
	if n := len(p.callsFor("a.test")); n != 1 {
		t.Errorf("callsFor(a.test) = %d calls, want 1 (the malformed one is not a call)", n)
	}
	if n := p.badCalls(); n != 1 {
		t.Errorf("badCalls = %d, want 1", n)
	}
	if n := len(p.callsBetween(time.Time{}, time.Now().Add(time.Second))); n != 2 {
		t.Errorf("callsBetween(all time) = %d, want 2", n)
	}
	if n := len(p.callsBetween(time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))); n != 0 {
		t.Errorf("callsBetween(the future) = %d, want 0", n)
	}
}

// TestProviderDelayHoldsTheAnswer: a provider with a delay records a call
// when it arrives but answers it, and runs its action, only once the delay
// has passed, so that the server's call stays in flight that long.
func TestProviderDelayHoldsTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(2 * time.Second)
		ran := make(chan hookCall, 1)
		p.on("a.test", func(c hookCall) { ran <- c })
		w := httptest.NewRecorder()
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			p.ServeHTTP(w, httptest.NewRequest("POST", "/scale", strings.NewReader(`{"reason":"cold_start","hostname":"a.test","desired":1}`)))
		}()
		start := time.Now()
		synctest.Wait()
		select {
		case <-answered:
			t.Fatal("the call was answered before the delay")
		default:
		}
		if n := len(p.callsFor("a.test")); n != 1 {
			t.Fatalf("callsFor(a.test) while the call is held = %d, want 1 (recorded on arrival)", n)
		}
		if len(ran) != 0 {
			t.Fatal("the action ran before the answer")
		}
		<-answered
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("answered after %v, want 2s", took)
		}
		if w.Code != http.StatusAccepted {
			t.Errorf("answer = %d, want 202", w.Code)
		}
		p.wg.Wait()
		if len(ran) != 1 {
			t.Error("the action did not run after the answer")
		}
	})
}

// TestProviderCloseEndsHeldCalls: close answers a held call 503 at once,
// without its action.
func TestProviderCloseEndsHeldCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(maxProviderDelay)
		p.srv = &http.Server{}
		ran := false
		p.onAny(func(hookCall) { ran = true })
		w := httptest.NewRecorder()
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			p.ServeHTTP(w, httptest.NewRequest("POST", "/scale", strings.NewReader(`{"reason":"scale_out","hostname":"b.test","current":1,"desired":2}`)))
		}()
		synctest.Wait()
		start := time.Now()
		if err := p.close(t.Context()); err != nil {
			t.Fatalf("close = %v", err)
		}
		<-answered
		if took := time.Since(start); took != 0 {
			t.Errorf("the held call ended %v after close, want at once", took)
		}
		if w.Code != http.StatusServiceUnavailable || ran {
			t.Errorf("answer = %d, action ran %v; want 503 and no action", w.Code, ran)
		}
	})
}

func TestNewProviderClampsTheDelay(t *testing.T) {
	if d := newProvider(-time.Second).delay; d != 0 {
		t.Errorf("newProvider(-1s).delay = %v, want 0", d)
	}
	if d := newProvider(time.Hour).delay; d != maxProviderDelay {
		t.Errorf("newProvider(1h).delay = %v, want %v", d, maxProviderDelay)
	}
}
