package main

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// Fencing (docs/autoscaling.md, "For provider authors"): every call Aperio
// makes under a store lease carries that lease's generation, in the body
// (lease_generation) and in the Aperio-Lease-Generation header. A server
// that stalled past its lease may still deliver its call after another
// server took the lease over and called; its generation is then lower than
// one already seen for the same hostname and path, and the call is
// refused with 409, so it cannot undo the newer decision.

const (
	// generationHeader carries the lease generation.
	generationHeader = "Aperio-Lease-Generation"
	// maxTargets bounds the targets whose highest generation is kept;
	// the oldest is forgotten first.
	maxTargets = 4096
	// maxGenerationBytes bounds the header's value (an int64 has 19
	// digits).
	maxGenerationBytes = 19
)

// errGenerationMismatch is a header and a body that name different
// generations.
var errGenerationMismatch = errors.New("Aperio-Lease-Generation and lease_generation differ")

// callGeneration returns the call's lease generation, 0 when it carries
// none (a call Aperio made without a lease). The header and the body must
// agree when both are present; a value must be a positive integer.
func callGeneration(r *http.Request, body *int64) (int64, error) {
	var gen int64
	if h := r.Header.Get(generationHeader); h != "" {
		if len(h) > maxGenerationBytes {
			return 0, fmt.Errorf("%s is too long", generationHeader)
		}
		g, err := strconv.ParseInt(h, 10, 64)
		if err != nil || g <= 0 {
			return 0, fmt.Errorf("%s %q is not a positive integer", generationHeader, h)
		}
		gen = g
	}
	if body != nil {
		if *body <= 0 {
			return 0, fmt.Errorf("lease_generation %d is not positive", *body)
		}
		if gen != 0 && gen != *body {
			return 0, errGenerationMismatch
		}
		gen = *body
	}
	return gen, nil
}

// fence keeps the highest lease generation seen per target. It is safe
// for concurrent use.
type fence struct {
	mu      sync.Mutex
	highest map[string]int64
	order   []string // targets, oldest first
}

func newFence() *fence { return &fence{highest: make(map[string]int64)} }

// admit reports whether a call with generation gen (0: none) may act on
// target, and raises target's mark to gen. A generation equal to the mark
// is admitted: it is the same lease's call again.
func (f *fence) admit(target string, gen int64) bool {
	if gen == 0 {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	high, ok := f.highest[target]
	if gen < high {
		return false
	}
	if !ok {
		f.order = append(f.order, target)
		if len(f.order) > maxTargets {
			delete(f.highest, f.order[0])
			f.order = f.order[1:]
		}
	}
	f.highest[target] = gen
	return true
}
