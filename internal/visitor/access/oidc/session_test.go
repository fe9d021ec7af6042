package oidc

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testProvider returns a Provider that can check sessions but has no
// provider behind it (no discovery), on a clock fixed at now.
func testProvider(t testing.TB, now time.Time, keys ...Key) *Provider {
	t.Helper()
	if len(keys) == 0 {
		keys = []Key{testKey(1, "a")}
	}
	cfg := Config{Keys: keys, Now: func() time.Time { return now }}.withDefaults()
	return &Provider{cfg: cfg, sessions: mustSealer(t, "session", keys...), login: loginFlow{sealer: mustSealer(t, "login", keys...), cookie: LoginCookie, secureCookie: SecureLoginCookie}}
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func janeSession() Session {
	s := Session{
		Host:          "app.example.com",
		Subject:       "1234567890",
		Email:         "jane.doe@example.com",
		EmailVerified: true,
		Groups:        []string{"design"},
		Expires:       t0.Add(time.Hour),
	}
	copy(s.csrf[:], "0123456789abcdef")
	return s
}

// sealSession returns s sealed by sl as a cookie value.
func sealSession(t testing.TB, sl *Sealer, s Session) string {
	t.Helper()
	p, err := s.encode()
	if err != nil {
		t.Fatal(err)
	}
	return sl.Seal(p)
}

func requestWith(cookies ...*http.Cookie) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://app.example.com/", nil)
	for _, c := range cookies {
		r.AddCookie(c)
	}
	return r
}

func TestSessionEncodeRoundTrip(t *testing.T) {
	for _, s := range []Session{janeSession(), {Host: "h", Expires: time.Unix(0, 0)}} {
		p, err := s.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeSession(p)
		if err != nil {
			t.Fatalf("decodeSession(encode(%v)): %v", s, err)
		}
		if diff := cmp.Diff(s, got, cmp.AllowUnexported(Session{})); diff != "" {
			t.Errorf("decodeSession(encode(s)) differs (-want +got):\n%s", diff)
		}
	}
}

func TestSessionEncodeBounds(t *testing.T) {
	long := strings.Repeat("x", 256)
	for _, tc := range []struct {
		name string
		edit func(*Session)
	}{
		{"no host", func(s *Session) { s.Host = "" }},
		{"long host", func(s *Session) { s.Host = strings.Repeat("a", 254) }},
		{"long subject", func(s *Session) { s.Subject = long }},
		{"long email", func(s *Session) { s.Email = long }},
		{"long group", func(s *Session) { s.Groups = []string{long} }},
		{"many groups", func(s *Session) { s.Groups = make([]string, maxGroups+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := janeSession()
			tc.edit(&s)
			if p, err := s.encode(); err == nil {
				t.Errorf("encode = %d bytes, nil; want an error", len(p))
			}
		})
	}
}

func TestDecodeSessionRefusesMalformed(t *testing.T) {
	s := janeSession()
	good, err := s.encode()
	if err != nil {
		t.Fatal(err)
	}
	set := func(i int, b byte) []byte { p := slices.Clone(good); p[i] = b; return p }
	flagsAt := 1 + 8 + csrfBytes
	for _, tc := range []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"version 0", set(0, 0)},
		{"version 2", set(0, 2)},
		{"unknown flag", set(flagsAt, 2)},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", append(slices.Clone(good), 0)},
		{"host length past the end", set(flagsAt+1, 255)},
		{"group count too high", set(len(good)-len("design")-2, maxGroups+1)},
		{"only the header", good[:flagsAt]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := decodeSession(tc.p); !errors.Is(err, errPayload) {
				t.Errorf("decodeSession = %+v, %v; want errPayload", got, err)
			}
		})
	}
}

