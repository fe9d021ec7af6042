package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// dockerAPIVersion is the Engine API version the provider speaks: 1.41 is
// Docker 20.10, and later engines still accept it.
const dockerAPIVersion = "v1.41"

// engine is a minimal Docker Engine API client over the daemon's unix
// socket: the four calls the provider needs, with plain net/http. It is
// safe for concurrent use.
type engine struct {
	hc *http.Client
}

// newEngine returns a client for the daemon listening on socketPath.
func newEngine(socketPath string) *engine {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &engine{hc: &http.Client{Transport: tr}}
}

// container is the part of the Engine's container listing the provider
// reads.
type container struct {
	ID      string            `json:"Id"`
	Created int64             `json:"Created"` // unix seconds
	State   string            `json:"State"`   // created, running, restarting, exited, ...
	Labels  map[string]string `json:"Labels"`
}

// running reports whether c counts as a live instance.
func (c container) running() bool {
	return c.State == "running" || c.State == "restarting"
}

// apiError is a non-2xx answer from the Engine.
type apiError struct {
	Op      string
	Status  int
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("docker %s: %d %s", e.Op, e.Status, e.Message)
}

// do sends one request and decodes a JSON answer into out (when non-nil).
func (e *engine) do(ctx context.Context, op, method, path string, query url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("docker %s: %w", op, err)
		}
		rd = bytes.NewReader(b)
	}
	u := "http://docker/" + dockerAPIVersion + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("docker %s: %w", op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return fmt.Errorf("docker %s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var m struct {
			Message string `json:"message"`
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err != nil || json.Unmarshal(b, &m) != nil || m.Message == "" {
			m.Message = string(b)
		}
		return &apiError{Op: op, Status: resp.StatusCode, Message: m.Message}
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("docker %s: decode: %w", op, err)
	}
	return nil
}

// list returns every container, running or not, that carries all of labels.
func (e *engine) list(ctx context.Context, labels map[string]string) ([]container, error) {
	var match []string
	for k, v := range labels {
		match = append(match, k+"="+v)
	}
	filters, err := json.Marshal(map[string][]string{"label": match})
	if err != nil {
		return nil, err
	}
	var cs []container
	q := url.Values{"all": {"1"}, "filters": {string(filters)}}
	if err := e.do(ctx, "list", http.MethodGet, "/containers/json", q, nil, &cs); err != nil {
		return nil, err
	}
	// The filter is the Engine's; check again, because touching a container
	// without the labels is the one thing the provider must never do.
	out := cs[:0]
	for _, c := range cs {
		if hasLabels(c.Labels, labels) {
			out = append(out, c)
		}
	}
	return out, nil
}

// hasLabels reports whether got carries every key and value of want.
func hasLabels(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// createSpec is what a new container is made from.
type createSpec struct {
	Name    string
	Image   string
	Env     []string
	Cmd     []string
	Labels  map[string]string
	Network string
}

// create makes a container (not started) and returns its id.
func (e *engine) create(ctx context.Context, s createSpec) (string, error) {
	type restartPolicy struct {
		Name string `json:"Name"`
	}
	type hostConfig struct {
		NetworkMode   string        `json:"NetworkMode,omitempty"`
		RestartPolicy restartPolicy `json:"RestartPolicy"`
	}
	body := struct {
		Image      string            `json:"Image"`
		Env        []string          `json:"Env,omitempty"`
		Cmd        []string          `json:"Cmd,omitempty"`
		Labels     map[string]string `json:"Labels"`
		HostConfig hostConfig        `json:"HostConfig"`
	}{
		Image:  s.Image,
		Env:    s.Env,
		Cmd:    s.Cmd,
		Labels: s.Labels,
		// An instance that retires itself (idle_timeout) must stay
		// stopped: restarting it would defeat scale to zero.
		HostConfig: hostConfig{NetworkMode: s.Network, RestartPolicy: restartPolicy{Name: "no"}},
	}
	var out struct {
		ID string `json:"Id"`
	}
	q := url.Values{"name": {s.Name}}
	if err := e.do(ctx, "create", http.MethodPost, "/containers/create", q, body, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// start starts a created or stopped container.
func (e *engine) start(ctx context.Context, id string) error {
	err := e.do(ctx, "start", http.MethodPost, "/containers/"+url.PathEscape(id)+"/start", nil, nil, nil)
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.Status == http.StatusNotModified {
		return nil // already running
	}
	return err
}

// stop sends the container its stop signal (SIGTERM unless the image says
// otherwise) and, after grace, SIGKILL. It blocks until the container
// stopped.
func (e *engine) stop(ctx context.Context, id string, grace time.Duration) error {
	q := url.Values{"t": {strconv.Itoa(int(grace / time.Second))}}
	err := e.do(ctx, "stop", http.MethodPost, "/containers/"+url.PathEscape(id)+"/stop", q, nil, nil)
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.Status == http.StatusNotModified {
		return nil // already stopped
	}
	return err
}

// randomSuffix returns 8 random hex digits for container names.
func randomSuffix() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("docker-provider: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}
