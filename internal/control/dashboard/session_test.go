package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// The fake admin APIs of the page tests share a session model, as the
// real API's key sessions work: the cookie "s=<role>" is a session of
// that role with CSRF token "tok-<role>"; no cookie is refused with 401,
// a write without the token with 403. The helpers below are that model
// once, and the page requests the tests send.

// apiError answers status with the admin API's JSON error body.
func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// fakeSession reads r's session: its role, or done (401 answered) without
// one. GET /whoami it answers itself (done), as a session of that role in
// org ("" for none).
func fakeSession(w http.ResponseWriter, r *http.Request, org string) (role string, done bool) {
	c, err := r.Cookie("s")
	if err != nil || c.Value == "" {
		apiError(w, http.StatusUnauthorized, "missing or invalid credentials")
		return "", true
	}
	if r.URL.Path == apitype.Prefix+"/whoami" {
		json.NewEncoder(w).Encode(apitype.WhoAmI{Actor: "key:k1", Role: c.Value, CSRF: "tok-" + c.Value, OrgID: org})
		return c.Value, true
	}
	return c.Value, false
}

// csrfRefused answers 403 and reports true unless r carries role's CSRF
// token.
func csrfRefused(w http.ResponseWriter, r *http.Request, role string) bool {
	if r.Header.Get(apitype.CSRFHeader) == "tok-"+role {
		return false
	}
	apiError(w, http.StatusForbidden, "missing or wrong X-Aperio-CSRF header")
	return true
}

// roleRefused answers 403 with msg and reports true when role is below
// least.
func roleRefused(w http.ResponseWriter, role, least, msg string) bool {
	if roleAtLeast(role, least) {
		return false
	}
	apiError(w, http.StatusForbidden, msg)
	return true
}

// send serves r to h with the session cookie c (nil: none) and the
// header pairs hdr.
func send(t testing.TB, h http.Handler, r *http.Request, c *http.Cookie, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	if c != nil {
		r.AddCookie(c)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// formRequest is a form post of form to path.
func formRequest(path string, form url.Values) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

// roleCookie is the fakes' session cookie for role ("": none).
func roleCookie(role string) *http.Cookie {
	if role == "" {
		return nil
	}
	return &http.Cookie{Name: "s", Value: role}
}

// get GETs path from h as role ("": no session).
func get(t testing.TB, h http.Handler, path, role string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	return send(t, h, httptest.NewRequest(http.MethodGet, path, nil), roleCookie(role), hdr...)
}

// post posts form to path of h as role ("": no session).
func post(t testing.TB, h http.Handler, path, role string, form url.Values, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	return send(t, h, formRequest(path, form), roleCookie(role), hdr...)
}

// readBody reads a fake's request body, answering 400 (done) when it
// cannot.
func readBody(w http.ResponseWriter, r *http.Request) (body string, done bool) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		apiError(w, http.StatusBadRequest, "unreadable body")
		return "", true
	}
	return string(b), false
}
