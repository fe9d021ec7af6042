package process_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestProcessesBalancing runs the real binaries through the balancing of
// one hostname served by two clients: smooth weighted round-robin with
// weights 9 and 1, sticky sessions (the aperio_affinity cookie, and its
// re-issue when the instance it names is SIGKILLed), and passive outlier
// ejection of a client whose backend answers 503.
func TestProcessesBalancing(t *testing.T) {
	t.Parallel()
	const host = "balance.test"
	f := newFleet(t, "balance-master-token-0123456789abcdef")
	// startClient starts a client named name serving host from target,
	// with service holding more keys of its services: entry (indented
	// for it), and waits for its tunnel.
	startClient := func(t *testing.T, base, name, target, service string) *exec.Cmd {
		c, _ := f.startClient(t, base, name, "  - target: "+target+"\n    hostname: "+host+"\n"+service)
		return c
	}
	plain := f.http

	type answer struct {
		code      int
		body      string
		affinity  string // the aperio_affinity value the answer sets, "" for none
		setCookie []string
		err       error
	}
	// get sends GET / for host through visitor.
	get := func(t *testing.T, visitor *http.Client, base string) answer {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := visitor.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		a := answer{code: resp.StatusCode, body: string(b), setCookie: resp.Header.Values("Set-Cookie"), err: err}
		for _, c := range resp.Cookies() {
			if c.Name == "aperio_affinity" {
				a.affinity = c.Value
			}
		}
		return a
	}
	// clients returns the server's GET /aperio/api/clients by client name.
	clients := func(t *testing.T, base string) map[string]apitype.ClientInfo {
		m := map[string]apitype.ClientInfo{}
		for _, c := range f.clients(t, base) {
			m[c.Name] = c
		}
		return m
	}
	// waitClients waits until the server lists exactly the named clients,
	// healthy, bound to host, with the given weights.
	waitClients := func(t *testing.T, base string, weights map[string]int) {
		t.Helper()
		var got map[string]apitype.ClientInfo
		waitFor(t, fmt.Sprintf("GET /aperio/api/clients lists %v (name: weight), healthy, on %s", weights, host), func() bool {
			got = clients(t, base)
			if len(got) != len(weights) {
				return false
			}
			for name, w := range weights {
				c, ok := got[name]
				if !ok || !c.Healthy || c.Weight != w || len(c.Hostnames) != 1 || c.Hostnames[0] != host {
					return false
				}
			}
			return true
		})
	}

	t.Run("weighted", func(t *testing.T) {
		base := f.startServer(t).url
		startClient(t, base, "heavy", statusBackend(t, "heavy", http.StatusOK), "    weight: 9\n")
		startClient(t, base, "light", statusBackend(t, "light", http.StatusOK), "    weight: 1\n")
		waitClients(t, base, map[string]int{"heavy": 9, "light": 1})

		counts := map[string]int{}
		var light []int // the requests light answered
		for i := range 100 {
			a := get(t, plain, base)
			if a.err != nil || a.code != http.StatusOK {
				t.Fatalf("request %d = %d %q, %v, want 200", i, a.code, a.body, a.err)
			}
			counts[a.body]++
			if a.body == "light" {
				light = append(light, i)
			}
		}
		if counts["heavy"] != 90 || counts["light"] != 10 || len(counts) != 2 {
			t.Errorf("100 requests answered by %v, want heavy 90, light 10", counts)
		}
		// Smooth: the light client gets every tenth request, not a burst.
		for i := 1; i < len(light); i++ {
			if light[i]-light[i-1] != 10 {
				t.Errorf("light answered requests %v, want one in every 10 (10 apart)", light)
				break
			}
		}
	})

	t.Run("sticky", func(t *testing.T) {
		base := f.startServer(t, "APERIO_LB_STRATEGY=sticky").url
		procs := map[string]*exec.Cmd{
			"a": startClient(t, base, "a", statusBackend(t, "a", http.StatusOK), ""),
			"b": startClient(t, base, "b", statusBackend(t, "b", http.StatusOK), ""),
		}
		waitClients(t, base, map[string]int{"a": 1, "b": 1})
		other := map[string]string{"a": "b", "b": "a"}

		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		// The client files cookies under the Host it sends.
		u := &url.URL{Scheme: "http", Host: host, Path: "/"}
		jarCookie := func() string {
			for _, c := range jar.Cookies(u) {
				if c.Name == "aperio_affinity" {
					return c.Value
				}
			}
			return ""
		}
		visitor := &http.Client{Transport: f.http.Transport, Jar: jar, Timeout: time.Minute}

		first := get(t, visitor, base)
		if first.err != nil || first.code != http.StatusOK || (first.body != "a" && first.body != "b") {
			t.Fatalf("first request with a cookie jar = %d %q, %v, want 200 from a or b", first.code, first.body, first.err)
		}
		if want := "aperio_affinity=" + first.affinity + "; Path=/; HttpOnly; SameSite=Lax"; len(first.affinity) != 22 ||
			len(first.setCookie) != 1 || first.setCookie[0] != want {
			t.Fatalf("first answer's Set-Cookie = %q, want [%q] with a 22-character value", first.setCookie, want)
		}
		if got := jarCookie(); got != first.affinity {
			t.Fatalf("jar holds aperio_affinity %q, want %q", got, first.affinity)
		}
		stuck := first.body
		for i := range 10 {
			a := get(t, visitor, base)
			if a.err != nil || a.code != http.StatusOK || a.body != stuck || len(a.setCookie) != 0 {
				t.Fatalf("request %d with the cookie = %d %q, Set-Cookie %q, %v; want 200 %q and no new cookie", i, a.code, a.body, a.setCookie, a.err, stuck)
			}
		}

		// Without cookies: round-robin, each answer setting the cookie of
		// the instance that served it.
		prev := ""
		seen := map[string]int{}
		for i := range 10 {
			a := get(t, plain, base)
			if a.err != nil || a.code != http.StatusOK || a.body == prev || a.affinity == "" {
				t.Fatalf("cookie-less request %d = %d %q, affinity %q, %v; want 200 from the client other than %q, setting a cookie", i, a.code, a.body, a.affinity, a.err, prev)
			}
			if a.body == stuck && a.affinity != first.affinity {
				t.Errorf("cookie-less request %d served by %s set aperio_affinity %q, want %q (its instance's)", i, a.body, a.affinity, first.affinity)
			}
			if a.body != stuck && a.affinity == first.affinity {
				t.Errorf("cookie-less request %d served by %s set aperio_affinity %q, want another than %s's", i, a.body, a.affinity, stuck)
			}
			prev = a.body
			seen[a.body]++
		}
		if seen["a"] != 5 || seen["b"] != 5 {
			t.Errorf("10 cookie-less requests answered by %v, want a 5, b 5", seen)
		}

		// The instance the jar is stuck to dies: the jar's requests go to
		// the other, which re-issues the cookie.
		if err := procs[stuck].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL client %s: %v", stuck, err)
		}
		waitExit(t, procs[stuck])
		survivor := other[stuck]
		var moved answer
		waitFor(t, fmt.Sprintf("the jar's request is answered 200 by %s with a new aperio_affinity", survivor), func() bool {
			moved = get(t, visitor, base)
			if moved.code == http.StatusOK && moved.body != survivor {
				t.Fatalf("request after client %s died = 200 %q, want %q", stuck, moved.body, survivor)
			}
			return moved.err == nil && moved.code == http.StatusOK && moved.affinity != ""
		})
		if moved.affinity == first.affinity || jarCookie() != moved.affinity {
			t.Fatalf("after failover: answer set aperio_affinity %q, jar holds %q; want a new value (not %q) in both", moved.affinity, jarCookie(), first.affinity)
		}
		for i := range 10 {
			a := get(t, visitor, base)
			if a.err != nil || a.code != http.StatusOK || a.body != survivor || len(a.setCookie) != 0 {
				t.Fatalf("request %d with the new cookie = %d %q, Set-Cookie %q, %v; want 200 %q and no new cookie", i, a.code, a.body, a.setCookie, a.err, survivor)
			}
		}
	})

	t.Run("outlier_ejection", func(t *testing.T) {
		const ejection = 2 * time.Second
		srv := f.startServer(t, "APERIO_OUTLIER_CONSECUTIVE_5XX=3", "APERIO_OUTLIER_EJECTION_TIME="+ejection.String())
		base := srv.url
		startClient(t, base, "bad", statusBackend(t, "bad", http.StatusServiceUnavailable), "")
		startClient(t, base, "good", statusBackend(t, "good", http.StatusOK), "")
		waitClients(t, base, map[string]int{"bad": 1, "good": 1})

		// check fails unless a is one of the two backends' own answers.
		check := func(what string, a answer) {
			t.Helper()
			if a.err != nil || !(a.code == http.StatusOK && a.body == "good" || a.code == http.StatusServiceUnavailable && a.body == "bad") {
				t.Fatalf("%s = %d %q, %v; want 200 %q or 503 %q", what, a.code, a.body, a.err, "good", "bad")
			}
		}
		// Round-robin alternates: bad's third 503 comes within 6 requests.
		bad := 0
		var before, after time.Time // around the request of bad's third 503
		for i := 0; bad < 3; i++ {
			if i == 6 {
				t.Fatalf("%d requests, %d answered 503 by bad; want 3 within 6 (round-robin over 2)", i, bad)
			}
			before = time.Now()
			a := get(t, plain, base)
			after = time.Now()
			check(fmt.Sprintf("request %d", i), a)
			if a.code == http.StatusServiceUnavailable {
				bad++
			}
		}
		for i := range 10 {
			a := get(t, plain, base)
			if a.err != nil || a.code != http.StatusOK || a.body != "good" {
				t.Fatalf("request %d after bad's third 503 (%v since) = %d %q, %v; want 200 %q", i, time.Since(after), a.code, a.body, a.err, "good")
			}
		}
		cs := clients(t, base)
		until := cs["bad"].EjectedUntil
		if until == nil || until.Before(before.Add(ejection)) || until.After(after.Add(ejection)) {
			t.Fatalf("bad's ejected_until = %v, want between %v and %v (its third 503 + %v)", until, before.Add(ejection), after.Add(ejection), ejection)
		}
		if cs["good"].EjectedUntil != nil {
			t.Errorf("good's ejected_until = %v, want null", cs["good"].EjectedUntil)
		}
		srv.log.wait(t, regexp.MustCompile(`msg="client ejected"`))

		// Back in rotation once the ejection is over.
		var back time.Time
		waitFor(t, "bad answers a 503 again after its ejection", func() bool {
			a := get(t, plain, base)
			back = time.Now()
			check("request after the ejection", a)
			return a.code == http.StatusServiceUnavailable
		})
		if back.Before(*until) {
			t.Errorf("bad answered again at %v, want not before its ejected_until %v", back, *until)
		}
	})
}
