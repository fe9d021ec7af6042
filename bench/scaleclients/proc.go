package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// 100 on every Linux architecture.
const clockTick = 10 * time.Millisecond

// memory is a process's resident set from /proc/PID/status, in KiB.
type memory struct {
	RSS, Anon int64 // VmRSS, RssAnon
}

// parseStatus reads VmRSS and RssAnon out of /proc/PID/status text.
func parseStatus(r io.Reader) (memory, error) {
	var m memory
	var rss, anon bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "RssAnon") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return memory{}, fmt.Errorf("status line %q: want N kB", sc.Text())
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("status line %q: %w", sc.Text(), err)
		}
		if key == "VmRSS" {
			m.RSS, rss = n, true
		} else {
			m.Anon, anon = n, true
		}
	}
	if err := sc.Err(); err != nil {
		return memory{}, err
	}
	if !rss || !anon {
		return memory{}, errors.New("status has no VmRSS or RssAnon line")
	}
	return m, nil
}

// parseStat returns utime+stime out of a /proc/PID/stat line. The command
// name (field 2) is in parentheses and may hold spaces and parentheses of
// its own, so fields are counted from the last ')'.
func parseStat(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no ')'", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %q: %d fields after the name, want at least 13", line, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat %q: %w", line, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

func readMemory(pid int) (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	return parseStatus(f)
}

func readCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(strings.TrimSpace(string(b)))
}

// gcLine is one line of GODEBUG=gctrace=1 output: the live heap the cycle
// marked and the goroutine stacks, in MB (MiB, rounded down by the
// runtime).
type gcLine struct {
	Live, Stacks int64
}

var gcTrace = regexp.MustCompile(`^gc \d+ @.* \d+->\d+->(\d+) MB, \d+ MB goal, (\d+) MB stacks`)

// lastGC returns the last gctrace line of a server log; ok is false when
// it has none.
func lastGC(log string) (g gcLine, ok bool) {
	for _, line := range strings.Split(log, "\n") {
		m := gcTrace.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		g.Live, _ = strconv.ParseInt(m[1], 10, 64)
		g.Stacks, _ = strconv.ParseInt(m[2], 10, 64)
		ok = true
	}
	return g, ok
}

// connectedClients sums the aperio_connected_clients samples of a
// Prometheus text exposition; ok is false when it has none.
func connectedClients(text string) (n int64, ok bool) {
	return gauge(text, "aperio_connected_clients")
}

// gauge sums the samples of the metric called name in a Prometheus text
// exposition; ok is false when it has none.
func gauge(text, name string) (n int64, ok bool) {
	for _, line := range strings.Split(text, "\n") {
		rest, found := strings.CutPrefix(line, name)
		if !found || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		n += int64(v)
		ok = true
	}
	return n, ok
}
