package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// Labels the provider puts on every container it creates, and the only
// containers it ever lists, starts or stops.
const (
	labelOwner   = "aperio.provider.owner"
	labelService = "aperio.provider.service"
)

// Bounds.
const (
	maxBodyBytes = 64 << 10 // a hook body is a few hundred bytes
	// seenKeys is how many Idempotency-Keys are remembered; Aperio retries
	// a decision within minutes, so the most recent thousand is plenty.
	seenKeys = 1024
	// keptCalls is how many calls GET /calls shows.
	keptCalls = 1000
)

// Service is the template one scaled service's containers are made from.
type Service struct {
	Image   string            `json:"image"`   // required
	Env     []string          `json:"env"`     // KEY=value, passed as is
	Cmd     []string          `json:"cmd"`     // overrides the image's CMD when set
	Network string            `json:"network"` // network to attach to; empty = the default bridge
	Labels  map[string]string `json:"labels"`  // extra labels (the provider's own win)
	// Max caps desired whatever the call asks; 0 means 8.
	Max int `json:"max"`
	// StopTimeout is how long a stopped container may drain before
	// SIGKILL, in Go duration syntax; empty means 35s (the client's
	// default drain_timeout is 30s).
	StopTimeout string `json:"stop_timeout"`

	stopGrace time.Duration
}

// Config is the provider's configuration file (JSON).
type Config struct {
	// Owner tells this provider's containers apart from another
	// provider's on the same engine; empty means "aperio-docker-provider".
	Owner    string              `json:"owner"`
	Services map[string]*Service `json:"services"`
}

// validate checks c and fills in defaults, reporting every problem.
func (c *Config) validate() error {
	var errs []error
	if c.Owner == "" {
		c.Owner = "aperio-docker-provider"
	}
	if len(c.Services) == 0 {
		errs = append(errs, errors.New("no services"))
	}
	for name, s := range c.Services {
		if name == "" || strings.ContainsAny(name, "/ ") {
			errs = append(errs, fmt.Errorf("service %q: name must be non-empty without '/' or spaces", name))
		}
		if s == nil || s.Image == "" {
			errs = append(errs, fmt.Errorf("service %q: image is required", name))
			continue
		}
		if s.Max < 0 {
			errs = append(errs, fmt.Errorf("service %q: max %d is negative", name, s.Max))
		}
		if s.Max == 0 {
			s.Max = 8
		}
		s.stopGrace = 35 * time.Second
		if s.StopTimeout != "" {
			d, err := time.ParseDuration(s.StopTimeout)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Errorf("service %q: stop_timeout %q is not a duration", name, s.StopTimeout))
			}
			s.stopGrace = d
		}
	}
	return errors.Join(errs...)
}

// dockerAPI is what the provider needs from the Docker Engine.
type dockerAPI interface {
	list(ctx context.Context, labels map[string]string) ([]container, error)
	create(ctx context.Context, s createSpec) (string, error)
	start(ctx context.Context, id string) error
	stop(ctx context.Context, id string, grace time.Duration) error
}

// hookCall is Aperio's scaling call body (docs/autoscaling.md).
type hookCall struct {
	Reason   string  `json:"reason"`
	Hostname string  `json:"hostname"`
	Path     *string `json:"path"`
	OrgID    *string `json:"org_id"`
	Current  int     `json:"current"`
	Desired  *int    `json:"desired"`
	Min      int     `json:"min"`
	Max      int     `json:"max"`
	// LeaseGeneration is the generation of the lease the call was made
	// under; null for a call made without one (see fence.go).
	LeaseGeneration *int64 `json:"lease_generation"`
}

// Call is one accepted call, as GET /calls lists it.
type Call struct {
	At             time.Time `json:"at"`
	Service        string    `json:"service"`
	Reason         string    `json:"reason"`
	Current        int       `json:"current"`
	Desired        int       `json:"desired"`
	IdempotencyKey string    `json:"idempotency_key"`
	Duplicate      bool      `json:"duplicate"` // dropped: the key was seen before
	RemoteAddr     string    `json:"remote_addr"`
}

