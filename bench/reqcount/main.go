// Command reqcount is the backend and the load of bench/syscalls.sh,
// which counts the syscalls aperio-server and aperio-client make per
// proxied request (#43). It is a benchmark tool and is linked into no
// binary.
//
//	reqcount backend ADDR            serve ADDR: / answers 19 bytes with a
//	                                 Content-Length, /chunked 3,000 bytes
//	                                 without one (a chunked answer)
//	reqcount load URL HOST N C       send N GETs of URL with Host HOST over
//	                                 C keep-alive connections
//	reqcount port                    print a TCP port free on 127.0.0.1
//
// load prints "N REQ/S FAILED" and exits 1 if any answer was not a 200
// or failed.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "reqcount:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "backend":
		return backend(args[1])
	case len(args) == 5 && args[0] == "load":
		n, err := strconv.Atoi(args[3])
		if err != nil || n < 1 {
			return fmt.Errorf("N %q: want a positive count", args[3])
		}
		c, err := strconv.Atoi(args[4])
		if err != nil || c < 1 {
			return fmt.Errorf("C %q: want a positive count", args[4])
		}
		return load(args[1], args[2], n, c)
	case len(args) == 1 && args[0] == "port":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		return nil
	}
	return fmt.Errorf("usage: reqcount backend ADDR | load URL HOST N C | port")
}

// backend serves the two answers until the process is killed.
func backend(addr string) error {
	small := []byte("hello from backend\n")
	big := make([]byte, 3000)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { w.Write(small) })
	// One Write larger than net/http's 2 KiB before-chunking buffer: the
	// answer goes chunked, its last chunk and its end in one write.
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) { w.Write(big) })
	return http.ListenAndServe(addr, mux)
}

// load sends n requests over c connections, each connection sending its
// next request when the last answer was read.
func load(url, host string, n, c int) error {
	tr := &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}
	defer tr.CloseIdleConnections()
	var left, failed atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if get(tr, url, host) != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	fmt.Printf("%d %.0f %d\n", n, float64(n)/d.Seconds(), failed.Load())
	if failed.Load() > 0 {
		return fmt.Errorf("%d of %d requests failed", failed.Load(), n)
	}
	return nil
}

// get sends one GET and reads its answer to the end.
func get(tr *http.Transport, url, host string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Host = host
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
