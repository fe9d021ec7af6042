package browser_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// TestDashboardDrainInBrowser: a client that connects after the clients
// page opened (so its row is drawn by clients.js) shows a Drain button;
// clicking it, the confirmation accepted, retires the agent: its Run
// returns nil and the table empties.
func TestDashboardDrainInBrowser(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Config(t), nil, nil)
	b := newBrowser(t, 1280, 800)
	b.login(t, s, servertest.Token)
	b.open(t, s.URL+"/aperio/ui/clients", "#clients-table")
	b.waitText(t, "#live-state", "Live")
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))
	cfg := servertest.AgentConfig(s, servertest.Service(backend.URL))
	cfg.Name = "drain-agent"
	ag := servertest.StartAgent(t, s, cfg)
	b.waitText(t, "#clients-table tbody", "drain-agent")
	b.waitText(t, "#clients-table tbody", "Drain")
	b.eval(t, "window.confirm = () => true")
	b.click(t, `#clients-table button[data-action="drain"]`, ".notice.done")
	b.waitText(t, ".notice.done", "asked to drain")
	if err := ag.WaitExit(t, servertest.WaitFor); err != nil {
		t.Fatalf("agent Run() = %v after a drain from the dashboard, want nil", err)
	}
	b.waitText(t, "#clients-table tbody", "None yet.")
	b.noErrors(t)
}
