package oidc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestDenylist: a revocation ends the session it names, a user's
// sessions issued at or before it (by subject or email), or every
// session of its hostname issued at or before it; never a session of
// another hostname, another user, or issued after it.
func TestDenylist(t *testing.T) {
	at := t0.Add(time.Minute)
	before, after := newSession(t0), newSession(at.Add(time.Millisecond))
	for _, s := range []*Session{&before, &after} {
		s.Host, s.Subject, s.Email, s.Expires = "app.example.com", "sub-jane", "jane@example.com", t0.Add(time.Hour)
	}
	other := before
	other.Host = "other.example.com"
	joe := newSession(t0) // another session, of another user
	joe.Host, joe.Subject, joe.Email, joe.Expires = "app.example.com", "sub-joe", "joe@example.com", t0.Add(time.Hour)
	for _, tc := range []struct {
		name string
		r    Revocation
		want map[string]bool
	}{
		{"one session", Revocation{Host: "app.example.com", SessionID: before.ID(), Subject: "sub-jane"},
			map[string]bool{"before": true, "after": false, "other": false, "joe": false}},
		{"user by subject", Revocation{Host: "app.example.com", Subject: "sub-jane", RevokedAt: at},
			map[string]bool{"before": true, "after": false, "other": false, "joe": false}},
		{"user by email", Revocation{Host: "app.example.com", Email: "jane@example.com", RevokedAt: at},
			map[string]bool{"before": true, "after": false, "other": false, "joe": false}},
		{"hostname", Revocation{Host: "app.example.com", RevokedAt: at},
			map[string]bool{"before": true, "after": false, "other": false, "joe": true}},
		{"malformed session id", Revocation{Host: "app.example.com", SessionID: "not base64!"},
			map[string]bool{"before": false, "after": false, "other": false, "joe": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fill := range []string{"Add", "ReplaceHost", "Replace"} {
				d := new(Denylist)
				switch fill {
				case "Add":
					d.Add(tc.r)
				case "ReplaceHost":
					d.ReplaceHost(tc.r.Host, []Revocation{tc.r})
				case "Replace":
					d.Replace([]Revocation{tc.r})
				}
				for name, s := range map[string]*Session{"before": &before, "after": &after, "other": &other, "joe": &joe} {
					if got := d.Revoked(s); got != tc.want[name] {
						t.Errorf("%s: Revoked(%s) = %v, want %v", fill, name, got, tc.want[name])
					}
				}
			}
		})
	}
	d := new(Denylist)
	d.Add(Revocation{Host: "app.example.com", RevokedAt: at})
	d.ReplaceHost("app.example.com", nil)
	if d.Revoked(&before) || d.Len() != 0 {
		t.Error("ReplaceHost(nil) kept the hostname's revocation")
	}
	var none *Denylist
	if none.Revoked(&before) {
		t.Error("a nil Denylist revoked a session")
	}
	if n := testing.AllocsPerRun(100, func() { d.Revoked(&before) }); n != 0 {
		t.Errorf("Revoked allocates %v times, want 0", n)
	}
}

type failingRevoker struct{ got []Revocation }

func (f *failingRevoker) RevokeSession(_ context.Context, r Revocation) error {
	f.got = append(f.got, r)
	return errors.New("store unavailable")
}

// TestLogoutRevokes: a logout revokes the session (the Revoker is told,
// and this server's Denylist refuses a copy of the cookie at once); when
// the Revoker fails the visitor is told (503), and this server still
// refuses the copy.
func TestLogoutRevokes(t *testing.T) {
	for _, fail := range []bool{false, true} {
		p := testProvider(t, t0)
		p.cfg.Denylist = new(Denylist)
		rec := &failingRevoker{}
		var ok okRevoker
		if fail {
			p.cfg.Revoker = rec
		} else {
			p.cfg.Revoker = &ok
		}
		s := newSession(t0)
		s.Host, s.Subject, s.Email, s.Expires = "app.example.com", "sub", "jane@example.com", t0.Add(time.Hour)
		cookie := &http.Cookie{Name: SessionCookie, Value: sealSession(t, p.sessions, s)}
		v := Visit{Host: "app.example.com"}
		form := url.Values{CSRFField: {s.CSRFToken()}}.Encode()
		r := httptest.NewRequest(http.MethodPost, "http://app.example.com"+LogoutPath, strings.NewReader(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(cookie)
		w := httptest.NewRecorder()
		p.ServeLogout(w, r, v)
		want := http.StatusOK
		if fail {
			want = http.StatusServiceUnavailable
		}
		if w.Code != want {
			t.Errorf("logout with the revoker failing %v = %d, want %d", fail, w.Code, want)
		}
		if _, err := p.Check(requestWith(cookie), v); !errors.Is(err, ErrRevoked) || !errors.Is(err, ErrSessionInvalid) {
			t.Errorf("Check(copied cookie after logout, revoker failing %v) = %v, want ErrRevoked", fail, err)
		}
		got := rec.got
		if !fail {
			got = ok.got
		}
		if len(got) != 1 || got[0].SessionID != s.ID() || got[0].Host != "app.example.com" || got[0].Subject != "sub" || !got[0].ExpiresAt.Equal(s.Expires) {
			t.Errorf("revocations recorded = %+v, want the session %s", got, s.ID())
		}
	}
}

type okRevoker struct{ got []Revocation }

func (o *okRevoker) RevokeSession(_ context.Context, r Revocation) error {
	o.got = append(o.got, r)
	return nil
}

// TestAppEndRevokes: an App's logout revokes its session too.
func TestAppEndRevokes(t *testing.T) {
	now := t0
	a := newTestApp(t, &now)
	a.p.cfg.Denylist = new(Denylist)
	rec := httptest.NewRecorder()
	s, err := a.Issue(rec, Identity{Subject: "s1", Email: "jane@example.com"}, nil, "admin.example.com", true)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "https://admin.example.com/", nil)
	for _, c := range rec.Result().Cookies() {
		req.AddCookie(c)
	}
	if err := a.End(t.Context(), httptest.NewRecorder(), s, true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Session(req, "admin.example.com", true); !errors.Is(err, ErrRevoked) {
		t.Errorf("App.Session(copied cookie after End) = %v, want ErrRevoked", err)
	}
}
