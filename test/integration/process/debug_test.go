package process_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// debugListening is the line either binary logs once its debug listener
// is open; its group is the address.
var debugListening = regexp.MustCompile(`msg="debug listening" addr=(\S+)`)

// TestDebugListenProcesses runs both binaries with debug_listen on a
// loopback port of their own: each serves its command line, a heap
// profile and the runtime's metrics there, and the server's public port
// serves none of it.
func TestDebugListenProcesses(t *testing.T) {
	f := newFleet(t, "master-debug-0123456789abcdef")
	srv := f.startServer(t, "APERIO_DEBUG_LISTEN=127.0.0.1:0")
	serverDebug := srv.log.wait(t, debugListening)
	_, clog := f.startClient(t, srv.url, "dbg", "  - target: "+statusBackend(t, "app", http.StatusOK)+"\n    hostname: debug.test\ndebug_listen: 127.0.0.1:0\n")
	clientDebug := clog.wait(t, debugListening)

	for _, side := range []struct{ binary, addr string }{{"aperio-server", serverDebug}, {"aperio-client", clientDebug}} {
		get := func(path string) (int, string) {
			resp, err := f.http.Get("http://" + side.addr + path)
			if err != nil {
				t.Fatalf("%s: GET %s: %v", side.binary, path, err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode, string(b)
		}
		if code, body := get("/debug/pprof/cmdline"); code != http.StatusOK || !strings.Contains(body, side.binary) {
			t.Errorf("%s: GET /debug/pprof/cmdline = %d %q, want 200 naming the binary", side.binary, code, body)
		}
		if code, body := get("/debug/pprof/heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
			t.Errorf("%s: GET /debug/pprof/heap?debug=1 = %d %.80q, want a heap profile", side.binary, code, body)
		}
		code, body := get("/debug/metrics")
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); code != http.StatusOK || err != nil || m["/gc/heap/allocs:objects"] == nil {
			t.Errorf("%s: GET /debug/metrics = %d (%v), want 200 with /gc/heap/allocs:objects", side.binary, code, err)
		}
	}
	for _, host := range []string{"127.0.0.1", "debug.test"} {
		code, body := getHost(t, f.http, srv.url, host, "/debug/pprof/cmdline")
		if strings.Contains(body, "aperio-server") || (host == "debug.test" && body != "app") {
			t.Errorf("GET /debug/pprof/cmdline on the public port, Host %s = %d %q, want nothing of the debug listener", host, code, body)
		}
	}
}
