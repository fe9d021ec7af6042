package router

import (
	"errors"
	"io"
	"sync/atomic"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
)

// Byte quotas as bytes flow. checkQuota admits or refuses a request as it
// starts; a request that then moves much (a long upload, a streamed
// response, a WebSocket) is charged as its bytes flow, one charge per copy
// chunk (usage.Counter.Charge: a few atomic adds, no lock, no
// allocation), and ended once its token's daily_max_bytes or its
// organization's monthly_max_bytes is reached and it would move more: an
// exchange that ends with the chunk that reaches the quota completes, one
// that has more to move is cut before the next chunk goes, so that it
// passes the quota by at most one chunk:
//
//   - an upload cut before the response head answers 429 token-quota or
//     org-quota, as a request refused at its start would;
//   - a response cut after its head went out is truncated: its copy stops
//     and the request's root aborts it (telemetry.Request.Aborted), which
//     closes the HTTP/1 connection or resets the HTTP/2 stream, so the
//     visitor never takes it for complete;
//   - an upgraded stream is closed both ways.
//
// Each cut is logged ("exchange cut at quota"), counted by the meter
// (usage.Meter.QuotaCuts, aperio_quota_cuts_total) and names its limit in
// the access log. Only counters with a quota (usage.Counter.Limited) are
// charged as bytes flow; the others are counted once, when the request
// ends, as before.

// errQuotaCut is what a request body's Read returns once its exchange
// crossed a quota: the tunnel stops sending it.
var errQuotaCut = errors.New("router: byte quota crossed")

// flowCounts are the visitor bytes of one exchange as respond reports
// them: in and out, those an upgraded stream relayed (the observed writer
// never sees them; the 101 head included), charged, those of all its
// bytes charged as they flowed (so not again when it ends), and cut, the
// quota that ended it (usage.Allowed: none).
type flowCounts struct {
	in, out               int64
	chargedIn, chargedOut int64
	cut                   usage.Verdict
}

// quotaRefusal is the refusal of an exchange cut by v before its answer
// started.
func quotaRefusal(v usage.Verdict) refusal {
	if v == usage.OrgQuota {
		return refuseWith(refusedOrgQuota)
	}
	return refuseWith(refusedTokenQuota)
}

// quotaCut records that an exchange for host was ended because c's quota
// v was crossed while it flowed: the meter counts it, the log says so.
func (rt *Router) quotaCut(c *usage.Counter, v usage.Verdict, host, what string) {
	c.Cut(v)
	rt.log.Info("exchange cut at quota", logkey.Hostname, host, logkey.Limit, v.String(), logkey.Reason, what)
}

// startCharging makes body charge c as the tunnel reads it, when c has a
// quota to cross.
func (b *countingBody) startCharging(c *usage.Counter) {
	if b != nil && c.Limited() {
		b.meter.Store(c)
	}
}

// quotaCut is the quota that cut b, usage.Allowed when none did (or b is
// nil).
func (b *countingBody) quotaCut() usage.Verdict {
	if b == nil {
		return usage.Allowed
	}
	return usage.Verdict(b.cut.Load())
}

// charge charges n bytes read from the visitor to b's meter, if any, and
// reports false when the quota was reached by earlier reads: then these
// bytes are more than it allows, the body is cut and they are dropped.
func (b *countingBody) charge(n int) bool {
	c := b.meter.Load()
	if c == nil {
		return true
	}
	if v := b.over.Load(); v != 0 {
		b.cut.CompareAndSwap(0, v)
		return false
	}
	b.charged.Add(int64(n))
	if v := c.Charge(int64(n), 0); v != usage.Allowed {
		b.over.CompareAndSwap(0, uint32(v))
	}
	return true
}

// quotaReader charges the bytes read through it to c, one direction of
// an upgraded stream (in: from the visitor); once the quota is reached
// and more bytes come, it records the verdict in cut, calls stop (which
// closes both ends) and fails the read without them. charged is read
// once the copy is over.
type quotaReader struct {
	r       io.Reader
	c       *usage.Counter
	in      bool
	charged int64
	over    usage.Verdict // the quota reached by the bytes so far
	cut     *atomic.Uint32
	stop    func()
}

func (q *quotaReader) Read(p []byte) (int, error) {
	n, err := q.r.Read(p)
	if n > 0 {
		if q.over != usage.Allowed {
			q.cut.CompareAndSwap(0, uint32(q.over))
			q.stop()
			return 0, errQuotaCut
		}
		q.charged += int64(n)
		in, out := int64(n), int64(0)
		if !q.in {
			in, out = 0, int64(n)
		}
		q.over = q.c.Charge(in, out)
	}
	return n, err
}
