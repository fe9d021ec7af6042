package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// runHeld sends n requests at once, one connection each, waits until the
// server holds them, prints "held N", then collects every answer.
func runHeld(args []string) error {
	fs := flag.NewFlagSet("held", flag.ContinueOnError)
	addr := fs.String("addr", "", "the server's public address")
	host := fs.String("host", "", "Host of the requests")
	n := fs.Int("n", 10000, "requests")
	token := fs.String("metrics-token", "", "the server's metrics_token")
	timeout := fs.Duration("timeout", 8*time.Minute, "longest wait for all to be held and answered")
	workers := fs.Int("workers", 64, "connections opened at once (h1)")
	proto := fs.String("proto", "h1", "h1: HTTP/1.1, one connection per request; h2c: HTTP/2 without TLS, multiplexed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 || *n > 1_000_000 || *timeout <= 0 || (*proto != "h1" && *proto != "h2c") {
		return fmt.Errorf("want 1 <= -n <= 1000000, -timeout > 0 and -proto h1 or h2c")
	}
	deadline := time.Now().Add(*timeout)
	statuses := make([]int, *n) // 0: a transport error
	var answered sync.WaitGroup
	var firstErr sync.Once
	if *proto == "h2c" {
		sendH2C(*addr, *host, deadline, statuses, &answered, &firstErr)
	} else {
		sendH1(*addr, *host, *workers, deadline, statuses, &answered, &firstErr)
	}
	metrics := "http://" + *addr + "/aperio/metrics"
	var last int
	for {
		q, err := gauge(metrics, *token, "aperio_requests_queued")
		if err != nil {
			return err
		}
		if q != last {
			fmt.Fprintf(os.Stderr, "held: %d of %d held\n", q, *n)
			last = q
		}
		if q >= *n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d held by the deadline", q, *n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Printf("held %d\n", last)
	answered.Wait()
	m := map[int]int{}
	for _, s := range statuses {
		m[s]++
	}
	fmt.Printf("answers %s\n", counts(m))
	return nil
}

// sendH1 sends one request per connection, len(statuses) of them, and
// has answered collect each answer's status.
func sendH1(addr, host string, workers int, deadline time.Time, statuses []int, answered *sync.WaitGroup, firstErr *sync.Once) {
	req := getRequest(host, "/held")
	parallel(len(statuses), workers, func(i int) {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err == nil {
			c.SetDeadline(deadline)
			_, err = c.Write(req)
		}
		if err != nil {
			firstErr.Do(func() { fmt.Fprintf(os.Stderr, "held: request %d: %v\n", i, err) })
			if c != nil {
				c.Close()
			}
			return
		}
		answered.Go(func() {
			defer c.Close()
			code, err := readAnswer(c)
			if err != nil && code == 0 {
				firstErr.Do(func() { fmt.Fprintf(os.Stderr, "held: request %d: %v\n", i, err) })
			}
			statuses[i] = code
		})
	})
}

// sendH2C sends len(statuses) requests at once over HTTP/2 without TLS:
// the transport opens a connection per server stream limit's worth.
func sendH2C(addr, host string, deadline time.Time, statuses []int, answered *sync.WaitGroup, firstErr *sync.Once) {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Proxy: nil, Protocols: p}, Timeout: time.Until(deadline)}
	for i := range statuses {
		answered.Go(func() {
			req, err := http.NewRequest("GET", "http://"+addr+"/held", nil)
			if err != nil {
				return
			}
			req.Host = host
			resp, err := c.Do(req)
			if err != nil {
				firstErr.Do(func() { fmt.Fprintf(os.Stderr, "held: request %d: %v\n", i, err) })
				return
			}
			_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
			resp.Body.Close()
			if err == nil {
				statuses[i] = resp.StatusCode
			}
		})
	}
}

// gauge GETs a Prometheus text exposition with a bearer token and returns
// the value of the unlabelled sample name.
func gauge(u, token, name string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	return sample(io.LimitReader(resp.Body, 32<<20), name)
}

// sample finds the unlabelled sample name in a Prometheus text exposition.
func sample(r io.Reader, name string) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != name {
			continue
		}
		v, err := strconv.ParseFloat(fields[1], 64)
		if err != nil || !(v >= 0 && v <= 1e9) {
			return 0, fmt.Errorf("%s %q: not a count", name, fields[1])
		}
		return int(v), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s sample", name)
}

// runArmed waits until the server would hold a request for host: the
// explain API's cold_start step waits.
func runArmed(args []string) error {
	fs := flag.NewFlagSet("armed", flag.ContinueOnError)
	addr := fs.String("addr", "", "the server's address")
	host := fs.String("host", "", "the hostname")
	token := fs.String("token", "", "the master token")
	timeout := fs.Duration("timeout", 60*time.Second, "longest wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u := "http://" + *addr + "/aperio/api/explain?" + url.Values{"host": {*host}, "path": {"/"}}.Encode()
	deadline := time.Now().Add(*timeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := wouldHold(u, *token)
		if ok {
			return nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not held within %v (last error: %v)", *host, *timeout, last)
}

func wouldHold(u, token string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var ex apitype.Explanation
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ex); err != nil {
		return false, fmt.Errorf("explain: status %d: %w", resp.StatusCode, err)
	}
	for _, st := range ex.Steps {
		if st.Name == apitype.StepColdStart {
			return st.Outcome == apitype.OutcomeWait, nil
		}
	}
	return false, nil
}
