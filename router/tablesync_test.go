package router

import (
	"fmt"
	"sync"
	"testing"
)

// TestConcurrentUpdatesRoutable connects many clients at once, as a
// server restart does: each one's hostname is routable when its update
// returns, though concurrent updates share table builds.
func TestConcurrentUpdatesRoutable(t *testing.T) {
	rt := newRouter(t, Config{})
	const clients = 300
	var wg sync.WaitGroup
	errs := make(chan string, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host := fmt.Sprintf("c%d.scale.test", i)
			rt.reg.update(newConn(fmt.Sprint("c", i), i), limited(1, host))
			if rt.reg.table.Load().match(host, "/") == nil {
				errs <- host
			}
		}()
	}
	wg.Wait()
	close(errs)
	for host := range errs {
		t.Errorf("%s not routable when its update returned", host)
	}
	rt.reg.mu.Lock()
	want, built := rt.reg.tableWant, rt.reg.tableBuilt
	rt.reg.mu.Unlock()
	if built != want {
		t.Errorf("the table holds change %d of %d", built, want)
	}
	for i := range clients {
		if rt.reg.table.Load().match(fmt.Sprintf("c%d.scale.test", i), "/") == nil {
			t.Fatalf("c%d.scale.test missing from the final table", i)
		}
	}
	// Detaching them all leaves a table that is up to date too.
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt.reg.detach(rt.reg.connByID(t, fmt.Sprint("c", i)))
		}()
	}
	wg.Wait()
	rt.reg.mu.Lock()
	defer rt.reg.mu.Unlock()
	if rt.reg.tableBuilt != rt.reg.tableWant || len(rt.reg.clients) != 0 {
		t.Errorf("after detaching all: table at change %d of %d, %d clients left", rt.reg.tableBuilt, rt.reg.tableWant, len(rt.reg.clients))
	}
}

// connByID returns the attached conn with id.
func (rg *Registry) connByID(t *testing.T, id string) Conn {
	t.Helper()
	rg.mu.Lock()
	defer rg.mu.Unlock()
	for c := range rg.clients {
		if c.ID() == id {
			return c
		}
	}
	t.Fatalf("no client %s", id)
	return nil
}
