package router

// Counters are the router's running figures for metrics and the admin
// API, as Router.Counters reads them: each an atomic load, so the figures
// are each exact but are not one consistent cut across them. The zero
// value is a router that has served nothing.
type Counters struct {
	// InFlight is the proxied requests holding a server-wide slot now
	// (max_concurrent_requests counts them).
	InFlight int64
	// Held is the requests held for a cold start now.
	Held int64
	// WebSocketsOpen is the WebSocket (and other upgraded) relays open or
	// being opened now; WebSocketsRefused counts the upgrades refused by
	// max_ws_connections since the router started.
	WebSocketsOpen, WebSocketsRefused int64
	// OutlierEjections counts the times a client service was ejected since
	// the router started (aperio_outlier_ejections_total).
	OutlierEjections int64
	// RateLimited counts the 429 answers since the router started, one
	// entry per kind of limit (x-aperio-limit's name), every kind present,
	// zeros included. An array, so that reading it allocates nothing.
	RateLimited [numLimitKinds]LimitCount
}

// LimitCount is the number of 429 answers of one kind of limit.
type LimitCount struct {
	// Kind is the limit's name in x-aperio-limit: "ip", "token-rate", ...
	Kind string
	// N counts its 429 answers since the router started.
	N int64
}

// Counters returns the router's running figures now. It takes no lock and
// allocates nothing; it is safe for concurrent use, and meant for the
// metrics callback and the admin API rather than the request path.
func (rt *Router) Counters() Counters {
	c := Counters{
		InFlight:          rt.limits.global.Load(),
		Held:              rt.held.Load(),
		WebSocketsOpen:    rt.limits.wsOpen.Load(),
		WebSocketsRefused: rt.limits.wsRefused.Load(),
		OutlierEjections:  rt.outliers.total.Load(),
	}
	for k := range numLimitKinds {
		c.RateLimited[k] = LimitCount{Kind: limitInfo[k].kind, N: rt.limits.limited[k].Load()}
	}
	return c
}
