package acmetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	// ephemeralFile holds the range of ports the kernel picks for port 0
	// and outgoing connections: two numbers, the first and the last.
	ephemeralFile = "/proc/sys/net/ipv4/ip_local_port_range"
	// reservedFile lists ports the kernel never picks on its own, kept
	// for services: ports and ranges, comma-separated.
	reservedFile = "/proc/sys/net/ipv4/ip_local_reserved_ports"
	// firstPort is the lowest port FreePort hands out.
	firstPort = 20000
)

// errLocked says another test holds the port.
var errLocked = errors.New("acmetest: port reserved by another test")

// span is the ports from lo to hi, both included.
type span struct{ lo, hi int }

// reservePort reserves a port outside the ephemeral range in the user's
// lock directory and returns it with the func that releases it.
func reservePort() (int, func(), error) {
	b, err := os.ReadFile(ephemeralFile)
	if err != nil {
		return 0, nil, errNoRange
	}
	eph, err := parsePortRange(string(b))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s: %v", errNoRange, ephemeralFile, err)
	}
	skip := []span{eph}
	// Without the list of reserved ports only the trial bind keeps
	// FreePort off the services' ports.
	if b, err := os.ReadFile(reservedFile); err == nil {
		if r, err := parseReserved(string(b)); err == nil {
			skip = append(skip, r...)
		}
	}
	ports := candidates(skip)
	if len(ports) == 0 {
		return 0, nil, fmt.Errorf("%w: the range %d-%d leaves no port from %d up", errNoRange, eph.lo, eph.hi, firstPort)
	}
	dir := filepath.Join(os.TempDir(), "aperio-test-ports-"+strconv.Itoa(os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, fmt.Errorf("acmetest: port lock directory: %w", err)
	}
	return claim(dir, ports, rand.IntN(len(ports)))
}

// parsePortRange parses the content of ephemeralFile.
func parsePortRange(s string) (span, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return span{}, fmt.Errorf("%q: want two ports", s)
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err := errors.Join(err1, err2); err != nil {
		return span{}, err
	}
	if lo < 1 || lo > hi || hi > 65535 {
		return span{}, fmt.Errorf("%q: want 1 <= first <= last <= 65535", s)
	}
	return span{lo, hi}, nil
}

// parseReserved parses the content of reservedFile, such as
// "8080,9000-9010"; an empty file is no port.
func parseReserved(s string) ([]span, error) {
	var out []span
	for _, f := range strings.Split(strings.TrimSpace(s), ",") {
		if f == "" {
			continue
		}
		a, b, ok := strings.Cut(f, "-")
		if !ok {
			b = a
		}
		lo, err1 := strconv.Atoi(a)
		hi, err2 := strconv.Atoi(b)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		out = append(out, span{lo, hi})
	}
	return out, nil
}

// candidates returns the ports from firstPort to 65535 in none of skip,
// in increasing order.
func candidates(skip []span) []int {
	var out []int
next:
	for p := firstPort; p <= 65535; p++ {
		for _, s := range skip {
			if p >= s.lo && p <= s.hi {
				continue next
			}
		}
		out = append(out, p)
	}
	return out
}

// claim returns the first port of ports, from index start on and
// wrapping around, that it can lock in dir and bind, with the func that
// releases its lock. It locks before it binds, so it never binds a port
// another test holds.
func claim(dir string, ports []int, start int) (int, func(), error) {
	for i := range ports {
		p := ports[(start+i)%len(ports)]
		f, err := lockPort(dir, p)
		if errors.Is(err, errLocked) {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		if trialBind(p) != nil {
			f.Close()
			continue
		}
		// The closure keeps f reachable: the finalizer of a lost *os.File
		// would close it and drop the lock.
		return p, func() { f.Close() }, nil
	}
	return 0, nil, fmt.Errorf("acmetest: none of %d ports is free", len(ports))
}

// lockPort takes the lock of port in dir, held until the file returned
// is closed or the process ends; it returns errLocked if another open
// file holds it, in this process or another.
func lockPort(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("acmetest: lock port %d: %w", port, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("acmetest: lock port %d: %w", port, err)
	}
	return f, nil
}

// trialBind binds port with TCP and UDP on every address and closes
// both; an error says some program holds the port on some address.
func trialBind(port int) error {
	addr := ":" + strconv.Itoa(port)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	return pc.Close()
}