// provider serves Aperio's scaling calls and reconciles each service's
// containers with the latest desired count, one service at a time.
type provider struct {
	secret []byte
	owner  string
	docker dockerAPI
	logger *slog.Logger
	now    func() time.Time

	services map[string]*serviceState // fixed after newProvider
	fence    *fence

	mu    sync.Mutex // guards the following fields
	seen  map[string]bool
	order []string // keys of seen, oldest first
	calls []Call
}

// serviceState is one service's reconcile worker state.
type serviceState struct {
	name string
	tmpl *Service

	wake chan struct{} // capacity 1: a pending reconcile

	mu        sync.Mutex // guards the following fields
	desired   int
	requested uint64 // generation of the last call
	applied   uint64 // generation the last finished reconcile saw
	lastErr   error
	done      chan struct{} // closed and replaced when applied advances
}

func newProvider(cfg *Config, secret string, docker dockerAPI, logger *slog.Logger) *provider {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &provider{
		secret:   []byte(secret),
		owner:    cfg.Owner,
		docker:   docker,
		logger:   logger,
		now:      time.Now,
		services: make(map[string]*serviceState),
		seen:     make(map[string]bool),
		fence:    newFence(),
	}
	for name, s := range cfg.Services {
		p.services[name] = &serviceState{name: name, tmpl: s, wake: make(chan struct{}, 1), done: make(chan struct{})}
	}
	return p
}

// run runs one reconcile worker per service until ctx is done.
func (p *provider) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range p.services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.reconcileLoop(ctx, s)
		}()
	}
	wg.Wait()
}

func (p *provider) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /scale/{service}", p.handleScale)
	mux.HandleFunc("GET /calls", p.handleCalls)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	return mux
}

// authorized checks the bearer secret in constant time.
func (p *provider) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), p.secret) == 1
}

// handleScale accepts one call: it answers at once (Aperio holds requests
// until the new client announces, so there is nothing to wait for) and
// leaves the work to the service's reconcile worker.
func (p *provider) handleScale(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	s, ok := p.services[r.PathValue("service")]
	if !ok {
		http.Error(w, "unknown service", http.StatusNotFound)
		return
	}
	var call hookCall
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(&call); err != nil {
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if call.Desired == nil || *call.Desired < 0 {
		http.Error(w, "bad body: desired must be a count >= 0", http.StatusBadRequest)
		return
	}
	gen, err := callGeneration(r, call.LeaseGeneration)
	if err != nil {
		http.Error(w, "bad call: "+err.Error(), http.StatusBadRequest)
		return
	}
	path := ""
	if call.Path != nil {
		path = *call.Path
	}
	if !p.fence.admit(s.name+"\x00"+strings.ToLower(call.Hostname)+"\x00"+path, gen) {
		p.logger.Warn("scaling call refused: its lease was taken over", logkey.Service, s.name, logkey.Reason, call.Reason,
			logkey.Generation, gen, logkey.RemoteAddr, r.RemoteAddr)
		http.Error(w, "lease generation superseded", http.StatusConflict)
		return
	}
	desired := min(*call.Desired, s.tmpl.Max)
	key := r.Header.Get("Idempotency-Key")
	dup := p.remember(key)
	p.record(Call{
		At: p.now(), Service: s.name, Reason: call.Reason, Current: call.Current, Desired: desired,
		IdempotencyKey: key, Duplicate: dup, RemoteAddr: r.RemoteAddr,
	})
	p.logger.Info("scaling call", logkey.Service, s.name, logkey.Reason, call.Reason, logkey.Desired, desired,
		logkey.IdempotencyKey, key, logkey.Duplicate, dup, logkey.RemoteAddr, r.RemoteAddr)
	if dup {
		w.WriteHeader(http.StatusOK)
		return
	}
	s.mu.Lock()
	s.desired = desired
	s.requested++
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // a reconcile is already pending; it will read the new desired
	}
	w.WriteHeader(http.StatusAccepted)
}

