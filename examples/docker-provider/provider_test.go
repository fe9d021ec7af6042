package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeDocker is an in-memory Docker Engine serving the four calls the
// provider makes, on a unix socket like the real daemon.
type fakeDocker struct {
	mu         sync.Mutex // guards the following fields
	containers map[string]*fakeContainer
	nextID     int
	touched    map[string][]string // id -> operations (start, stop) applied to it
	created    int

	wantStopGrace string // the t= every stop must carry (the template's stop_timeout in seconds)
}

type fakeContainer struct {
	c     container
	image string
	env   []string
	net   string
}

func newFakeDocker(t *testing.T) (*fakeDocker, string) {
	t.Helper()
	f := &fakeDocker{containers: make(map[string]*fakeContainer), touched: make(map[string][]string), wantStopGrace: "1"}
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f.routes())
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return f, sock
}

// add puts a container into the fake as if someone else made it.
func (f *fakeDocker) add(state string, labels map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := fmt.Sprintf("%064d", f.nextID)
	f.containers[id] = &fakeContainer{c: container{ID: id, Created: int64(f.nextID), State: state, Labels: labels}}
	return id
}

func (f *fakeDocker) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1.41/containers/json", func(w http.ResponseWriter, r *http.Request) {
		var filters map[string][]string
		if err := json.Unmarshal([]byte(r.URL.Query().Get("filters")), &filters); err != nil {
			http.Error(w, `{"message":"bad filters"}`, http.StatusBadRequest)
			return
		}
		all := r.URL.Query().Get("all") == "1"
		f.mu.Lock()
		defer f.mu.Unlock()
		out := []container{}
		for _, fc := range f.containers {
			if !all && fc.c.State != "running" {
				continue
			}
			match := true
			for _, kv := range filters["label"] {
				k, v, _ := strings.Cut(kv, "=")
				if fc.c.Labels[k] != v {
					match = false
				}
			}
			if match {
				out = append(out, fc.c)
			}
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /v1.41/containers/create", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Image      string
			Env        []string
			Labels     map[string]string
			HostConfig struct {
				NetworkMode   string
				RestartPolicy struct{ Name string }
			}
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Image == "" {
			http.Error(w, `{"message":"bad body"}`, http.StatusBadRequest)
			return
		}
		if body.HostConfig.RestartPolicy.Name != "no" {
			http.Error(w, `{"message":"the provider must ask for restart policy no"}`, http.StatusBadRequest)
			return
		}
		id := f.add("created", body.Labels)
		f.mu.Lock()
		fc := f.containers[id]
		fc.image, fc.env, fc.net = body.Image, body.Env, body.HostConfig.NetworkMode
		f.created++
		f.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"Id":%q}`, id)
	})
	mux.HandleFunc("POST /v1.41/containers/{id}/{op}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id, op := r.PathValue("id"), r.PathValue("op")
		fc, ok := f.containers[id]
		if !ok {
			http.Error(w, `{"message":"no such container"}`, http.StatusNotFound)
			return
		}
		f.touched[id] = append(f.touched[id], op)
		switch op {
		case "start":
			fc.c.State = "running"
		case "stop":
			if got := r.URL.Query().Get("t"); got != f.wantStopGrace {
				http.Error(w, `{"message":"stop grace t=`+got+`, want `+f.wantStopGrace+`"}`, http.StatusBadRequest)
				return
			}
			fc.c.State = "exited"
		default:
			http.Error(w, `{"message":"unknown op"}`, http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// createdCount is how many containers the provider created.
func (f *fakeDocker) createdCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created
}

// running counts the running containers carrying labels.
func (f *fakeDocker) running(labels map[string]string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, fc := range f.containers {
		if fc.c.State == "running" && hasLabels(fc.c.Labels, labels) {
			n++
		}
	}
	return n
}

const testSecret = "s3cret"

var webLabels = map[string]string{labelOwner: "test", labelService: "web"}

// startProvider runs a provider with one service "web" against the fake.
func startProvider(t *testing.T, sock string) (*provider, *httptest.Server) {
	t.Helper()
	cfg := &Config{Owner: "test", Services: map[string]*Service{
		"web": {Image: "web:1", Network: "net1", Env: []string{"A=1"}, Labels: map[string]string{"team": "x"}, Max: 5, StopTimeout: "1s"}, // the fake checks stop?t=1,
	}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	p := newProvider(cfg, testSecret, newEngine(sock), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx)
	}()
	srv := httptest.NewServer(p.routes())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
	})
	return p, srv
}

// scale sends one scaling call and returns the status.
func scale(t *testing.T, srv *httptest.Server, secret, key string, desired int) int {
	t.Helper()
	body := fmt.Sprintf(`{"reason":"scale_out","hostname":"app.test","path":null,"org_id":null,"current":0,"desired":%d,"min":0,"max":5}`, desired)
	req, err := http.NewRequest("POST", srv.URL+"/scale/web", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitApplied(t *testing.T, p *provider) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.waitApplied(ctx, "web"); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
}

func TestAuthRefused(t *testing.T) {
	f, sock := newFakeDocker(t)
	p, srv := startProvider(t, sock)
	for _, secret := range []string{"", "wrong", testSecret + "x"} {
		if got := scale(t, srv, secret, "k-"+secret, 2); got != http.StatusUnauthorized {
			t.Errorf("scale with secret %q = %d, want 401", secret, got)
		}
	}
	// Nothing was accepted, so nothing is pending and nothing was made.
	waitApplied(t, p)
	if f.createdCount() != 0 || f.running(webLabels) != 0 {
		t.Errorf("after refused calls: created %d, running %d, want 0 and 0", f.createdCount(), f.running(webLabels))
	}
	req, err := http.NewRequest("GET", srv.URL+"/calls", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /calls without secret = %d, want 401", resp.StatusCode)
	}
}

func TestBadCalls(t *testing.T) {
	_, sock := newFakeDocker(t)
	_, srv := startProvider(t, sock)
	for _, tc := range []struct {
		name, path, body string
		want             int
	}{
		{"unknown service", "/scale/db", `{"desired":1}`, http.StatusNotFound},
		{"not json", "/scale/web", `desired=1`, http.StatusBadRequest},
		{"no desired", "/scale/web", `{"reason":"cold_start"}`, http.StatusBadRequest},
		{"negative", "/scale/web", `{"desired":-1}`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+testSecret)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("POST %s %s = %d, want %d", tc.path, tc.body, resp.StatusCode, tc.want)
			}
		})
	}
}

func TestScaleUpDownCounts(t *testing.T) {
	f, sock := newFakeDocker(t)
	p, srv := startProvider(t, sock)
	for i, tc := range []struct {
		desired, wantRunning, wantCreated int
	}{
		{1, 1, 1},
		{3, 3, 3},
		{3, 3, 3}, // same desired, new key: nothing to do
		{1, 1, 3}, // stops the surplus
		{2, 2, 3}, // restarts a stopped container instead of creating one
		{9, 5, 5}, // capped at the service's max
		{0, 0, 5},
	} {
		if got := scale(t, srv, testSecret, fmt.Sprintf("key-%d", i), tc.desired); got != http.StatusAccepted {
			t.Fatalf("call %d: status %d, want 202", i, got)
		}
		waitApplied(t, p)
		if got := f.running(webLabels); got != tc.wantRunning {
			t.Errorf("after desired %d: running = %d, want %d", tc.desired, got, tc.wantRunning)
		}
		if got := f.createdCount(); got != tc.wantCreated {
			t.Errorf("after desired %d: created = %d, want %d", tc.desired, got, tc.wantCreated)
		}
	}
	// Every container was made from the template, labels included.
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, fc := range f.containers {
		if fc.image != "web:1" || fc.net != "net1" || len(fc.env) != 1 || fc.c.Labels["team"] != "x" || !hasLabels(fc.c.Labels, webLabels) {
			t.Errorf("container %s = image %q net %q env %q labels %v, want the template", short(id), fc.image, fc.net, fc.env, fc.c.Labels)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	f, sock := newFakeDocker(t)
	p, srv := startProvider(t, sock)
	if got := scale(t, srv, testSecret, "same", 2); got != http.StatusAccepted {
		t.Fatalf("first call = %d, want 202", got)
	}
	waitApplied(t, p)
	// Someone scales down by hand; a retried delivery of the old decision
	// must not undo that.
	if got := scale(t, srv, testSecret, "other", 1); got != http.StatusAccepted {
		t.Fatalf("second call = %d, want 202", got)
	}
	waitApplied(t, p)
	if got := scale(t, srv, testSecret, "same", 2); got != http.StatusOK {
		t.Fatalf("repeated key = %d, want 200", got)
	}
	waitApplied(t, p)
	if got := f.running(webLabels); got != 1 {
		t.Errorf("after a repeated key: running = %d, want 1", got)
	}
	if got := f.createdCount(); got != 2 {
		t.Errorf("created = %d, want 2", got)
	}
	var calls []Call
	req, err := http.NewRequest("GET", srv.URL+"/calls", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testSecret)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 || calls[0].Duplicate || calls[1].Duplicate || !calls[2].Duplicate {
		t.Errorf("GET /calls = %+v, want 3 calls, only the last a duplicate", calls)
	}
}

func TestUnlabelledContainersUntouched(t *testing.T) {
	f, sock := newFakeDocker(t)
	p, srv := startProvider(t, sock)
	others := []string{
		f.add("running", nil),
		f.add("running", map[string]string{labelService: "web"}),                    // another owner's
		f.add("running", map[string]string{labelOwner: "test", labelService: "db"}), // another service
		f.add("exited", map[string]string{labelService: "web", labelOwner: "else"}),
	}
	for i, desired := range []int{2, 0, 1, 0} {
		if got := scale(t, srv, testSecret, fmt.Sprintf("k%d", i), desired); got != http.StatusAccepted {
			t.Fatalf("call %d = %d, want 202", i, got)
		}
		waitApplied(t, p)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range others {
		if ops := f.touched[id]; len(ops) > 0 {
			t.Errorf("container %s without the provider's labels got %v", short(id), ops)
		}
	}
	if f.created != 2 {
		t.Errorf("created = %d, want 2 (the second scale up restarts one)", f.created)
	}
}

func TestParseOptions(t *testing.T) {
	env := map[string]string{"PROVIDER_SECRET": "x", "IMG": "web:2"}
	getenv := func(k string) string { return env[k] }
	files := map[string]string{
		"good.json":    `{"services":{"web":{"image":"${IMG}","stop_timeout":"5s"}}}`,
		"unknown.json": `{"services":{"web":{"image":"a","imagee":"b"}}}`,
		"noimage.json": `{"services":{"web":{}}}`,
		"badstop.json": `{"services":{"web":{"image":"a","stop_timeout":"soon"}}}`,
	}
	readFile := func(p string) ([]byte, error) {
		s, ok := files[p]
		if !ok {
			return nil, fmt.Errorf("open %s: no such file", p)
		}
		return []byte(s), nil
	}
	o, err := parseOptions([]string{"--config", "good.json"}, getenv, readFile, nil)
	if err != nil {
		t.Fatalf("parseOptions(good) = %v", err)
	}
	if s := o.Config.Services["web"]; s.Image != "web:2" || s.stopGrace != 5*time.Second || s.Max != 8 || o.Config.Owner != "aperio-docker-provider" {
		t.Errorf("parseOptions(good) = %+v owner %q, want image web:2, grace 5s, max 8, default owner", s, o.Config.Owner)
	}
	for _, name := range []string{"unknown.json", "noimage.json", "badstop.json", "missing.json"} {
		if _, err := parseOptions([]string{"--config", name}, getenv, readFile, nil); err == nil {
			t.Errorf("parseOptions(%s) = nil error, want one", name)
		}
	}
	delete(env, "PROVIDER_SECRET")
	if _, err := parseOptions([]string{"--config", "good.json"}, getenv, readFile, nil); err == nil {
		t.Error("parseOptions without PROVIDER_SECRET = nil error, want one")
	}
}
