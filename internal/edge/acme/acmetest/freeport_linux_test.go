package acmetest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFreePortOutsideEphemeralRange asserts that FreePort hands out
// ports the kernel never picks for port 0 or an outgoing connection,
// never one twice while held, each usable for TCP and UDP at once.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	b, err := os.ReadFile(ephemeralFile)
	if err != nil {
		t.Fatal(err)
	}
	eph, err := parsePortRange(string(b))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 20 {
		p := FreePort(t)
		if p < firstPort || p > 65535 || (p >= eph.lo && p <= eph.hi) {
			t.Errorf("FreePort() = %d, want %d-65535 outside the ephemeral range %d-%d", p, firstPort, eph.lo, eph.hi)
		}
		if seen[p] {
			t.Errorf("FreePort() = %d again while the first is held", p)
		}
		seen[p] = true
		addr := "127.0.0.1:" + strconv.Itoa(p)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("FreePort() = %d, and TCP on it: %v", p, err)
		}
		defer ln.Close()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("FreePort() = %d, and UDP on it: %v", p, err)
		}
		defer pc.Close()
	}
}

// childDirEnv, set, makes TestFreePortAcrossProcesses the second
// process: it claims a port in that lock directory among the ports in
// childPortsEnv, prints it and holds it until its stdin closes.
const (
	childDirEnv   = "ACMETEST_FREEPORT_CHILD_DIR"
	childPortsEnv = "ACMETEST_FREEPORT_CHILD_PORTS"
)

// TestFreePortAcrossProcesses runs a second test process that holds a
// port, and asserts that this process does not get it until that
// process ends.
func TestFreePortAcrossProcesses(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		var ports []int
		for _, f := range strings.Split(os.Getenv(childPortsEnv), ",") {
			p, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			ports = append(ports, p)
		}
		p, release, err := claim(dir, ports, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		fmt.Printf("port=%d\n", p)
		if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
			t.Fatal(err)
		}
		return
	}
	// Two ports no other test process binds (FreePort holds them), and
	// a lock directory of this test's alone.
	ports := []int{FreePort(t), FreePort(t)}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestFreePortAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childPortsEnv+"="+strconv.Itoa(ports[0])+","+strconv.Itoa(ports[1]))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	var lines []string
	child := 0
	sc := bufio.NewScanner(stdout)
	for child == 0 && sc.Scan() {
		lines = append(lines, sc.Text())
		if v, ok := strings.CutPrefix(sc.Text(), "port="); ok {
			if child, err = strconv.Atoi(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if child != ports[0] {
		t.Fatalf("the child process claimed %d, want %d; its output:\n%s\n%s", child, ports[0], strings.Join(lines, "\n"), stderr.String())
	}

	got, release, err := claim(dir, ports, 0)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if got != ports[1] {
		t.Errorf("claim(%v) = %d while another process holds %d, want %d", ports, got, child, ports[1])
	}
	if f, err := lockPort(dir, child); !errors.Is(err, errLocked) {
		if err == nil {
			f.Close()
		}
		t.Errorf("lockPort(%d) while another process holds it = %v, want errLocked", child, err)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child process: %v\n%s", err, stderr.String())
	}
	f, err := lockPort(dir, child)
	if err != nil {
		t.Fatalf("lockPort(%d) after the other process ended = %v, want the lock", child, err)
	}
	f.Close()
}

// TestClaimSkipsHeldPorts asserts that claim passes over a port some
// program holds with TCP or UDP, and over one another test has locked.
func TestClaimSkipsHeldPorts(t *testing.T) {
	tests := []struct {
		name string
		hold func(t *testing.T, dir string, port int)
		skip bool
	}{
		{name: "free", hold: func(*testing.T, string, int) {}},
		{name: "tcp listener", skip: true, hold: func(t *testing.T, _ string, port int) {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
		}},
		{name: "udp socket", skip: true, hold: func(t *testing.T, _ string, port int) {
			pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pc.Close() })
		}},
		{name: "locked", skip: true, hold: func(t *testing.T, dir string, port int) {
			f, err := lockPort(dir, port)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// FreePort holds both ports in the shared directory, so no
			// other test binds them; claim locks in a directory of its own.
			ports := []int{FreePort(t), FreePort(t)}
			dir := t.TempDir()
			tt.hold(t, dir, ports[0])
			got, release, err := claim(dir, ports, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			want := ports[0]
			if tt.skip {
				want = ports[1]
			}
			if got != want {
				t.Errorf("claim(%v) = %d, want %d", ports, got, want)
			}
		})
	}
}

func TestParsePortFiles(t *testing.T) {
	rangeTests := []struct {
		in   string
		want span
		ok   bool
	}{
		{"32768\t60999\n", span{32768, 60999}, true},
		{"1024 65535", span{1024, 65535}, true},
		{"60999 32768", span{}, false},
		{"32768", span{}, false},
		{"a b", span{}, false},
		{"0 100", span{}, false},
	}
	for _, tt := range rangeTests {
		got, err := parsePortRange(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("parsePortRange(%q) = %v, %v, want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	reservedTests := []struct {
		in   string
		want []span
		ok   bool
	}{
		{"\n", nil, true},
		{"8080\n", []span{{8080, 8080}}, true},
		{"8080,9000-9010\n", []span{{8080, 8080}, {9000, 9010}}, true},
		{"9000-x", nil, false},
	}
	for _, tt := range reservedTests {
		got, err := parseReserved(tt.in)
		if !slices.Equal(got, tt.want) || (err == nil) != tt.ok {
			t.Errorf("parseReserved(%q) = %v, %v, want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestCandidates(t *testing.T) {
	got := candidates([]span{{32768, 60999}, {20000, 20009}, {61000, 61000}})
	if want := (32768 - 20010) + (65535 - 61000); len(got) != want {
		t.Errorf("len(candidates) = %d, want %d", len(got), want)
	}
	for _, p := range []int{20010, 32767, 61001, 65535} {
		if !slices.Contains(got, p) {
			t.Errorf("candidates lacks %d", p)
		}
	}
	for _, p := range []int{19999, 20000, 20009, 32768, 60999, 61000} {
		if slices.Contains(got, p) {
			t.Errorf("candidates has %d", p)
		}
	}
	if !slices.IsSorted(got) {
		t.Error("candidates not in increasing order")
	}
}
