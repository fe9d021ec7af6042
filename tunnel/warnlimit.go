package tunnel

import (
	"log/slog"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// backendWarnEvery is the least time between two "backend unreachable"
// warnings of one service; the ones in between are counted.
const backendWarnEvery = 10 * time.Second

// headWarnEvery is the least time between two warnings of one session's
// oversized response heads for one service.
const headWarnEvery = 5 * time.Second

// maxWarnKeys bounds the services a warnLimiter remembers; the server
// names them, so their number is not ours to trust.
const maxWarnKeys = 1024

// warnLimiter logs at most one warning per key and interval, with the count
// of the ones it held back since the last. It is safe for concurrent use.
type warnLimiter struct {
	log   *slog.Logger
	msg   string
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex // guards the following fields
	keys map[string]warnState
}

type warnState struct {
	at         time.Time // when the last warning was logged
	suppressed int       // warnings held back since
}

func newWarnLimiter(log *slog.Logger, msg string, every time.Duration) *warnLimiter {
	return &warnLimiter{log: log, msg: msg, every: every, now: time.Now, keys: make(map[string]warnState)}
}

// warn logs err under key unless a warning of key was logged less than
// the interval ago.
func (w *warnLimiter) warn(key string, err error) {
	now := w.now()
	w.mu.Lock()
	st, ok := w.keys[key]
	if ok && now.Sub(st.at) < w.every {
		st.suppressed++
		w.keys[key] = st
		w.mu.Unlock()
		return
	}
	if !ok && len(w.keys) >= maxWarnKeys {
		clear(w.keys)
	}
	w.keys[key] = warnState{at: now}
	w.mu.Unlock()
	w.log.Warn(w.msg, logkey.Service, key, logkey.Err, err, logkey.Suppressed, st.suppressed)
}
