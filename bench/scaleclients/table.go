package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// row is the figures of one client count.
type row struct {
	Clients    int
	Mem0, MemN memory // the server's, with 0 and with Clients connected
	GC0, GCN   gcLine // the last gctrace line before each
	GCOK       bool
	// Stack0 and StackN are go_memstats_stack_inuse_bytes at the same
	// points: the stacks held, where gctrace's are the part in use.
	Stack0, StackN int64
	StackOK        bool
	Window         time.Duration
	CPU0, CPUN     time.Duration // the server's CPU over Window, 0 and Clients connected
	ClientCPU      time.Duration // the client processes' CPU over the same window
	Connect        time.Duration // first client started → the server counts all
	Restart        time.Duration // stop signal → the new server listens
	Reconnect      time.Duration // the new server listens → it counts all
	// ConnectGot and ReconnectGot are the counts at the end of the two
	// waits: Clients, unless the deadline passed first. A row whose
	// connect fell short has no further figures.
	ConnectGot, ReconnectGot int64
}

// waited is d in seconds, or "> d (got)" when the wait ended at its
// deadline with got of want clients.
func waited(d time.Duration, got int64, want int) string {
	if got == int64(want) {
		return fmt.Sprintf("%.1f", d.Seconds())
	}
	return fmt.Sprintf(">%.0f (%d)", d.Seconds(), got)
}

// perClientKiB is (b-a) KiB spread over n clients.
func perClientKiB(a, b int64, n int) float64 { return float64(b-a) / float64(n) }

// usPerClientSec is cpu spread over n clients and window, in µs a second.
func usPerClientSec(cpu, window time.Duration, n int) float64 {
	return float64(cpu.Microseconds()) / float64(n) / window.Seconds()
}

func pctCore(cpu, window time.Duration) float64 { return 100 * cpu.Seconds() / window.Seconds() }

var columns = []string{
	"clients", "RSS0 MiB", "RSS MiB", "RSS/client KiB", "anon/client KiB",
	"heap/client KiB", "stacks/client KiB", "stack held/client KiB", "srv CPU µs/client/s", "srv %core 0→N",
	"cli CPU µs/client/s", "connect s", "restart s", "reconnect all s",
}

// printTable writes rows as one aligned table.
func printTable(w io.Writer, o options, rows []row) {
	cells := [][]string{columns}
	for _, r := range rows {
		if r.ConnectGot != int64(r.Clients) {
			line := []string{fmt.Sprint(r.Clients), fmt.Sprintf("%.1f", float64(r.Mem0.RSS)/1024)}
			for len(line) < len(columns)-3 {
				line = append(line, "-")
			}
			cells = append(cells, append(line, waited(r.Connect, r.ConnectGot, r.Clients), "-", "-"))
			continue
		}
		heap, stacks, held := "-", "-", "-"
		if r.StackOK {
			held = fmt.Sprintf("%.1f", perClientKiB(r.Stack0, r.StackN, r.Clients)/1024)
		}
		if r.GCOK {
			heap = fmt.Sprintf("%.1f", perClientKiB(r.GC0.Live*1024, r.GCN.Live*1024, r.Clients))
			stacks = fmt.Sprintf("%.1f", perClientKiB(r.GC0.Stacks*1024, r.GCN.Stacks*1024, r.Clients))
		}
		cells = append(cells, []string{
			fmt.Sprint(r.Clients),
			fmt.Sprintf("%.1f", float64(r.Mem0.RSS)/1024),
			fmt.Sprintf("%.1f", float64(r.MemN.RSS)/1024),
			fmt.Sprintf("%.1f", perClientKiB(r.Mem0.RSS, r.MemN.RSS, r.Clients)),
			fmt.Sprintf("%.1f", perClientKiB(r.Mem0.Anon, r.MemN.Anon, r.Clients)),
			heap, stacks, held,
			fmt.Sprintf("%.2f", usPerClientSec(r.CPUN, r.Window, r.Clients)),
			fmt.Sprintf("%.2f→%.2f", pctCore(r.CPU0, r.Window), pctCore(r.CPUN, r.Window)),
			fmt.Sprintf("%.2f", usPerClientSec(r.ClientCPU, r.Window, r.Clients)),
			waited(r.Connect, r.ConnectGot, r.Clients),
			fmt.Sprintf("%.1f", r.Restart.Seconds()),
			waited(r.Reconnect, r.ReconnectGot, r.Clients),
		})
	}
	fmt.Fprintf(w, "\n== connected clients on one aperio-server: idle window %s, connect rate %.0f/s, restart by SIG%s\n",
		o.idle, o.rate, strings.ToUpper(unix(o.signal)))
	width := make([]int, len(columns))
	for _, line := range cells {
		for i, c := range line {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, line := range cells {
		for i, c := range line {
			if i > 0 {
				io.WriteString(w, " | ")
			}
			fmt.Fprintf(w, "%*s", width[i], c)
		}
		io.WriteString(w, "\n")
	}
}
