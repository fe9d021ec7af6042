package main

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// The demo provider's bounds: a demo starts a couple of instances, never
// a fleet, whatever a caller asks.
const (
	maxProviderInstances = 3
	maxScaleBody         = 4 << 10
	maxRememberedKeys    = 64
)

// provider is the demo's scaling provider (make demo's cold start): POST
// /scale, with the bearer secret, starts run once for each instance the
// call's desired count is above its current one, up to
// maxProviderInstances in all, and answers 202 before they are up, as a
// real provider does. A call repeated with the same Idempotency-Key
// starts nothing more. Each instance runs in a process group of its own,
// stopped with the demo.
type provider struct {
	run    string
	secret string
	log    *slog.Logger

	mu      sync.Mutex // guards the following fields
	procs   []*os.Process
	keys    []string // the latest Idempotency-Keys seen, oldest first
	stopped bool
}

// scaleCall is the part of Aperio's scaling call the demo reads.
type scaleCall struct {
	Hostname string `json:"hostname"`
	Reason   string `json:"reason"`
	Current  int    `json:"current"`
	Desired  int    `json:"desired"`
}

func (p *provider) serveScale(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get("Authorization")
	if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+p.secret)) != 1 {
		http.Error(w, "missing or wrong bearer secret", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxScaleBody+1))
	if err != nil || len(body) > maxScaleBody {
		http.Error(w, "body unreadable or larger than 4 KiB", http.StatusBadRequest)
		return
	}
	var c scaleCall
	if err := json.Unmarshal(body, &c); err != nil || c.Current < 0 || c.Desired < 0 {
		http.Error(w, "body is not a scaling call", http.StatusBadRequest)
		return
	}
	started, err := p.scale(r.Header.Get("Idempotency-Key"), c)
	if err != nil {
		p.log.Error("provider: could not start an instance", logkey.Err, err)
		http.Error(w, "could not start an instance: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]int{"started": started}, false)
}

// scale starts the instances call c is missing, unless key was seen.
func (p *provider) scale(key string, c scaleCall) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return 0, fmt.Errorf("the demo is stopping")
	}
	if key != "" {
		for _, k := range p.keys {
			if k == key {
				return 0, nil
			}
		}
		p.keys = append(p.keys, key)
		if len(p.keys) > maxRememberedKeys {
			p.keys = p.keys[1:]
		}
	}
	n := min(c.Desired-c.Current, maxProviderInstances-len(p.procs))
	for i := 0; i < n; i++ {
		cmd := exec.Command(p.run)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		began := time.Now()
		if err := cmd.Start(); err != nil {
			return i, err
		}
		p.procs = append(p.procs, cmd.Process)
		go cmd.Wait() // reaped when it ends; stop kills its group
		p.log.Info(fmt.Sprintf("provider: %s for %s (%d → %d instances): started an instance", c.Reason, c.Hostname, c.Current, c.Desired),
			logkey.PID, cmd.Process.Pid, logkey.DurationMS, time.Since(began).Milliseconds())
	}
	return max(n, 0), nil
}

// stop ends every instance started (SIGTERM to its process group: the
// backend and the client it runs) and refuses calls from then on.
func (p *provider) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for _, proc := range p.procs {
		_ = syscall.Kill(-proc.Pid, syscall.SIGTERM)
	}
}
