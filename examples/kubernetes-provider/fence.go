package main

import (
	"container/list"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// Fencing. Aperio sends each call made under a store lease with the
// lease's generation (body lease_generation, header
// Aperio-Lease-Generation). Generations only rise; a server that stalled
// past its lease can deliver its call after another server took the lease
// over and called. The provider keeps the highest generation it has
// admitted per hostname and path, and refuses a lower one with 409, so the
// stale call cannot undo the newer one's replicas. A call without a
// generation (Aperio could not reach its store) is not fenced.

// leaseGenerationHeader carries the lease generation.
const leaseGenerationHeader = "Aperio-Lease-Generation"

// maxFencedTargets bounds the hostnames and paths whose mark is kept; the
// least recently admitted is forgotten first.
const maxFencedTargets = 4096

// generationOf returns the call's lease generation (0: none), from the
// header and the body, which must agree.
func generationOf(r *http.Request, c hookCall) (int64, error) {
	var fromHeader int64
	if v := r.Header.Get(leaseGenerationHeader); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if len(v) > 19 || err != nil || n < 1 {
			return 0, fmt.Errorf("%s %.32q is not a positive integer", leaseGenerationHeader, v)
		}
		fromHeader = n
	}
	switch {
	case c.LeaseGeneration == nil:
		return fromHeader, nil
	case *c.LeaseGeneration < 1:
		return 0, fmt.Errorf("lease_generation %d is not positive", *c.LeaseGeneration)
	case fromHeader != 0 && fromHeader != *c.LeaseGeneration:
		return 0, fmt.Errorf("%s %d and lease_generation %d differ", leaseGenerationHeader, fromHeader, *c.LeaseGeneration)
	}
	return *c.LeaseGeneration, nil
}

// generations is the highest admitted generation per target, least
// recently admitted first. It is safe for concurrent use.
type generations struct {
	mu    sync.Mutex
	marks map[string]*list.Element // of *mark
	lru   *list.List
}

type mark struct {
	target string
	gen    int64
}

func newGenerations() *generations {
	return &generations{marks: make(map[string]*list.Element), lru: list.New()}
}

// admit reports whether generation gen (0: none) may act on target, and
// when it may, raises target's mark to it. The mark itself is admitted:
// it is the same lease's call again.
func (g *generations) admit(target string, gen int64) bool {
	if gen == 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.marks[target]; ok {
		m := e.Value.(*mark)
		if gen < m.gen {
			return false
		}
		m.gen = gen
		g.lru.MoveToBack(e)
		return true
	}
	if g.lru.Len() >= maxFencedTargets {
		oldest := g.lru.Front()
		delete(g.marks, oldest.Value.(*mark).target)
		g.lru.Remove(oldest)
	}
	g.marks[target] = g.lru.PushBack(&mark{target: target, gen: gen})
	return true
}
