package admin

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/store"
)

// Traffic is what GET /stats reads: the request windows per hostname
// (*telemetry.Stats) and the requests waiting now. Both methods are called
// from request goroutines and must be safe for concurrent use; keep is
// quick and may be called for every hostname.
type Traffic interface {
	// Read returns the windows of the hostnames keep accepts.
	Read(keep func(hostname string) bool) telemetry.StatsReading
	// Held returns the requests held for a cold start or queued for a
	// permit now, on binds whose hostname keep accepts.
	Held(keep func(hostname string) bool) int
}

// Stream is the live event stream GET /stream follows (*telemetry.Hub).
// Subscribe must be safe for concurrent use; its errors
// telemetry.ErrTooManySubscribers and ErrHubClosed answer 503.
type Stream interface {
	Subscribe(f telemetry.StreamFilter) (*telemetry.Subscription, error)
}

// The stream's defaults.
const (
	// DefaultStreamHeartbeat is the interval of the stream's comment
	// lines, which keep proxies from closing a quiet stream.
	DefaultStreamHeartbeat = 15 * time.Second
	// maxStreamBatch bounds the events written between two flushes.
	maxStreamBatch = 64
	// maxTypeParam bounds ?type=.
	maxTypeParam = 64
)

// queryHostname returns the ?hostname= filter of r, lowercased: "" for
// none, a 400 for one that is no hostname.
func queryHostname(r *http.Request) (string, error) {
	h := r.URL.Query().Get("hostname")
	if h == "" {
		return "", nil
	}
	if len(h) > store.MaxAuditQueryField {
		return "", errorf(http.StatusBadRequest, "hostname: %d bytes, at most %d", len(h), store.MaxAuditQueryField)
	}
	h = strings.ToLower(h)
	if err := hostname.Validate(h); err != nil {
		return "", errorf(http.StatusBadRequest, "hostname %q: %v", h, err)
	}
	if strings.HasPrefix(h, "*") {
		return "", errorf(http.StatusBadRequest, "hostname %q: name one hostname, not a wildcard", h)
	}
	return h, nil
}

// visible reports whether organization orgID sees traffic of host: with
// patterns, when one of them covers host; the default organization
// without patterns, when no other organization's pattern does (as check
// decides for naming it). The figures past the hostname bound and of
// unrouted requests ("__other", "__unrouted") mix organizations: only the
// master token sees them. It allocates nothing.
func (o ownership) visible(orgID, host string) bool {
	if strings.HasPrefix(host, "__") {
		return false
	}
	switch {
	case o.counts[orgID] > 0:
		return o.owns(orgID, host)
	case orgID != "" && orgID == o.defaultOrg:
		_, _, taken := o.owners.Overlap(host)
		return !taken
	}
	return false
}

// clientVisible reports whether c sees client ci, as GET /clients does.
func clientVisible(c caller, own ownership, ci ClientInfo) bool {
	return c.sees(ci.OrgID) || own.ownsAny(c.scope(), ci.Hostnames)
}

