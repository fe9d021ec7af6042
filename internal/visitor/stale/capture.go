package stale

import (
	"net/http"
	"strconv"
	"time"
)

// Capture collects one response's body on its way to the visitor and
// stores it when finished complete. It is not safe for concurrent use:
// one goroutine writes and then finishes. It holds no lock and touches no
// shared state until Finish, so teeing the body costs a copy and nothing
// else.
//
// A nil *Capture is valid: Write discards and Finish does nothing, so a
// caller may use (*Cache).Capture's result without checking it.
type Capture struct {
	c     *Cache
	e     *entry // complete but for body and size
	body  []byte
	fixed int64 // e's bytes other than the body
	limit int   // most body bytes kept; one more aborts
	want  int64 // declared Content-Length, or -1
	state captureState
}

type captureState uint8

const (
	capturing captureState = iota
	aborted                // the body outgrew limit; already counted
	finished
)

// Capture decides whether the response resp to req may be stored and, if
// so, returns a *Capture for its body; otherwise nil. It does no I/O.
// req must be the visitor's request (its method, Host, URL and headers are
// read; credentials and Vary decide) and resp the response being relayed
// (status and header are read and the header copied, so the caller may
// change resp.Header afterwards; the body is not touched).
//
// A response is stored only if all of these hold:
//   - req is a GET without Cookie, and without Cache-Control: no-store;
//   - the status is 200, 203, 301, 404 or 410 (see storableStatus);
//   - resp has no Set-Cookie, no Vary: *, and no Cache-Control directive
//     that forbids serving it stale (see directives.forbidsStale);
//   - if req carries Authorization, resp says Cache-Control: public
//     (RFC 9111 §3.5);
//   - it fits in MaxBytes/8, headers included (a larger Content-Length is
//     refused here, a longer body when written).
//
// Lookup compares the request headers named by Vary with their values
// here, so give Capture and Lookup the request in the same state: both
// before or both after the proxy rewrites its headers.
//
// When a credential-free request gets a response that forbids storing,
// the stored copies of that key are dropped: the origin's newest word about
// the resource wins over an older copy.
func (c *Cache) Capture(req *http.Request, resp *http.Response) *Capture {
	if !c.enabled() {
		return nil
	}
	if req.Method != http.MethodGet || !storableStatus(resp.StatusCode) ||
		len(req.Header["Cookie"]) > 0 || len(resp.Header["Set-Cookie"]) > 0 ||
		parseCacheControl(req.Header["Cache-Control"]).noStore {
		c.rejected.Add(1)
		return nil
	}
	credentialed := len(req.Header["Authorization"]) > 0
	d := parseCacheControl(resp.Header["Cache-Control"])
	vary, ok := variedFields(resp.Header["Vary"], req.Header)
	if !ok || d.forbidsStale() {
		// A response to a request with credentials speaks for that
		// requester only; it must not drop the copy others get.
		if !credentialed {
			c.invalidate(KeyOf(req))
		}
		c.rejected.Add(1)
		return nil
	}
	if credentialed && !d.public {
		c.rejected.Add(1)
		return nil
	}

	now := c.now()
	e := &entry{
		key:        KeyOf(req).clone(),
		vary:       vary,
		status:     resp.StatusCode,
		header:     storedHeader(resp.Header, &d),
		storedAt:   now,
		initialAge: parseAge(resp.Header["Age"]),
		expires:    now.Add(c.maxStale),
	}
	if limit, ok := d.staleLimit(); ok {
		// stale-if-error counts from when the response was generated,
		// which is initialAge before it reached us.
		e.expires = minTime(e.expires, now.Add(limit-e.initialAge))
		if e.expires.Before(now) {
			c.rejected.Add(1) // too old to serve already
			return nil
		}
	}
	// The exact Content-Length replaces the relayed one when finished;
	// charge for it now (at most 20 digits).
	fixed := entryOverhead + e.key.size() + headerSize(e.header) + variedSize(vary) +
		fieldOverhead + int64(len("Content-Length")) + valueOverhead + 20
	if fixed >= c.maxEntryBytes || resp.ContentLength > c.maxEntryBytes-fixed {
		c.rejected.Add(1)
		return nil
	}
	rec := &Capture{c: c, e: e, fixed: fixed, limit: int(c.maxEntryBytes - fixed), want: resp.ContentLength}
	if rec.want > 0 {
		rec.body = make([]byte, 0, rec.want)
	}
	return rec
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Write appends p to the recorded body. It always reports len(p) and no
// error, so it can sit beside the visitor in an io.MultiWriter without
// ever cutting the visitor's copy short. Once the body exceeds the
// per-entry bound, the buffer is released, later writes are dropped and
// the response will not be stored.
func (rec *Capture) Write(p []byte) (int, error) {
	if rec == nil || rec.state != capturing {
		return len(p), nil
	}
	if len(p) > rec.limit-len(rec.body) {
		rec.body = nil
		rec.state = aborted
		rec.c.rejected.Add(1)
		return len(p), nil
	}
	if need := len(rec.body) + len(p); need > cap(rec.body) {
		// Grow as append would, but never past limit: an aborted
		// recording must not have held more than the bound.
		grown := make([]byte, len(rec.body), min(max(2*cap(rec.body), need, 512), rec.limit))
		copy(grown, rec.body)
		rec.body = grown
	}
	rec.body = append(rec.body, p...)
	return len(p), nil
}

// Finish ends the capture. With complete true, and the body intact (as
// long as its Content-Length, if one was declared, and within the bound),
// the response is stored, replacing the copy for the same key and
// variant; otherwise it is dropped. complete must be false when the
// visitor's copy did not end normally: the visitor left, the body read
// failed, or the caller cut it short. Only the first call counts. Finish
// takes the cache's lock briefly; the body is not copied under it.
func (rec *Capture) Finish(complete bool) {
	if rec == nil || rec.state == finished {
		return
	}
	was := rec.state
	rec.state = finished
	body := rec.body
	rec.body = nil
	c := rec.c
	switch {
	case was == aborted:
		return // counted as rejected when it overflowed
	case !complete || rec.want >= 0 && int64(len(body)) != rec.want:
		c.discarded.Add(1)
		return
	}
	// Growing by doubling can leave up to half the buffer unused; charge
	// for what is held, after trimming a waste worth a copy.
	if waste := cap(body) - len(body); waste > 4096 && waste > len(body)/8 {
		body = append(make([]byte, 0, len(body)), body...)
	}
	e := rec.e
	e.body = body
	e.header["Content-Length"] = []string{strconv.Itoa(len(body))}
	e.size = rec.fixed + int64(cap(body))
	c.insert(e)
}
