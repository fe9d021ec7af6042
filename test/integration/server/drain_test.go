package server_test

import (
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"testing"
)

// TestOperatorDrainsClient: POST /clients/{id}/drain with a slow request
// in flight through the client: the client announces draining (GET
// /clients says so), the request still finishes 200, the agent's Run
// returns nil (the process would exit 0) and the client is gone from GET
// /clients. Asking again for the gone client answers 404.
func TestOperatorDrainsClient(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	st := servertest.StartStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
			w.Write([]byte("slow done"))
		case <-r.Context().Done():
		}
	}), nil)
	cs := servertest.ListClients(t, st.Server)
	if len(cs) != 1 {
		t.Fatalf("GET /clients = %+v, want one client", cs)
	}
	id := cs[0].ID

	type result struct {
		status int
		body   string
		err    error
	}
	answered := make(chan result, 1)
	go func() {
		req := servertest.NewRequest(t, t.Context(), st.Server, "GET", servertest.AppHost, "/slow", nil)
		status, body, err := servertest.Fetch(st.Visitor, req)
		answered <- result{status, body, err}
	}()
	servertest.Wait(t, entered, servertest.WaitFor, "the slow request at the backend")

	drain := func() int {
		req := servertest.NewRequest(t, t.Context(), st.Server, "POST", "admin.localhost", "/aperio/api/clients/"+id+"/drain", nil)
		req.Header.Set("Authorization", "Bearer "+servertest.Token)
		resp, body := servertest.Do(t, servertest.NewVisitor(t, st.Server), req)
		if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotFound {
			t.Fatalf("POST /clients/%s/drain = %d %s, want 204 or 404", id, resp.StatusCode, body)
		}
		return resp.StatusCode
	}
	if got := drain(); got != http.StatusNoContent {
		t.Fatalf("POST /clients/%s/drain = %d, want 204", id, got)
	}
	if got := drain(); got != http.StatusNoContent {
		t.Fatalf("second POST /clients/%s/drain = %d, want 204 (idempotent)", id, got)
	}
	// The ask rides the next heartbeat's ack; the client then announces
	// draining while its request is still held.
	// Polled in process: GET /clients every 20 ms would meet the
	// visitor rate limit.
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		cs := st.Server.Gateway.Clients()
		return len(cs) == 1 && cs[0].Draining, fmt.Sprintf("clients = %+v, want the one draining", cs)
	})
	if cs := servertest.ListClients(t, st.Server); len(cs) != 1 || !cs[0].Draining {
		t.Fatalf("GET /clients during the drain = %+v, want the client draining", cs)
	}
	select {
	case <-st.Agent.Exited():
		t.Fatalf("agent Run returned %v with a request in flight", st.Agent.Err())
	default:
	}
	close(release)
	if r := servertest.Wait(t, answered, servertest.WaitFor, "the slow request's answer"); r.err != nil || r.status != http.StatusOK || r.body != "slow done" {
		t.Fatalf("in-flight request during the drain = %d %q (%v), want 200 slow done", r.status, r.body, r.err)
	}
	if err := st.Agent.WaitExit(t, servertest.WaitFor); err != nil {
		t.Fatalf("agent Run() = %v after the server asked it to drain, want nil", err)
	}
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		cs := st.Server.Gateway.Clients()
		return len(cs) == 0, fmt.Sprintf("clients = %+v after the drain, want none", cs)
	})
	if cs := servertest.ListClients(t, st.Server); len(cs) != 0 {
		t.Fatalf("GET /clients after the drain = %+v, want none", cs)
	}
	if got := drain(); got != http.StatusNotFound {
		t.Errorf("POST /clients/%s/drain after it left = %d, want 404", id, got)
	}
}