func TestCheckRefusesHostileCookies(t *testing.T) {
	p := testProvider(t, t0)
	good := janeSession()
	seal := func(edit func(*Session)) string {
		s := good
		edit(&s)
		return sealSession(t, p.sessions, s)
	}
	other := testProvider(t, t0, testKey(2, "z"))
	sameIDOtherSecret := testProvider(t, t0, testKey(1, "z"))
	goodValue := sealSession(t, p.sessions, good)
	for _, tc := range []struct {
		name   string
		cookie *http.Cookie // nil: none
		want   error
	}{
		{"no cookie", nil, ErrNoSession},
		{"other cookie name", &http.Cookie{Name: "session", Value: goodValue}, ErrNoSession},
		{"empty", &http.Cookie{Name: SessionCookie, Value: ""}, ErrSessionInvalid},
		{"garbage", &http.Cookie{Name: SessionCookie, Value: "not-a-seal"}, ErrSessionInvalid},
		{"tampered", &http.Cookie{Name: SessionCookie, Value: flipLastByte(t, goodValue)}, ErrSessionInvalid},
		{"truncated", &http.Cookie{Name: SessionCookie, Value: goodValue[:len(goodValue)/2]}, ErrSessionInvalid},
		{"expired", &http.Cookie{Name: SessionCookie, Value: seal(func(s *Session) { s.Expires = t0 })}, ErrSessionInvalid},
		{"other host", &http.Cookie{Name: SessionCookie, Value: seal(func(s *Session) { s.Host = "evil.example.com" })}, ErrSessionInvalid},
		{"parent host", &http.Cookie{Name: SessionCookie, Value: seal(func(s *Session) { s.Host = "example.com" })}, ErrSessionInvalid},
		{"unknown key", &http.Cookie{Name: SessionCookie, Value: sealSession(t, other.sessions, good)}, ErrSessionInvalid},
		{"same key id, other secret", &http.Cookie{Name: SessionCookie, Value: sealSession(t, sameIDOtherSecret.sessions, good)}, ErrSessionInvalid},
		{"login cookie as session", &http.Cookie{Name: SessionCookie, Value: p.login.sealer.Seal(func() []byte { b, _ := good.encode(); return b }())}, ErrSessionInvalid},
		{"oversized", &http.Cookie{Name: SessionCookie, Value: strings.Repeat("A", 5000)}, ErrSessionInvalid},
		{"valid, policy refuses", &http.Cookie{Name: SessionCookie, Value: seal(func(s *Session) { s.Email = "mallory@example.net"; s.Groups = nil })}, ErrForbidden},
		{"valid, unverified email", &http.Cookie{Name: SessionCookie, Value: seal(func(s *Session) { s.EmailVerified = false; s.Groups = nil })}, ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *http.Request
			if tc.cookie != nil {
				r = requestWith(tc.cookie)
			} else {
				r = requestWith()
			}
			v := Visit{Host: "app.example.com", Policy: &Policy{AllowedEmails: []string{"jane.doe@example.com"}}}
			s, err := p.Check(r, v)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Check = %v, want %v", err, tc.want)
			}
			if tc.want != ErrForbidden && s.Host != "" {
				t.Errorf("Check returned a session %+v with error %v", s, err)
			}
		})
	}
	s, err := p.Check(requestWith(&http.Cookie{Name: SessionCookie, Value: goodValue}), Visit{Host: "app.example.com"})
	if err != nil || s.Email != good.Email || s.CSRFToken() != good.CSRFToken() {
		t.Errorf("Check(valid) = %+v, %v; want jane's session", s, err)
	}
	// A cookie tossed by a sibling host for the parent domain, sent
	// first, does not shadow the real one; past maxCandidates nothing is
	// tried.
	tossed := &http.Cookie{Name: SessionCookie, Value: sealSession(t, p.sessions, func() Session { s := good; s.Host = "evil.example.com"; return s }())}
	real := &http.Cookie{Name: SessionCookie, Value: goodValue}
	if s, err := p.Check(requestWith(tossed, real), Visit{Host: "app.example.com"}); err != nil || s.Email != good.Email {
		t.Errorf("Check(tossed cookie, then the real one) = %+v, %v; want jane's session", s, err)
	}
	if _, err := p.Check(requestWith(tossed, tossed, tossed, tossed, real), Visit{Host: "app.example.com"}); !errors.Is(err, ErrSessionInvalid) {
		t.Errorf("Check(real cookie fifth) = %v, want ErrSessionInvalid (at most %d tried)", err, maxCandidates)
	}
	// Secure visits read only the __Host- name, which a sibling host
	// cannot set.
	if _, err := p.Check(requestWith(&http.Cookie{Name: SessionCookie, Value: goodValue}), Visit{Host: "app.example.com", Secure: true}); !errors.Is(err, ErrNoSession) {
		t.Errorf("Check(secure visit, plain cookie name) = %v, want ErrNoSession", err)
	}
}

