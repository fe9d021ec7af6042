package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// gone reports whether pid no longer runs: absent, or a zombie waiting
// for whoever inherited it to reap it.
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// TestStopKillsTheGroup: a child that ignores SIGTERM is killed after the
// grace period, and so is the grandchild it started: nothing is left
// behind.
func TestStopKillsTheGroup(t *testing.T) {
	ps := newProcs(t.TempDir())
	p, err := ps.start(spec{name: "stubborn", path: "/bin/sh",
		args:  []string{"-c", `trap "" TERM; sleep 60 & echo "grandchild $!"; wait`},
		watch: regexp.MustCompile(`grandchild (\d+)`)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.stopAll(time.Second) })
	s, err := p.waitFound(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p.stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed after 200ms") {
		t.Errorf("stop = %v, want it to say the process was killed", err)
	}
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("stop took %v, want under grace + 5s", took)
	}
	if !p.exited() {
		t.Error("the child still runs after stop")
	}
	// SIGKILL went to the whole group before stop returned; the kernel
	// ends the grandchild at once, but nothing tells this process when
	// (it was reparented), so /proc is polled with a deadline.
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !gone(grandchild) {
		select {
		case <-deadline.C:
			t.Fatalf("grandchild %d still runs 5s after stop", grandchild)
		case <-tick.C:
		}
	}
}

// TestStopAllEndsEverything: stopAll ends every process still running,
// obliging or not, and forgets them.
func TestStopAllEndsEverything(t *testing.T) {
	ps := newProcs(t.TempDir())
	var all []*proc
	for _, script := range []string{`exec sleep 60`, `trap "" TERM; sleep 60`} {
		p, err := ps.start(spec{name: "sleeper", path: "/bin/sh", args: []string{"-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p)
	}
	ps.stopAll(300 * time.Millisecond)
	for i, p := range all {
		if !p.exited() {
			t.Errorf("process %d still runs after stopAll", i)
		}
	}
	ps.mu.Lock()
	n := len(ps.live)
	ps.mu.Unlock()
	if n != 0 {
		t.Errorf("live processes after stopAll = %d, want 0", n)
	}
}

// TestWaitFoundReportsAnEarlyExit: a process that exits before its ready
// line fails the wait at once, quoting its log.
func TestWaitFoundReportsAnEarlyExit(t *testing.T) {
	ps := newProcs(t.TempDir())
	p, err := ps.start(spec{name: "quitter", path: "/bin/sh", args: []string{"-c", `echo "bad config" >&2; exit 3`},
		watch: regexp.MustCompile(`ready`)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.stopAll(time.Second) })
	_, err = p.waitFound(30 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "bad config") {
		t.Errorf("waitFound = %v, want an early exit quoting the log", err)
	}
}
