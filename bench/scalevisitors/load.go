package main

import (
	"flag"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// runLoad runs c keep-alive connections, each sending one request after
// the other for d, and prints "REQUESTS REQ/S NON200 ERRORS".
func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	addr := fs.String("addr", "", "the server's public address")
	host := fs.String("host", "", "Host of the requests")
	conc := fs.Int("c", 64, "connections")
	d := fs.Duration("d", 5*time.Second, "duration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *conc < 1 || *conc > 10000 || *d <= 0 || *d > 10*time.Minute {
		return fmt.Errorf("want 1 <= -c <= 10000 and 0 < -d <= 10m")
	}
	req := getRequest(*host, "/load")
	var ok, non200, errs atomic.Int64
	start := time.Now()
	end := start.Add(*d)
	var wg sync.WaitGroup
	for range *conc {
		wg.Go(func() {
			var c net.Conn
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for time.Now().Before(end) {
				if c == nil {
					var err error
					if c, err = net.DialTimeout("tcp", *addr, 10*time.Second); err != nil {
						errs.Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					}
				}
				code, err := exchange(c, req, 10*time.Second)
				switch {
				case err != nil:
					errs.Add(1)
					c.Close()
					c = nil
				case code != 200:
					non200.Add(1)
				default:
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	fmt.Printf("%d %.0f %d %d\n", ok.Load(), float64(ok.Load())/secs, non200.Load(), errs.Load())
	return nil
}
