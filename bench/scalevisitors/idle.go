package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// runIdle opens n connections that each make one request and then sit
// idle, until SIGUSR1 (check them and exit), SIGTERM or -hold.
func runIdle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	addr := fs.String("addr", "", "the server's public address")
	host := fs.String("host", "", "Host of the requests")
	n := fs.Int("n", 10000, "connections")
	src := fs.String("src", "127.0.0.1", "first source address")
	perSrc := fs.Int("per-src", 20000, "connections per source address")
	hold := fs.Duration("hold", 10*time.Minute, "longest time to hold them")
	workers := fs.Int("workers", 32, "connections opened at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	base, err := netip.ParseAddr(*src)
	if err != nil || !base.Is4() {
		return fmt.Errorf("-src %q: want an IPv4 address", *src)
	}
	if *n < 1 || *n > 1_000_000 || *perSrc < 1 || *perSrc > 28000 || *hold <= 0 {
		return fmt.Errorf("want 1 <= -n <= 1000000, 1 <= -per-src <= 28000, -hold > 0")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	req := getRequest(*host, "/idle")
	conns := make([]net.Conn, *n)
	var failed atomic.Int64
	var firstErr sync.Once
	start := time.Now()
	parallel(*n, *workers, func(i int) {
		fail := func(err error) {
			failed.Add(1)
			firstErr.Do(func() { fmt.Fprintf(os.Stderr, "idle: connection %d: %v\n", i, err) })
		}
		s, ok := sourceFor(base, i, *perSrc)
		if !ok {
			fail(fmt.Errorf("no source address left after %s", base))
			return
		}
		c, err := dialer(s).Dial("tcp", *addr)
		if err != nil {
			fail(err)
			return
		}
		if code, err := exchange(c, req, 30*time.Second); err != nil || code != 200 {
			c.Close()
			fail(fmt.Errorf("status %d: %v", code, err))
			return
		}
		conns[i] = c
	})
	open := int64(*n) - failed.Load()
	fmt.Fprintf(os.Stderr, "idle: %d open, %d failed in %.1fs\n", open, failed.Load(), time.Since(start).Seconds())
	fmt.Printf("ready %d %d\n", open, failed.Load())
	t := time.NewTimer(*hold)
	defer t.Stop()
	select {
	case s := <-sig:
		if s != syscall.SIGUSR1 {
			return nil
		}
	case <-t.C:
		return fmt.Errorf("no SIGUSR1 within -hold %v", *hold)
	}
	var alive atomic.Int64
	req2 := getRequest(*host, "/again")
	parallel(*n, *workers, func(i int) {
		if c := conns[i]; c != nil {
			if code, err := exchange(c, req2, 30*time.Second); err == nil && code == 200 {
				alive.Add(1)
			}
			c.Close()
		}
	})
	fmt.Printf("alive %d of %d\n", alive.Load(), *n)
	return nil
}