func (a *API) stats(w http.ResponseWriter, r *http.Request, c caller) error {
	host, err := queryHostname(r)
	if err != nil {
		return err
	}
	var own ownership
	if !c.master {
		if own, err = a.ownership(r.Context()); err != nil {
			return err
		}
	}
	scope := c.scope()
	keep := func(h string) bool {
		return (host == "" || h == host) && (c.master || own.visible(scope, h))
	}
	out := apitype.Stats{At: a.now().UTC(), Hosts: []apitype.HostStats{}}
	if a.traffic != nil {
		rd := a.traffic.Read(keep)
		out.At, out.Hosts, out.ScalingEvents1h = rd.At.UTC(), rd.Hosts, rd.ScalingEvents1h
		out.Held = a.traffic.Held(keep)
	}
	hosts := map[string]bool{}
	for _, ci := range a.clients.Clients() {
		if !clientVisible(c, own, ci) || host != "" && !slices.Contains(ci.Hostnames, host) {
			continue
		}
		out.Clients++
		for _, h := range ci.Hostnames {
			if host == "" || h == host {
				hosts[h] = true
			}
		}
	}
	out.Hostnames = len(hosts)
	a.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// streamFilter parses the ?type= and ?hostname= of a stream request.
func streamFilter(r *http.Request) (telemetry.StreamFilter, error) {
	var f telemetry.StreamFilter
	if q := r.URL.Query()["type"]; len(q) > 0 {
		raw := strings.Join(q, ",")
		if len(raw) > maxTypeParam {
			return f, errorf(http.StatusBadRequest, "type: %d bytes, at most %d", len(raw), maxTypeParam)
		}
		for _, t := range strings.Split(raw, ",") {
			if !slices.Contains(apitype.StreamTypes(), t) {
				return f, errorf(http.StatusBadRequest, "type %q is not one of %s", t, strings.Join(apitype.StreamTypes(), ", "))
			}
			if !slices.Contains(f.Types, t) {
				f.Types = append(f.Types, t)
			}
		}
	}
	var err error
	f.Hostname, err = queryHostname(r)
	return f, err
}

func (a *API) streamEvents(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.stream == nil {
		return errorf(http.StatusNotFound, "the live stream is off on this server")
	}
	f, err := streamFilter(r)
	if err != nil {
		return err
	}
	// The caller's scope is judged on the publisher's goroutine against
	// an ownership snapshot, refreshed at each heartbeat, so that the
	// request path never waits for the store.
	var own atomic.Pointer[ownership]
	if !c.master {
		o, err := a.ownership(r.Context())
		if err != nil {
			return err
		}
		own.Store(&o)
		scope := c.scope()
		f.Allow = func(e *telemetry.StreamEvent) bool {
			o := own.Load()
			if e.Type == apitype.StreamClient {
				return e.OrgID == scope || o.ownsAny(scope, e.Hostnames)
			}
			return o.visible(scope, e.Hostname)
		}
	}
	f.Holder = telemetry.StreamHolder{Master: c.master, Credential: c.actor().String(), OrgID: c.scope()}
	sub, err := a.stream.Subscribe(f)
	switch {
	case errors.Is(err, telemetry.ErrTooManySubscribers):
		return errorf(http.StatusServiceUnavailable, "too many live stream subscribers (max_stream_subscribers): try again later")
	case errors.Is(err, telemetry.ErrCredentialSubscribers):
		return errorf(http.StatusServiceUnavailable, "this credential already follows as many live streams as one key or login may (%d): close one first", telemetry.DefaultMaxStreamsPerCredential)
	case errors.Is(err, telemetry.ErrOrgSubscribers):
		return errorf(http.StatusServiceUnavailable, "organization %s already follows as many live streams as one organization may (a quarter of max_stream_subscribers): close one first", c.scope())
	case errors.Is(err, telemetry.ErrHubClosed):
		return errorf(http.StatusServiceUnavailable, "the server is shutting down")
	case err != nil:
		return err
	}
	defer sub.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // tells a proxy in front not to buffer
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: a.streamWrite}
	defer sw.rc.SetWriteDeadline(time.Time{}) // the connection may serve another request
	if sw.comment("stream open") != nil || sw.flush() != nil {
		return nil
	}
	beat := time.NewTicker(a.heartbeat)
	defer beat.Stop()
	pause := time.NewTimer(streamCoalesce)
	defer pause.Stop()
	for {
		var werr error
		select {
		case <-r.Context().Done():
			return nil
		case <-sub.Done():
			return nil
		case <-beat.C:
			// The credential is judged again: a deleted key or an
			// expired login session ends its stream within a heartbeat.
			if now, err := a.authenticate(r); err != nil || now.allow(roleViewer) != nil {
				return nil
			}
			werr = sw.comment("heartbeat")
			if !c.master {
				if o, err := a.ownership(r.Context()); err == nil {
					own.Store(&o)
				}
			}
		case e := <-sub.C():
			werr = sw.event(e.Type, e.Data)
			for n := 1; werr == nil && n < maxStreamBatch && len(sub.C()) > 0; n++ {
				e = <-sub.C()
				werr = sw.event(e.Type, e.Data)
			}
		case <-sub.AccessReady():
		}
		// Access events wait in the hub's ring rather than in sub.C():
		// they are read at each write, whatever woke the writer.
		sent := 0
		if werr == nil && sub.AccessPending() {
			sent, werr = sub.ReadAccess(maxStreamBatch, func(data []byte) error { return sw.event(apitype.StreamAccess, data) })
		}
		dropped, sampled := sub.TakeDropped(), sub.TakeSampled()
		if dropped+sampled > 0 && werr == nil {
			werr = sw.dropped(dropped+sampled, sampled)
		}
		if werr != nil || sw.flush() != nil {
			// The subscriber left or stalled past the write deadline;
			// nothing can be answered on a stream already open.
			return nil
		}
		// Events that come in the next streamCoalesce wait in the buffer
		// and the ring, and go out in one write: at thousands of requests
		// a second this is a wake-up and a write per interval rather than
		// per request. A person watching cannot tell; the buffer (256
		// events) and the ring (1024 requests) hold the interval's events,
		// and a backlog of a full batch is written without a pause.
		if len(sub.C()) >= maxStreamBatch || sent == maxStreamBatch {
			continue // a backlog goes out at once
		}
		pause.Reset(streamCoalesce)
		select {
		case <-r.Context().Done():
			return nil
		case <-sub.Done():
			return nil
		case <-pause.C:
		}
	}
}

