package process_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestProcessDrainedByServer: the real binaries; an operator's POST
// /clients/{id}/drain makes the client process log the ask, retire and
// exit 0, and the server lists it no more.
func TestProcessDrainedByServer(t *testing.T) {
	t.Parallel()
	const master = "drain-master-token-0123456789abcdef"
	f := newFleet(t, master)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	// A 3 s down threshold: heartbeats, and so the ack carrying the ask,
	// every second.
	base := f.startServer(t, "APERIO_CLIENT_DOWN_THRESHOLD=3s").url
	cmd, log := f.startClient(t, base, "drained", "  - target: "+backend.URL+"\n    hostname: drain.test\n")
	cs := f.clients(t, base)
	if len(cs) != 1 {
		t.Fatalf("GET /clients = %+v, want one client", cs)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+apitype.Prefix+"/clients/"+cs[0].ID+"/drain", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+master)
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatalf("POST /clients/%s/drain: %v", cs[0].ID, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /clients/%s/drain = %d, want 204", cs[0].ID, resp.StatusCode)
	}
	log.wait(t, regexp.MustCompile(`level=INFO msg="server asked to drain" server_url=`+regexp.QuoteMeta(base)))
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("client exit code after the server's drain = %d, want 0", code)
	}
	waitFor(t, "the server lists no client", func() bool { return len(f.clients(t, base)) == 0 })
}
