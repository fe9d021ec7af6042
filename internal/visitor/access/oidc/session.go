package oidc

import (
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Cookie names. The secure name carries the __Host- prefix, which a
// browser accepts only with Secure, Path=/ and no Domain: no other host,
// not even a sibling subdomain, can set or shadow it.
const (
	SessionCookie       = "aperio_session"
	SecureSessionCookie = "__Host-aperio_session"
	LoginCookie         = "aperio_login"
	SecureLoginCookie   = "__Host-aperio_login"
)

// Bounds of what a session holds, so that its cookie stays far below the
// 4 KiB browsers keep.
const (
	maxEmailBytes   = 254 // RFC 5321 path limit
	maxSubjectBytes = 255 // OIDC Core: sub is at most 255 ASCII characters
	maxGroupBytes   = 255
	maxGroups       = 16
	csrfBytes       = 16
	sessionVersion  = 1
)

// Session is what a visitor's session cookie proves: who logged in, on
// which hostname, until when. It is a value; the zero Session is no
// session.
type Session struct {
	// Host is the hostname the session was issued on; it is valid there
	// only.
	Host string
	// Subject is the provider's stable id of the user (the ID token's sub).
	Subject string
	// Email is the ID token's email claim, lowercased; empty if none.
	Email string
	// EmailVerified is the ID token's email_verified claim. An unverified
	// email never matches allowed_emails or allowed_domains.
	EmailVerified bool
	// Groups are the user's groups that the service's policy names, at
	// most 16: what a later request needs to check the policy again. The
	// user's other groups are not kept.
	Groups []string
	// Expires is when the session ends, to the second.
	Expires time.Time

	csrf [csrfBytes]byte
}

// User returns the name a backend is told: the email, or the subject
// when the provider gave no email.
func (s Session) User() string {
	if s.Email != "" {
		return s.Email
	}
	return s.Subject
}

// CSRFToken returns the token a logout must carry: random per session,
// sealed inside the cookie, so a page of another origin cannot know it.
func (s Session) CSRFToken() string {
	return base64.RawURLEncoding.EncodeToString(s.csrf[:])
}

// checkCSRF reports whether token is the session's CSRF token, in
// constant time.
func (s Session) checkCSRF(token string) bool {
	want := s.CSRFToken()
	return len(token) == len(want) && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

// check reports a field beyond its bound: encode refuses to write such a
// session and decodeSession to read one, so that what decodes encodes.
func (s *Session) check() error {
	switch {
	case len(s.Host) == 0 || len(s.Host) > 253:
		return fmt.Errorf("oidc: session host of %d bytes", len(s.Host))
	case len(s.Subject) > maxSubjectBytes:
		return fmt.Errorf("oidc: subject of %d bytes, limit %d", len(s.Subject), maxSubjectBytes)
	case len(s.Email) > maxEmailBytes:
		return fmt.Errorf("oidc: email of %d bytes, limit %d", len(s.Email), maxEmailBytes)
	case len(s.Groups) > maxGroups:
		return fmt.Errorf("oidc: %d groups, limit %d", len(s.Groups), maxGroups)
	}
	for _, g := range s.Groups {
		if len(g) > maxGroupBytes {
			return fmt.Errorf("oidc: group of %d bytes, limit %d", len(g), maxGroupBytes)
		}
	}
	return nil
}

// encode returns the session's payload, or an error when a field is
// beyond its bound (the callback refuses such a login rather than cut it).
func (s *Session) encode() ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	w := writer{b: make([]byte, 0, 64+len(s.Host)+len(s.Subject)+len(s.Email))}
	w.byte(sessionVersion)
	w.time(s.Expires)
	w.raw(s.csrf[:])
	var flags byte
	if s.EmailVerified {
		flags |= 1
	}
	w.byte(flags)
	w.str8(s.Host)
	w.str8(s.Subject)
	w.str8(s.Email)
	w.byte(byte(len(s.Groups)))
	for _, g := range s.Groups {
		w.str8(g)
	}
	return w.b, nil
}

// decodeSession parses a session payload, refusing any length, version
// or flag it would not have written.
func decodeSession(p []byte) (Session, error) {
	r := reader{b: p}
	var s Session
	if v := r.byte(); v != sessionVersion {
		return Session{}, fmt.Errorf("%w: session version %d", errPayload, v)
	}
	s.Expires = r.time()
	copy(s.csrf[:], r.take(csrfBytes))
	flags := r.byte()
	if flags&^1 != 0 {
		return Session{}, fmt.Errorf("%w: session flags %#x", errPayload, flags)
	}
	s.EmailVerified = flags&1 != 0
	s.Host = r.str8()
	s.Subject = r.str8()
	s.Email = r.str8()
	n := int(r.byte())
	if n > maxGroups {
		return Session{}, fmt.Errorf("%w: %d groups", errPayload, n)
	}
	if n > 0 {
		s.Groups = make([]string, n)
		for i := range s.Groups {
			s.Groups[i] = r.str8()
		}
	}
	if err := r.done(); err != nil {
		return Session{}, err
	}
	if err := s.check(); err != nil {
		return Session{}, fmt.Errorf("%w: %w", errPayload, err)
	}
	return s, nil
}

// loginState is what the login cookie holds between the redirect to the
// provider and the callback: the secrets the callback checks the
// provider's answer against, and where the visitor goes afterwards.
type loginState struct {
	Host        string
	State       string // random, echoed by the provider
	Nonce       string // random, inside the ID token
	Verifier    string // PKCE code verifier
	RedirectURI string // the redirect_uri sent, sent again at the exchange
	Return      string // a same-host path, already checked
	Expires     time.Time
}

const loginVersion = 1

func (l *loginState) encode() []byte {
	w := writer{b: make([]byte, 0, 160+len(l.RedirectURI)+len(l.Return))}
	w.byte(loginVersion)
	w.time(l.Expires)
	w.str8(l.Host)
	w.str8(l.State)
	w.str8(l.Nonce)
	w.str8(l.Verifier)
	w.str16(l.RedirectURI)
	w.str16(l.Return)
	return w.b
}

func decodeLogin(p []byte) (loginState, error) {
	r := reader{b: p}
	var l loginState
	if v := r.byte(); v != loginVersion {
		return loginState{}, fmt.Errorf("%w: login version %d", errPayload, v)
	}
	l.Expires = r.time()
	l.Host = r.str8()
	l.State = r.str8()
	l.Nonce = r.str8()
	l.Verifier = r.str8()
	l.RedirectURI = r.str16()
	l.Return = r.str16()
	if err := r.done(); err != nil {
		return loginState{}, err
	}
	return l, nil
}

// StripCookies removes the session and login cookies from h's Cookie
// headers, keeping every other cookie as sent, so a backend never sees
// (and cannot leak) a visitor's session. It allocates only when h has a
// Cookie header.
func StripCookies(h http.Header) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			switch name {
			case SessionCookie, SecureSessionCookie, LoginCookie, SecureLoginCookie:
				continue
			}
			if p := strings.TrimSpace(part); p != "" {
				kept = append(kept, p)
			}
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}