// streamCoalesce is how long a stream waits after a write before it
// writes again.
const streamCoalesce = 10 * time.Millisecond

// sseWriter writes Server-Sent Events, each write under a deadline so that
// a subscriber that stopped reading cannot hold its goroutine.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
}

func (s *sseWriter) write() error {
	err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	_, err = s.w.Write(s.buf)
	s.buf = s.buf[:0]
	return err
}

func (s *sseWriter) event(typ string, data []byte) error {
	s.buf = append(s.buf, "event: "...)
	s.buf = append(s.buf, typ...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...) // JSON holds no raw newline
	s.buf = append(s.buf, "\n\n"...)
	return s.write()
}

func (s *sseWriter) comment(text string) error {
	s.buf = append(s.buf, ": "...)
	s.buf = append(s.buf, text...)
	s.buf = append(s.buf, "\n\n"...)
	return s.write()
}

func (s *sseWriter) dropped(n, sampled int64) error {
	s.buf = append(s.buf, "event: "+apitype.StreamDropped+"\ndata: {\"count\":"...)
	s.buf = strconv.AppendInt(s.buf, n, 10)
	s.buf = append(s.buf, ",\"sampled\":"...)
	s.buf = strconv.AppendInt(s.buf, sampled, 10)
	s.buf = append(s.buf, "}\n\n"...)
	return s.write()
}

func (s *sseWriter) flush() error {
	err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return s.rc.Flush()
}

func (a *API) verifyAudit(w http.ResponseWriter, r *http.Request, c caller) error {
	n, err := a.store.VerifyAudit(r.Context())
	out := apitype.AuditVerify{OK: err == nil, Entries: n}
	var broken *store.AuditChainError
	switch {
	case errors.As(err, &broken):
		// The chain spans every organization: a key learns where it
		// breaks, not what the broken entry says.
		out.Error = "audit chain broken at seq " + strconv.FormatInt(broken.Entry.Seq, 10)
		if c.master {
			out.Error = err.Error()
		}
	case err != nil:
		return err
	}
	a.writeJSON(w, r, http.StatusOK, out)
	return nil
}
