package tunnel

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRefusalCodes checks that each permanent refusal reaches the client
// with its code and the permanent flag, and that a refusal that may pass
// on its own carries neither.
func TestRefusalCodes(t *testing.T) {
	tests := []struct {
		name      string
		scfg      func(*fakeRegistry) ServerConfig
		token     string
		code      string
		permanent bool
	}{
		{name: "wrong token", token: "wrong", code: RefusalToken, permanent: true,
			scfg: func(r *fakeRegistry) ServerConfig { return ServerConfig{Auth: tokenAuth{}, Registry: r} }},
		{name: "hostname not allowed", token: testToken, code: RefusalHostname, permanent: true,
			scfg: func(r *fakeRegistry) ServerConfig {
				r.refuse = PermanentRefusal(RefusalHostname, "may not bind app.test")
				return ServerConfig{Auth: tokenAuth{}, Registry: r}
			}},
		{name: "transient registry refusal", token: testToken, code: "", permanent: false,
			scfg: func(r *fakeRegistry) ServerConfig {
				r.refuse = errors.New("bind app.test is served by another organization's clients")
				return ServerConfig{Auth: tokenAuth{}, Registry: r}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scfg := tt.scfg(newFakeRegistry())
			err := sessionOnce(t, scfg, tt.token, testAnnouncement)
			var refused *RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("runSession = %v, want a RefusedError", err)
			}
			if refused.Code != tt.code || refused.Permanent != tt.permanent {
				t.Errorf("refusal code, permanent = %q, %v, want %q, %v (%v)", refused.Code, refused.Permanent, tt.code, tt.permanent, err)
			}
			if refused.Reason == "" {
				t.Error("refusal reason is empty, want the server's words")
			}
		})
	}
}

// TestOldServerRefusalsClassified reads upgrade answers the way servers
// that predate refusal codes write them: a 401 or 426 is permanent, a 503
// is not; a hostile code (too long, control characters) is dropped.
func TestOldServerRefusalsClassified(t *testing.T) {
	tests := []struct {
		status    int
		body      string
		code      string
		permanent bool
	}{
		{401, `{"error":"invalid token"}`, RefusalToken, true},
		{426, `{"error":"unsupported tunnel protocol"}`, RefusalVersion, true},
		{503, `{"error":"server is shutting down"}`, "", false},
		{503, `not json`, "", false},
		{401, `{"error":"x","code":"` + strings.Repeat("a", 65) + `","permanent":true}`, RefusalToken, true},
		{400, `{"error":"x","code":"bad\u0007code","permanent":true}`, "", true},
	}
	for _, tt := range tests {
		resp := &http.Response{StatusCode: tt.status, Body: io.NopCloser(strings.NewReader(tt.body))}
		var r *RefusedError
		if !errors.As(refusal(resp), &r) || r.Code != tt.code || r.Permanent != tt.permanent {
			t.Errorf("refusal(%d %s) = %+v, want code %q permanent %v", tt.status, tt.body, r, tt.code, tt.permanent)
		}
	}
}

// TestHelloRefusalHostileCode: a refused frame's code is the server's
// word, so a long or unprintable one is dropped and the flag kept.
func TestHelloRefusalHostileCode(t *testing.T) {
	for _, code := range []string{strings.Repeat("x", 65), "tok\x1ben", "token\u202e"} {
		r := helloRefusal(&message{Type: msgRefused, Reason: "no", Code: code, Permanent: true})
		if r.Code != "" || !r.Permanent {
			t.Errorf("helloRefusal(code %q) = %+v, want no code, permanent", code, r)
		}
	}
	if r := helloRefusal(&message{Type: msgRefused, Reason: "no", Code: RefusalHostname, Permanent: true}); r.Code != RefusalHostname {
		t.Errorf("helloRefusal(code %q) = %+v, want the code kept", RefusalHostname, r)
	}
}

// TestHandshakeChecksWithoutServing runs Handshake against a server: it
// gets the welcome's notices and leaves no session attached; with a
// wrong token it returns the refusal.
func TestHandshakeChecksWithoutServing(t *testing.T) {
	reg := newFakeRegistry()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	url, dial, _ := startServer(t, "pipe", srv)
	newClient := func(token string) *Client {
		c, err := NewClient(ClientConfig{URL: url, Token: token, DialContext: dial,
			Announce: testAnnouncement, Forwarder: newHandlerForwarder(t, echoHandler())})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ann := testAnnouncement()
	ann.Draining = true
	if _, err := newClient(testToken).Handshake(context.Background(), ann); err != nil {
		t.Fatalf("Handshake(good token) = %v, want nil", err)
	}
	s := <-reg.attached
	if !s.Announcement().Draining {
		t.Error("Handshake's session was not announced draining")
	}
	<-reg.detached // the session ends with the check
	_, err = newClient("wrong").Handshake(context.Background(), ann)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Code != RefusalToken {
		t.Fatalf("Handshake(wrong token) = %v, want a %q refusal", err, RefusalToken)
	}
}

// stallRegistry holds every Attach until release is closed: a server that
// took the upgrade and the hello and never answers.
type stallRegistry struct {
	fakeRegistry
	release chan struct{}
}

func (r *stallRegistry) Attach(ctx context.Context, s *Session) error {
	<-r.release
	return errors.New("released")
}

// TestHandshakeBoundedByContext: Handshake against a server that never
// answers the hello returns at ctx's deadline, not HandshakeTimeout's.
func TestHandshakeBoundedByContext(t *testing.T) {
	reg := &stallRegistry{fakeRegistry: *newFakeRegistry(), release: make(chan struct{})}
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	url, dial, _ := startServer(t, "pipe", srv)
	t.Cleanup(func() { close(reg.release) }) // before the server's cleanup
	c, err := NewClient(ClientConfig{URL: url, Token: testToken, DialContext: dial,
		Announce: testAnnouncement, Forwarder: newHandlerForwarder(t, echoHandler())})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Handshake(ctx, testAnnouncement())
	if d := time.Since(start); err == nil || d > 2*time.Second {
		t.Fatalf("Handshake(200ms) against a silent server = %v after %v, want an error at about 200ms", err, d)
	}
}
