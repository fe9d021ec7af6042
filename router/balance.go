package router

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
)

// Weights a client service may announce; the server clamps others into
// this range and tells the client.
const (
	minWeight = 1
	maxWeight = 1000
)

// pickWeighted picks among cands by smooth weighted round-robin (the
// nginx algorithm): every eligible member's current weight grows by its
// weight, the largest is picked and loses the total. Over any window of
// total-weight picks each member is picked weight times, interleaved
// rather than in bursts. Members at their limit or refusing w sit the
// round out. It returns nil when none is eligible; the caller takes the
// permit. The lock is the pool's own and held for one pass over the
// members: about 20 ns uncontended for a handful of clients, paid only by
// pools with unequal weights.
func (p *pool) pickWeighted(cands []*service, w *waiter) *service {
	if len(cands) == 0 {
		return nil
	}
	tier := cands[0].priority.Load()
	ms := p.members.Load()
	p.wrrMu.Lock()
	defer p.wrrMu.Unlock()
	if p.wrrFor != ms {
		// The member list changed: start over (one allocation per change,
		// none per request).
		p.wrrFor, p.wrrCW = ms, make([]int64, len(*ms))
	}
	var total int64
	best := -1
	for i, s := range *ms {
		if !s.routable() || s.priority.Load() != tier || (w != nil && !w.accepts(s)) || !s.free() {
			continue
		}
		wt := s.weight.Load()
		p.wrrCW[i] += wt
		total += wt
		if best < 0 || p.wrrCW[i] > p.wrrCW[best] {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	p.wrrCW[best] -= total
	return (*ms)[best]
}

// clampWeight returns the weight a service announcing w balances with: 0
// (not announced) is 1, anything outside 1..1000 the nearest bound, and
// reports whether it had to clamp.
func clampWeight(w int) (int64, bool) {
	switch {
	case w == 0:
		return 1, false
	case w < minWeight:
		return minWeight, true
	case w > maxWeight:
		return maxWeight, true
	}
	return int64(w), false
}

// AffinityCookie is the cookie that sticks a visitor to a client instance
// under lb_strategy sticky.
const AffinityCookie = "aperio_affinity"

// affinityLen is the length of an affinity value: 16 bytes of HMAC in
// unpadded base64url. A cookie of any other length is ignored unread.
const affinityLen = 22

// affinityValue returns the aperio_affinity value of a client instance:
// an HMAC-SHA256 of the instance id under the router's key, cut to 128
// bits. Visitors cannot forge one for an instance they were never sent
// to, and the value does not reveal the instance id.
func affinityValue(key []byte, instance string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(instance))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// affinityCookieLine returns the Set-Cookie line that issues value over
// http: a session cookie for the whole hostname, unreadable by scripts
// (stickTo adds Secure over https).
func affinityCookieLine(value string) string {
	return AffinityCookie + "=" + value + "; Path=/; HttpOnly; SameSite=Lax"
}

// affinityFrom returns the visitor's aperio_affinity value, or "" when it
// sent none of the right length. It scans the Cookie lines in place rather
// than parsing every cookie, so a request pays no allocation; the lines
// are bounded by max_header_bytes.
func affinityFrom(h http.Header) string {
	for _, line := range h["Cookie"] {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			part = strings.TrimSpace(part)
			if v, ok := strings.CutPrefix(part, AffinityCookie+"="); ok {
				if len(v) == affinityLen {
					return v
				}
				return "" // oversized or truncated: ignored
			}
		}
	}
	return ""
}

// stickTo adds to resp the cookie that sticks the visitor to s, unless the
// visitor already sent it (had is the value it sent).
func stickTo(resp *http.Response, s *service, had string, secure bool) {
	if had == s.affinity {
		return
	}
	line := s.cookie
	if secure {
		line += "; Secure"
	}
	if resp.Header == nil {
		resp.Header = make(http.Header)
	}
	resp.Header["Set-Cookie"] = append(resp.Header["Set-Cookie"], line)
}