// remember records key and reports whether it was seen before. An empty
// key is never a duplicate.
func (p *provider) remember(key string) bool {
	if key == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[key] {
		return true
	}
	p.seen[key] = true
	p.order = append(p.order, key)
	if len(p.order) > seenKeys {
		delete(p.seen, p.order[0])
		p.order = p.order[1:]
	}
	return false
}

func (p *provider) record(c Call) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c)
	if len(p.calls) > keptCalls {
		p.calls = p.calls[1:]
	}
}

// handleCalls lists the recent calls, oldest first (for operators and the
// end-to-end tests); it needs the same secret as the scaling calls.
func (p *provider) handleCalls(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	p.mu.Lock()
	calls := append([]Call{}, p.calls...)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(calls); err != nil {
		p.logger.Warn("write calls", logkey.Err, err)
	}
}

// reconcileLoop applies s's desired count each time a call wakes it.
func (p *provider) reconcileLoop(ctx context.Context, s *serviceState) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		desired, gen := s.desired, s.requested
		s.mu.Unlock()
		err := p.reconcile(ctx, s, desired)
		if err != nil {
			p.logger.Error("reconcile", logkey.Service, s.name, logkey.Desired, desired, logkey.Err, err)
		}
		s.mu.Lock()
		s.applied, s.lastErr = gen, err
		close(s.done)
		s.done = make(chan struct{})
		s.mu.Unlock()
	}
}

// waitApplied blocks until every call accepted so far for service has been
// reconciled, and returns the last reconcile's error.
func (p *provider) waitApplied(ctx context.Context, service string) error {
	s := p.services[service]
	for {
		s.mu.Lock()
		applied, want, err, done := s.applied, s.requested, s.lastErr, s.done
		s.mu.Unlock()
		if applied >= want {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
		}
	}
}

// reconcile makes the number of running containers of s equal desired:
// it starts stopped ones first (faster than creating), then creates new
// ones; or it stops the newest surplus ones, all at once, each with its
// drain grace. Containers without both of the provider's labels are never
// listed, so never touched.
func (p *provider) reconcile(ctx context.Context, s *serviceState, desired int) error {
	labels := map[string]string{labelOwner: p.owner, labelService: s.name}
	cs, err := p.docker.list(ctx, labels)
	if err != nil {
		return err
	}
	var running, stopped []container
	for _, c := range cs {
		if c.running() {
			running = append(running, c)
		} else {
			stopped = append(stopped, c)
		}
	}
	p.logger.Info("reconcile", logkey.Service, s.name, logkey.Desired, desired, logkey.Running, len(running))

	if len(running) > desired {
		// Newest first: the oldest instances have the warmest caches.
		sort.Slice(running, func(i, j int) bool { return running[i].Created > running[j].Created })
		surplus := running[:len(running)-desired]
		errs := make([]error, len(surplus))
		var wg sync.WaitGroup
		for i, c := range surplus {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.logger.Info("stopping container", logkey.Service, s.name, logkey.Container, short(c.ID))
				errs[i] = p.docker.stop(ctx, c.ID, s.tmpl.stopGrace)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	need := desired - len(running)
	var errs []error
	for _, c := range stopped {
		if need == 0 {
			break
		}
		p.logger.Info("starting container", logkey.Service, s.name, logkey.Container, short(c.ID))
		if err := p.docker.start(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		need--
	}
	for ; need > 0; need-- {
		spec := createSpec{
			Name:    s.name + "-" + randomSuffix(),
			Image:   s.tmpl.Image,
			Env:     s.tmpl.Env,
			Cmd:     s.tmpl.Cmd,
			Network: s.tmpl.Network,
			Labels:  make(map[string]string, len(s.tmpl.Labels)+2),
		}
		for k, v := range s.tmpl.Labels {
			spec.Labels[k] = v
		}
		for k, v := range labels {
			spec.Labels[k] = v
		}
		id, err := p.docker.create(ctx, spec)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		p.logger.Info("starting container", logkey.Service, s.name, logkey.Container, short(id))
		if err := p.docker.start(ctx, id); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	return errors.Join(errs...)
}

// short is a container id as docker ps prints it.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
