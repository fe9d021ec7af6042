package server_test

import (
	"context"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aperio-dev/aperio/internal/server"
)

// TestReloadIsAtomicPerRequest: a reload swaps settings checked at the
// edge (denied_ips) and in the router (a response header) for every
// request at once. Configuration A lets the visitor in and answers
// X-Config: a; B denies the visitor (403) and would answer X-Config: b.
// While reloads alternate A and B, a 200 with X-Config: b would be a
// request that saw A's edge and B's router: there must be none. (With
// admit's pin removed, about one run in three of 400 reloads showed such
// answers; 2000 reloads make a miss unlikely.)
func TestReloadIsAtomicPerRequest(t *testing.T) {
	t.Parallel()
	var a server.Config
	st := servertest.StartStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), func(c *server.Config) {
		withHeader(c, "a")
		a = *c
	})
	b := a
	withHeader(&b, "b")
	b.DeniedIPs = []string{"127.0.0.1/32"}

	var stop atomic.Bool
	var okA, denied, torn atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				resp, err := st.Visitor.Do(servertest.NewRequest(t, context.Background(), st.Server, "GET", servertest.AppHost, "/", nil))
				if err != nil {
					continue // a connection the reload's edge closed: not a torn answer
				}
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusForbidden:
					denied.Add(1)
				case resp.StatusCode == http.StatusOK && resp.Header.Get("X-Config") == "a":
					okA.Add(1)
				case resp.StatusCode == http.StatusOK:
					torn.Add(1)
				}
			}
		})
	}
	for i := range 2000 {
		next := a
		if i%2 == 0 {
			next = b
		}
		if _, _, err := st.Server.Gateway.Reload(next); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("Reload %d: %v", i, err)
		}
	}
	if _, _, err := st.Server.Gateway.Reload(a); err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("answers while reloading: %d under A, %d denied under B, %d torn", okA.Load(), denied.Load(), torn.Load())
	if torn.Load() != 0 {
		t.Errorf("%d requests saw A's edge with B's router (200 with X-Config: b)", torn.Load())
	}
	if okA.Load() == 0 || denied.Load() == 0 {
		t.Errorf("the requests did not see both configurations (%d under A, %d under B): the test proves nothing", okA.Load(), denied.Load())
	}
}
