package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	text := "Name:\taperio-server\nVmPeak:\t  900000 kB\nVmRSS:\t   57236 kB\nRssAnon:\t   30948 kB\nRssFile:\t   26288 kB\n"
	m, err := parseStatus(strings.NewReader(text))
	if err != nil || m != (memory{RSS: 57236, Anon: 30948}) {
		t.Fatalf("parseStatus = %+v, %v, want RSS 57236 Anon 30948", m, err)
	}
	if _, err := parseStatus(strings.NewReader("Name:\tx\nVmRSS:\t1 kB\n")); err == nil {
		t.Error("parseStatus without RssAnon: no error, want one")
	}
	if _, err := parseStatus(strings.NewReader("VmRSS:\t1 MB\nRssAnon:\t1 kB\n")); err == nil {
		t.Error("parseStatus of a line in MB: no error, want one")
	}
}

func TestParseStat(t *testing.T) {
	// The name holds a space and a ')'; utime 250 and stime 50 ticks.
	line := "26519 (aperio) server) S 1 26519 26519 0 -1 4194560 5000 0 0 0 250 50 0 0 20 0 9 0 123 900000 14000"
	got, err := parseStat(line)
	if want := 3 * time.Second; err != nil || got != want {
		t.Fatalf("parseStat = %v, %v, want %v", got, err, want)
	}
	for _, bad := range []string{"26519 aperio S 1", "1 (x) S 1 2 3"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q): no error, want one", bad)
		}
	}
}

func TestLastGC(t *testing.T) {
	log := "=== start\n" +
		"gc 1 @0.012s 2%: 0.010+0.5+0.003 ms clock, 0.02+0.1/0.3/0+0.006 ms cpu, 4->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P\n" +
		"time=x level=WARN msg=y\n" +
		"gc 9 @30.1s 1%: 0.05+2.1+0.01 ms clock, 0.1+0.3/1.2/0.5+0.02 ms cpu, 70->72->38 MB, 76 MB goal, 12 MB stacks, 1 MB globals, 2 P\n"
	g, ok := lastGC(log)
	if !ok || g != (gcLine{Live: 38, Stacks: 12}) {
		t.Fatalf("lastGC = %+v, %v, want live 38 stacks 12", g, ok)
	}
	if _, ok := lastGC("no trace\n"); ok {
		t.Error("lastGC of a log without gctrace: ok, want not")
	}
}

func TestConnectedClients(t *testing.T) {
	text := "# HELP aperio_connected_clients Clients with a live tunnel.\n# TYPE aperio_connected_clients gauge\n" +
		"aperio_connected_clients 9998\naperio_connected_clients_total 5\n" +
		"aperio_connected_clients{otel_scope_name=\"aperio\"} 2\n"
	if n, ok := connectedClients(text); !ok || n != 10000 {
		t.Fatalf("connectedClients = %d, %v, want 10000", n, ok)
	}
	if _, ok := connectedClients("aperio_requests_in_flight 3\n"); ok {
		t.Error("connectedClients without the gauge: ok, want not")
	}
}

func TestSourceIP(t *testing.T) {
	for _, c := range []struct {
		i, perIP int
		want     string
	}{
		{0, 250, "127.0.0.2"}, {249, 250, "127.0.0.2"}, {250, 250, "127.0.0.3"},
		{253 * 10, 10, "127.0.0.255"}, {254 * 10, 10, "127.0.1.0"},
	} {
		if got := sourceIP(c.i, c.perIP); !got.Equal(net.ParseIP(c.want)) {
			t.Errorf("sourceIP(%d, %d) = %s, want %s", c.i, c.perIP, got, c.want)
		}
	}
}

func TestParseCounts(t *testing.T) {
	got, err := parseCounts(" 1000 5000,10000 ")
	if err != nil || len(got) != 3 || got[0] != 1000 || got[2] != 10000 {
		t.Fatalf("parseCounts = %v, %v, want [1000 5000 10000]", got, err)
	}
	for _, bad := range []string{"", "10 x", "0"} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("parseCounts(%q): no error, want one", bad)
		}
	}
}

func TestPrintTable(t *testing.T) {
	r := row{
		Clients: 1000, Window: 20 * time.Second,
		Mem0: memory{RSS: 40 * 1024, Anon: 20 * 1024}, MemN: memory{RSS: 104 * 1024, Anon: 84 * 1024},
		GC0: gcLine{Live: 2, Stacks: 1}, GCN: gcLine{Live: 42, Stacks: 17}, GCOK: true,
		Stack0: 1 << 20, StackN: 1<<20 + 25000*1024, StackOK: true,
		CPU0: 100 * time.Millisecond, CPUN: 2 * time.Second, ClientCPU: time.Second,
		Connect: 2100 * time.Millisecond, Restart: 300 * time.Millisecond, Reconnect: 4 * time.Second,
		ConnectGot: 1000, ReconnectGot: 1000,
	}
	short := row{Clients: 5000, Mem0: memory{RSS: 36 * 1024}, Connect: 70 * time.Second, ConnectGot: 2904}
	var b bytes.Buffer
	printTable(&b, options{idle: 20 * time.Second, rate: 500}, []row{r, short})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table has %d lines, want a title, a header and two rows:\n%s", len(lines), b.String())
	}
	if !strings.Contains(lines[3], " >70 (2904) | ") || !strings.Contains(lines[3], " 36.0 | ") || strings.Count(lines[3], " - ") != 10 {
		t.Errorf("row of a connect that fell short = %q, want RSS0, dashes and >70 (2904)", lines[3])
	}
	// 64 MiB over 1000 clients is 65.5 KiB each; 2 s over 20 s and 1000
	// clients is 100 µs per client per second, 10% of a core; 25,000
	// KiB of stacks over 1000 clients is 25.0 KiB each.
	for _, want := range []string{"1000", "40.0", "104.0", "65.5", "41.0", "16.4", "25.0", "100.00", "0.50→10.00", "50.00", "2.1", "0.3", "4.0"} {
		if !strings.Contains(lines[2], " "+want+" ") && !strings.HasSuffix(lines[2], " "+want) && !strings.HasPrefix(lines[2], want+" ") {
			t.Errorf("row %q has no cell %s", lines[2], want)
		}
	}
	for _, row := range lines[2:] {
		if h := lines[1]; len([]rune(h)) != len([]rune(row)) {
			t.Errorf("header and row differ in width:\n%s\n%s", h, row)
		}
	}
}
