package limiter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// Signal names, as the adaptive_concurrency.signals setting spells them.
const (
	SignalCPU       = "cpu"
	SignalMemory    = "memory"
	SignalScheduler = "scheduler"
	SignalBackend   = "backend"
)

// Overload thresholds of the built-in signals.
const (
	// CPUOverloaded is the system CPU busy ratio above which a snapshot is
	// overloaded.
	CPUOverloaded = 0.95
	// MemoryOverloaded is the used-memory ratio above which a snapshot is
	// overloaded.
	MemoryOverloaded = 0.90
	// SchedulerLagOverloaded is the timer lag above which a snapshot is
	// overloaded: the Go scheduler could not run a due timer for this long.
	SchedulerLagOverloaded = 50 * time.Millisecond
)

// maxSnapshots bounds one signal's history; older snapshots are dropped
// first. At one per request, a busy backend records thousands a second,
// far more than a window needs to estimate a ratio.
const maxSnapshots = 1024

// Signal is one source of overload snapshots: each snapshot is a time and
// whether it was overloaded, decided when it is recorded. It is safe for
// concurrent use.
type Signal struct {
	name string
	// sample, when set, is polled once per evaluation interval; nil for
	// signals recorded by their owner (backend health).
	sample func(now time.Time) (overloaded bool, err error)

	mu    sync.Mutex // guards the following fields
	snaps []snapshot // ring, oldest at head
	head  int
	n     int
	// failed is set after the first sampling error, so it is reported once.
	failed bool
}

type snapshot struct {
	at         time.Time
	overloaded bool
}

// NewSignal returns a signal polled through sample once per interval. A
// sample error records nothing.
func NewSignal(name string, sample func(now time.Time) (bool, error)) *Signal {
	return &Signal{name: name, sample: sample}
}

// NewBackendSignal returns the backend-health signal: its owner records a
// snapshot per outcome (Config.Backend does it for the Limiter).
func NewBackendSignal() *Signal { return &Signal{name: SignalBackend} }

// Name returns the signal's name.
func (s *Signal) Name() string { return s.name }

// Record adds a snapshot.
func (s *Signal) Record(at time.Time, overloaded bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snaps == nil {
		s.snaps = make([]snapshot, maxSnapshots)
	}
	i := (s.head + s.n) % maxSnapshots
	s.snaps[i] = snapshot{at, overloaded}
	if s.n < maxSnapshots {
		s.n++
	} else {
		s.head = (s.head + 1) % maxSnapshots
	}
}

// poll samples a polled signal once.
func (s *Signal) poll(now time.Time) {
	if s.sample == nil {
		return
	}
	over, err := s.sample(now)
	if err != nil {
		return
	}
	s.Record(now, over)
}

type signalStats struct {
	samples, healthy int
	latestOverloaded bool
}

func (st signalStats) healthyRatio() float64 {
	if st.samples == 0 {
		return 0
	}
	return float64(st.healthy) / float64(st.samples)
}

// stats summarizes the snapshots taken after since.
func (s *Signal) stats(since time.Time) signalStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st signalStats
	for k := s.n - 1; k >= 0; k-- {
		sn := s.snaps[(s.head+k)%maxSnapshots]
		if sn.at.Before(since) {
			break
		}
		if st.samples == 0 {
			st.latestOverloaded = sn.overloaded
		}
		st.samples++
		if !sn.overloaded {
			st.healthy++
		}
	}
	return st
}

// ErrUnsupported is returned by the system signals' constructors where the
// platform does not expose the figure (no /proc).
var ErrUnsupported = errors.New("concurrency: signal not supported on this platform")

// NewCPUSignal returns the system CPU signal: the busy share of all CPUs
// between two polls, from /proc/stat, overloaded above CPUOverloaded.
func NewCPUSignal() (*Signal, error) {
	prev, err := readCPU()
	if err != nil {
		return nil, err
	}
	return NewSignal(SignalCPU, func(time.Time) (bool, error) {
		cur, err := readCPU()
		if err != nil {
			return false, err
		}
		busy, total := cur.busy-prev.busy, cur.total-prev.total
		prev = cur
		if total == 0 {
			return false, errors.New("concurrency: no cpu time elapsed")
		}
		return float64(busy)/float64(total) > CPUOverloaded, nil
	}), nil
}

type cpuTimes struct{ busy, total uint64 }

// readCPU reads the aggregate "cpu" line of /proc/stat.
func readCPU() (cpuTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return parseCPULine(string(line))
}

// parseCPULine parses "cpu user nice system idle iowait irq softirq …":
// idle and iowait are idle, the rest busy.
func parseCPULine(line string) (cpuTimes, error) {
	f := bytes.Fields([]byte(line))
	if len(f) < 5 || string(f[0]) != "cpu" {
		return cpuTimes{}, fmt.Errorf("concurrency: unexpected /proc/stat line %q", line)
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("concurrency: /proc/stat: %w", err)
		}
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	return t, nil
}

// NewMemorySignal returns the used-memory signal: 1 - MemAvailable /
// MemTotal from /proc/meminfo, overloaded above MemoryOverloaded.
func NewMemorySignal() (*Signal, error) {
	if _, err := readMemUsed(); err != nil {
		return nil, err
	}
	return NewSignal(SignalMemory, func(time.Time) (bool, error) {
		used, err := readMemUsed()
		return used > MemoryOverloaded, err
	}), nil
}

func readMemUsed() (float64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	defer f.Close()
	return parseMeminfo(f)
}

// parseMeminfo returns the used ratio from a /proc/meminfo listing.
func parseMeminfo(r interface{ Read([]byte) (int, error) }) (float64, error) {
	var total, avail uint64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		n, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil {
			continue
		}
		switch string(f[0]) {
		case "MemTotal:":
			total = n
		case "MemAvailable:":
			avail = n
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("concurrency: /proc/meminfo: %w", err)
	}
	if total == 0 || avail > total {
		return 0, errors.New("concurrency: /proc/meminfo has no MemTotal or MemAvailable")
	}
	return 1 - float64(avail)/float64(total), nil
}

// NewSchedulerSignal returns the scheduler-lag signal: at each poll it
// compares the time since the previous poll with interval; the excess is
// how late the Go runtime ran the due timer. Overloaded above
// SchedulerLagOverloaded.
func NewSchedulerSignal(interval time.Duration) *Signal {
	var last time.Time
	return NewSignal(SignalScheduler, func(now time.Time) (bool, error) {
		prev := last
		last = now
		if prev.IsZero() {
			return false, errors.New("concurrency: first scheduler poll has no reference")
		}
		return now.Sub(prev)-interval > SchedulerLagOverloaded, nil
	})
}
