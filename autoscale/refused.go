package autoscale

import (
	"errors"
	"strings"
	"sync"

	"github.com/aperio-dev/aperio/internal/outbound"
)

// maxRefusals bounds the refused declarations remembered at once, across
// every session: past it, a refusal still gets its notice and audit
// entry, but the list does not show it.
const maxRefusals = 4096

// maxErrorBytes bounds one remembered error text, as maxAuditErrBytes
// bounds it in the audit log.
const maxErrorBytes = maxAuditErrBytes

// boundedMap is a map safe for concurrent use whose size each set bounds.
// The zero value is ready.
type boundedMap[K comparable, V any] struct {
	mu sync.Mutex // guards m
	m  map[K]V
}

// set stores v under k, unless k is new and the map holds limit keys
// already: then v is dropped.
func (bm *boundedMap[K, V]) set(k K, v V, limit int) {
	bm.mu.Lock()
	defer bm.mu.Unlock()
	if bm.m == nil {
		bm.m = make(map[K]V)
	}
	if _, ok := bm.m[k]; !ok && len(bm.m) >= limit {
		return
	}
	bm.m[k] = v
}

// get returns the value of k, and whether there is one.
func (bm *boundedMap[K, V]) get(k K) (V, bool) {
	bm.mu.Lock()
	defer bm.mu.Unlock()
	v, ok := bm.m[k]
	return v, ok
}

// remove drops k.
func (bm *boundedMap[K, V]) remove(k K) {
	bm.mu.Lock()
	defer bm.mu.Unlock()
	delete(bm.m, k)
}

// filter returns a copy of the entries keep accepts, after dropping those
// drop accepts (either may be nil).
func (bm *boundedMap[K, V]) filter(drop, keep func(K, V) bool) map[K]V {
	bm.mu.Lock()
	defer bm.mu.Unlock()
	out := make(map[K]V)
	for k, v := range bm.m {
		switch {
		case drop != nil && drop(k, v):
			delete(bm.m, k)
		case keep != nil && keep(k, v):
			out[k] = v
		}
	}
	return out
}

// refusal is the latest declaration of a bind that a live session had
// refused, and why.
type refusal struct {
	session string
	decl    Declaration // as announced; List never shows its secret
	reason  string
}

// refusals remembers, per bind, the declaration a live session had refused
// by validateDeclaration, so that List shows why a bind a client declares
// is not armed (or keeps its older block) instead of leaving the client's
// operator to find out at the first visitor.
type refusals struct{ boundedMap[bindKey, refusal] }

// leave forgets the refusals of session, which ended.
func (rs *refusals) leave(session string) {
	rs.filter(func(_ bindKey, r refusal) bool { return r.session == session }, nil)
}

// of returns the refusals of orgID ("" means every organization).
func (rs *refusals) of(orgID string) map[bindKey]refusal {
	return rs.filter(nil, func(k bindKey, _ refusal) bool { return orgID == "" || k.org == orgID })
}

// URLChecker judges a URL against an outbound policy without I/O; a
// refusal is an error (*outbound.RefusedError for *outbound.Client). It must be
// safe for concurrent use.
type URLChecker interface {
	CheckURL(raw string) error
}

// validateDeclaration normalizes a's block and checks everything that does
// not depend on the controller's state: the block's rules, the hostname,
// and the hook URL against the server's outbound policy (Config.Policy),
// so that a URL every call would be refused is refused now, at
// declaration, rather than when the first visitor is held for it. A
// refused declaration is remembered for List until a valid one replaces
// it or its session ends.
func (c *Controller) validateDeclaration(a SessionDeclaration) (Declaration, error) {
	d, problems := c.checkBlock(a.Hostname, a.Block)
	k := bindKey{a.OrgID, a.Hostname, a.Path}
	if len(problems) > 0 {
		err := &DeclarationError{Hostname: a.Hostname, Problems: problems}
		if a.Hostname != "" && a.Session != "" {
			c.refused.set(k, refusal{session: a.Session, decl: a.Block, reason: truncate(strings.Join(problems, "; "))}, maxRefusals)
		}
		return Declaration{}, err
	}
	c.refused.remove(k)
	return d, nil
}

// checkBlock normalizes block, declared for hostname, and returns the
// problems of validateDeclaration: the block's rules, an empty hostname,
// and a hook URL the server's outbound policy (Config.Policy) refuses. It
// remembers nothing: a client's declaration and an operator's (Arm) are
// judged alike.
func (c *Controller) checkBlock(hostname string, block Declaration) (Declaration, []string) {
	d, problems := normalize(block)
	if hostname == "" {
		problems = append(problems, "hostname is empty")
	}
	if len(problems) == 0 && c.cfg.Policy != nil {
		if err := c.cfg.Policy.CheckURL(d.URL); err != nil {
			problems = append(problems, "url is refused by the server's outbound policy: "+fenceReason(err))
		}
	}
	return d, problems
}

// fenceReason is the reason of a fence refusal: the policy's phrase, which
// names no credential, without the package prefix the error carries.
func fenceReason(err error) string {
	var re *outbound.RefusedError
	if errors.As(err, &re) {
		return re.Reason
	}
	return err.Error()
}

// truncate bounds an error text at maxErrorBytes, keeping it valid UTF-8.
func truncate(s string) string {
	if len(s) <= maxErrorBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrorBytes], "") + "…"
}
