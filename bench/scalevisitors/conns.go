package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// getRequest is a keep-alive GET of path for host, as the visitor sends it.
func getRequest(host, path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: scalevisitors\r\n\r\n")
}

// maxBody bounds the body read of one answer.
const maxBody = 1 << 20

// exchange sends req on c and reads the whole answer, within timeout. It
// returns the status; an error when the connection failed or the answer
// closes it (the connection cannot stay idle then).
func exchange(c net.Conn, req []byte, timeout time.Duration) (int, error) {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	return readAnswer(c)
}

// readAnswer reads one HTTP/1.1 answer from c, body included. The reader
// is dropped afterwards, so an idle connection keeps no buffer: nothing
// is pipelined, so nothing past the answer can have been read.
func readAnswer(c net.Conn) (int, error) {
	br := bufio.NewReaderSize(c, 2048)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.Close {
		return resp.StatusCode, fmt.Errorf("status %d with Connection: close", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// sourceFor returns the source address of the i-th connection: base for
// the first perSrc, the next address for the next perSrc, and so on, so
// that no source runs out of ephemeral ports. It is false past the end
// of base's /8.
func sourceFor(base netip.Addr, i, perSrc int) (netip.Addr, bool) {
	a := base
	for k := i / perSrc; k > 0; k-- {
		a = a.Next()
		if !a.IsValid() || a.As4()[0] != base.As4()[0] {
			return netip.Addr{}, false
		}
	}
	return a, true
}

// dialer returns a dialer from src (any port), with a timeout.
func dialer(src netip.Addr) *net.Dialer {
	return &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
}

// parallel runs fn(i) for i in [0, n) on workers goroutines.
func parallel(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// counts formats a count per status as "200×9998 502×2", statuses in
// order; 0 stands for a transport error.
func counts(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