func TestCSRFToken(t *testing.T) {
	s := janeSession()
	if !s.checkCSRF(s.CSRFToken()) {
		t.Fatal("a session refuses its own CSRF token")
	}
	other := janeSession()
	copy(other.csrf[:], "fedcba9876543210")
	for _, tok := range []string{"", other.CSRFToken(), s.CSRFToken()[1:], s.CSRFToken() + "A"} {
		if s.checkCSRF(tok) {
			t.Errorf("checkCSRF(%q) = true, want false", tok)
		}
	}
}

func TestStripCookies(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{"none", nil, nil},
		{"only ours", []string{"aperio_session=x; __Host-aperio_session=y"}, nil},
		{"mixed", []string{"a=1; aperio_session=x; b=2", "aperio_login=z; c=3"}, []string{"a=1; b=2; c=3"}},
		{"lookalike kept", []string{"aperio_session_x=1; xaperio_session=2"}, []string{"aperio_session_x=1; xaperio_session=2"}},
		{"login secure", []string{"__Host-aperio_login=1;d=4"}, []string{"d=4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.in {
				h.Add("Cookie", v)
			}
			StripCookies(h)
			if got := h.Values("Cookie"); !slices.Equal(got, tc.want) {
				t.Errorf("StripCookies(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzDecodeSession(f *testing.F) {
	s := janeSession()
	good, err := s.encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, p []byte) {
		s, err := decodeSession(p)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to the same bytes: nothing was
		// read that encode would not have written.
		again, err := s.encode()
		if err != nil || string(again) != string(p) {
			t.Fatalf("encode(decodeSession(%x)) = %x, %v", p, again, err)
		}
	})
}

// BenchmarkSessionCheck is the per-request cost of a valid session: read
// the cookie, open the seal, decode, check host, expiry and policy.
func BenchmarkSessionCheck(b *testing.B) {
	p := testProvider(b, t0)
	value := sealSession(b, p.sessions, janeSession())
	r := requestWith(&http.Cookie{Name: "_ga", Value: "GA1.2.123456789.1234567890"}, &http.Cookie{Name: SessionCookie, Value: value}, &http.Cookie{Name: "theme", Value: "dark"})
	v := Visit{Host: "app.example.com", Policy: &Policy{AllowedDomains: []string{"example.org", "example.com"}, Groups: []string{"ops", "design"}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Check(r, v); err != nil {
			b.Fatal(err)
		}
	}
}

func TestLogoutWithHeaderToken(t *testing.T) {
	p := testProvider(t, t0)
	s := janeSession()
	cookie := &http.Cookie{Name: SessionCookie, Value: sealSession(t, p.sessions, s)}
	v := Visit{Host: "app.example.com"}
	for _, tc := range []struct {
		name  string
		token string
		want  int
	}{
		{"wrong token", "AAAAAAAAAAAAAAAAAAAAAA", http.StatusForbidden},
		{"session token", s.CSRFToken(), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "http://app.example.com"+LogoutPath, nil)
			r.AddCookie(cookie)
			r.Header.Set(CSRFHeader, tc.token)
			w := httptest.NewRecorder()
			p.ServeLogout(w, r, v)
			if w.Code != tc.want {
				t.Fatalf("POST logout with %s %q = %d, want %d", CSRFHeader, tc.token, w.Code, tc.want)
			}
			cleared := false
			for _, c := range w.Result().Cookies() {
				cleared = cleared || (c.Name == SessionCookie && c.MaxAge < 0)
			}
			if cleared != (tc.want == http.StatusOK) {
				t.Errorf("session cookie cleared = %v after %d", cleared, w.Code)
			}
		})
	}
}

func TestLogoutRefusesOversizedForm(t *testing.T) {
	p := testProvider(t, t0)
	s := janeSession()
	body := "csrf=" + s.CSRFToken() + "&pad=" + strings.Repeat("x", maxLogoutBody)
	r := httptest.NewRequest(http.MethodPost, "http://app.example.com"+LogoutPath, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.AddCookie(&http.Cookie{Name: SessionCookie, Value: sealSession(t, p.sessions, s)})
	w := httptest.NewRecorder()
	p.ServeLogout(w, r, Visit{Host: "app.example.com"})
	if w.Code != http.StatusBadRequest {
		t.Errorf("POST logout with a %d-byte form = %d, want 400", len(body), w.Code)
	}
}

// flipLastByte returns the seal value with one bit of its last decoded
// byte (the tag) flipped: a tampered value that always differs from the
// good one in its bytes, not only in its text.
func flipLastByte(t *testing.T, value string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 0x01
	return base64.RawURLEncoding.EncodeToString(raw)
}
