package router

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
)

// oidcMethod is the oidc method of one service: the server's provider
// with the service's allow rules, as an access.Method.
type oidcMethod struct {
	p      *oidc.Provider
	policy *oidc.Policy
}

func (m *oidcMethod) Name() string { return "oidc" }

// Credentials are the login and session cookies, under both names: the
// backend never sees them.
func (m *oidcMethod) Credentials() (headers, cookies []string) {
	return nil, []string{oidc.SessionCookie, oidc.SecureSessionCookie, oidc.LoginCookie, oidc.SecureLoginCookie}
}

// Check admits a request whose session the provider opens for this
// hostname and the rules admit. Anything else is answered as the
// provider's Gate answers it (a login redirect for a browser, 401 for
// other clients, 403 for a user the rules refuse), captured so that the
// gate can weigh it against the other methods.
func (m *oidcMethod) Check(r *http.Request, v access.Visitor) access.Result {
	visit := oidc.Visit{Host: v.Host, Secure: v.HTTPS, Policy: m.policy}
	s, err := m.p.Check(r, visit)
	if err == nil {
		return access.Result{Outcome: access.Admit, User: s.User(), Reason: "session"}
	}
	reason := "no session"
	switch {
	case errors.Is(err, oidc.ErrForbidden):
		reason = "the rules do not admit the session's user"
	case errors.Is(err, oidc.ErrSessionInvalid):
		reason = "session refused (expired, tampered or another hostname's)"
	}
	var cw captured
	m.p.Gate(&cw, r, visit)
	return access.Result{Outcome: access.Answer, Status: cw.status, Header: cw.header, Body: cw.body.Bytes(), Reason: reason}
}

// maxCapturedBody bounds what a captured answer keeps of its body: the
// provider's answers are short pages.
const maxCapturedBody = 16 << 10

// captured is a ResponseWriter that keeps an answer to replay later.
type captured struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captured) Header() http.Header {
	if c.header == nil {
		c.header = http.Header{}
	}
	return c.header
}

func (c *captured) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *captured) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if room := maxCapturedBody - c.body.Len(); room > 0 {
		c.body.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// OIDCVisit returns what the login routes under /aperio/auth/ need for
// host: the allow rules of the service that requires oidc there (its
// bind for "/", else an exact bind of host under a path), and false when
// no service of host requires oidc: its login routes then do not exist.
func (rg *Registry) OIDCVisit(host string, secure bool) (oidc.Visit, bool) {
	host = hostname.Normalize(host)
	if p := rg.table.Load().match(host, "/"); p != nil {
		if ge := p.gate.Load(); ge != nil && ge.oidc != nil {
			return oidc.Visit{Host: host, Secure: secure, Policy: ge.oidc}, true
		}
	}
	rg.mu.Lock()
	defer rg.mu.Unlock()
	for k, p := range rg.pools {
		if k.pattern != host {
			continue
		}
		if ge := p.gate.Load(); ge != nil && ge.oidc != nil {
			return oidc.Visit{Host: host, Secure: secure, Policy: ge.oidc}, true
		}
	}
	return oidc.Visit{}, false
}
