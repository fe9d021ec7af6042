//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// api reads the server's admin API and metrics.
type api struct {
	base, master, metricsToken string
	http                       *http.Client
}

func newAPI(base, master, metricsToken string) *api {
	return &api{base: base, master: master, metricsToken: metricsToken,
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}}
}

// get GETs path on the server with token and returns the 200 body.
func (a *api) get(ctx context.Context, path, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d: %.200s", path, resp.StatusCode, body)
	}
	return body, nil
}

func (a *api) getJSON(ctx context.Context, path string, out any) error {
	body, err := a.get(ctx, apitype.Prefix+path, a.master)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, out)
}

// routable counts the clients serving hostname that are not draining.
func (a *api) routable(ctx context.Context, hostname string) (int, error) {
	var cs []apitype.ClientInfo
	if err := a.getJSON(ctx, "/clients", &cs); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cs {
		if slices.Contains(c.Hostnames, hostname) && !c.Draining {
			n++
		}
	}
	return n, nil
}

// wouldHold reports whether a request for hostname would now be held for
// a cold start (the explain API's cold_start step waits).
func (a *api) wouldHold(ctx context.Context, hostname string) (bool, error) {
	var ex apitype.Explanation
	if err := a.getJSON(ctx, "/explain?"+url.Values{"host": {hostname}, "path": {"/"}}.Encode(), &ex); err != nil {
		return false, err
	}
	for _, st := range ex.Steps {
		if st.Name == apitype.StepColdStart {
			return st.Outcome == apitype.OutcomeWait, nil
		}
	}
	return false, nil
}

// goroutines reads go_goroutines from the server's metrics.
func (a *api) goroutines(ctx context.Context) (int, error) {
	body, err := a.get(ctx, "/aperio/metrics", a.metricsToken)
	if err != nil {
		return 0, err
	}
	return parseGauge(strings.NewReader(string(body)), "go_goroutines")
}

// parseGauge returns the value of the unlabelled sample name in a
// Prometheus text exposition.
func parseGauge(r io.Reader, name string) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("%s %q: %w", name, v, err)
			}
			return int(f), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in the metrics", name)
}
