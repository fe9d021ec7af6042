package process_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestProcessesBinding runs the real binaries through the binding rules:
// a token client with no hostname auto-binds the token's exact hostname;
// a hostname it may not bind is dropped with a notice the client logs and
// a client_bind_refused audit entry, while its other bind serves; a
// master-token client with no hostname is a catch-all for what nobody
// else binds; and `api clients disable|enable` drains and restores one
// client without dropping its tunnel.
func TestProcessesBinding(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	backend := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name)
		}))
		t.Cleanup(s.Close)
		return strings.TrimPrefix(s.URL, "http://")
	}
	const master = "binding-master-token-0123456789abcdef"
	base := startServer(t, bin, "APERIO_SERVER_TOKEN="+master, "APERIO_GATEWAY_TIMEOUT=200ms", "APERIO_REQUIRE_HOSTNAME_BIND=false").url

	api := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "aperio-client"), append([]string{"api"}, append(args, "--server-url", base, "--api-key", master)...)...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "HOME="+cmd.Dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("aperio-client api %v: %v\n%s", args, err, out)
		}
		return out
	}
	var tok apitype.MintedToken
	if err := json.Unmarshal(api("tokens", "create", "--name", "auto", "--hostname", "auto.test", "--json"), &tok); err != nil {
		t.Fatalf("tokens create --json: %v", err)
	}
	startClient := func(token string, args ...string) *processLog {
		c := exec.Command(filepath.Join(bin, "aperio-client"), append(args, "--server-url", base, "--server-token", token)...)
		c.Dir = t.TempDir()
		c.Env = append(os.Environ(), "HOME="+c.Dir)
		l := startLogged(t, c)
		l.wait(t, regexp.MustCompile(`msg="tunnel connected"`))
		return l
	}
	get := func(host string) (int, string) {
		return getHost(t, http.DefaultClient, base, host, "/")
	}
	serves := func(host, want string) func() bool {
		return func() bool { code, body := get(host); return code == 200 && body == want }
	}

	// Auto-bind: no --hostname, the token's exact hostname.
	startClient(tok.Secret, backend("auto"))
	waitFor(t, "auto.test answers from the auto-bound client", serves("auto.test", "auto"))

	// Per-bind refusal: the token lists auto.test only, so evil.test is
	// dropped and the client keeps auto.test.
	refusing := startClient(tok.Secret, backend("refusing"), "--hostname", "auto.test,evil.test")
	refusing.wait(t, regexp.MustCompile(`msg="server notice".*evil\.test`))
	var audit []apitype.AuditEntry
	waitFor(t, "a client_bind_refused audit entry naming evil.test", func() bool {
		if err := json.Unmarshal(api("audit", "--json"), &audit); err != nil {
			t.Fatalf("audit --json: %v", err)
		}
		for _, e := range audit {
			if e.Event == "client_bind_refused" && strings.Contains(e.Detail, "evil.test") {
				return true
			}
		}
		return false
	})
	var clients []apitype.ClientInfo
	if err := json.Unmarshal(api("clients", "--json"), &clients); err != nil {
		t.Fatalf("clients --json: %v", err)
	}
	refusedID := ""
	for _, c := range clients {
		if len(c.RefusedBinds) == 1 && c.RefusedBinds[0] == "evil.test" {
			refusedID = c.ID
		}
	}
	if refusedID == "" {
		t.Fatalf("clients = %+v, want one with refused_binds [evil.test]", clients)
	}

	// Catch-all: the master token, no hostname, serves unbound names only.
	startClient(master, backend("catch"))
	waitFor(t, "an unbound hostname answers from the catch-all", serves("anything.test", "catch"))
	if code, body := get("auto.test"); code != 200 || body == "catch" {
		t.Errorf("auto.test = %d %q, want 200 from a client binding it, not the catch-all", code, body)
	}

	// Kill switch: disable the auto-bound client, then the refusing one:
	// auto.test stops answering (504: clients connected, none routable),
	// and both tunnels stay up; enable one and it serves again.
	// clients was listed before the catch-all came: the one with no
	// hostname is the auto-bound client.
	for _, c := range clients {
		if c.ID != refusedID && len(c.Hostnames) == 0 {
			api("clients", "disable", c.ID)
		}
	}
	api("clients", "disable", refusedID)
	waitFor(t, "auto.test answers 504 with both clients disabled", func() bool { code, _ := get("auto.test"); return code == 504 })
	if err := json.Unmarshal(api("clients", "--json"), &clients); err != nil {
		t.Fatalf("clients --json: %v", err)
	}
	disabled := 0
	for _, c := range clients {
		if c.Disabled {
			disabled++
		}
	}
	if disabled != 2 || len(clients) != 3 {
		t.Errorf("clients after disable = %+v, want 3 connected, 2 disabled", clients)
	}
	api("clients", "enable", refusedID)
	waitFor(t, "auto.test answers from the enabled client", serves("auto.test", "refusing"))
}
