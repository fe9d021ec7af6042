package debughttp

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/pprof"
	"runtime/metrics"
	"strconv"

	"github.com/aperio-dev/aperio/internal/recovery"
)

// MetricsPath is where the runtime's metrics are served as JSON.
const MetricsPath = "/debug/metrics"

// maxSymbolBody bounds the body of a POST to /debug/pprof/symbol (a list
// of program counters).
const maxSymbolBody = 64 << 10

// Handler serves, on its own mux (never http.DefaultServeMux):
//
//   - /debug/pprof/: net/http/pprof's index and every profile it names
//     (allocs, block, goroutine, heap, mutex, threadcreate), and
//     /debug/pprof/cmdline, profile, symbol and trace;
//   - MetricsPath: every metric of runtime/metrics, as one JSON object.
//
// GET and HEAD only (POST also on /debug/pprof/symbol, its body at most
// 64 KiB); a seconds parameter outside (0, MaxSeconds] is answered 400. A
// panic in a handler is logged with its stack and answered 500, and takes
// nothing else down. A nil log discards.
func Handler(log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc(MetricsPath, serveMetrics)
	return recovering{log: log, next: bounded{mux}}
}

// bounded refuses what the debug handlers should not be asked: other
// methods, large bodies, and a seconds parameter beyond MaxSeconds.
type bounded struct{ next http.Handler }

func (b bounded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
	case r.Method == http.MethodPost && r.URL.Path == "/debug/pprof/symbol":
		r.Body = http.MaxBytesReader(w, r.Body, maxSymbolBody)
	default:
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "debug: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// pprof reads the first value of seconds; trace takes fractions.
	if v, ok := r.URL.Query()["seconds"]; ok {
		f, err := strconv.ParseFloat(v[0], 64)
		if err != nil || !(f > 0 && f <= MaxSeconds) {
			http.Error(w, "debug: seconds must be a number in (0, "+strconv.Itoa(MaxSeconds)+"]", http.StatusBadRequest)
			return
		}
	}
	b.next.ServeHTTP(w, r)
}

// recovering answers 500 for a handler that panicked, after
// recovery.Recover has logged and counted it.
type recovering struct {
	log  *slog.Logger
	next http.Handler
}

func (h recovering) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	finished := false
	defer func() {
		if !finished {
			http.Error(w, "debug: internal error", http.StatusInternalServerError)
		}
	}()
	defer recovery.Recover(h.log, "debug handler")
	h.next.ServeHTTP(w, r)
	finished = true
}

// histogram summarizes a runtime/metrics histogram: how many samples, and
// the upper bound of the bucket that holds each quantile (the lower bound
// where the upper is infinite, which JSON cannot carry).
type histogram struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

func summarize(h *metrics.Float64Histogram) histogram {
	var out histogram
	for _, c := range h.Counts {
		out.Count += c
	}
	if out.Count == 0 {
		return out
	}
	bound := func(i int) float64 {
		if hi := h.Buckets[i+1]; !math.IsInf(hi, 0) {
			return hi
		}
		if lo := h.Buckets[i]; !math.IsInf(lo, 0) {
			return lo
		}
		return 0
	}
	quantile := func(q float64) float64 {
		rank := uint64(math.Ceil(q * float64(out.Count)))
		var seen uint64
		for i, c := range h.Counts {
			seen += c
			if seen >= rank && c > 0 {
				return bound(i)
			}
		}
		return 0
	}
	out.P50, out.P90, out.P99, out.Max = quantile(0.5), quantile(0.9), quantile(0.99), quantile(1)
	return out
}

// serveMetrics answers every runtime/metrics metric as one JSON object,
// by name: counters and gauges as numbers, histograms summarized.
func serveMetrics(w http.ResponseWriter, _ *http.Request) {
	descs := metrics.All()
	samples := make([]metrics.Sample, len(descs))
	for i, d := range descs {
		samples[i].Name = d.Name
	}
	metrics.Read(samples)
	out := make(map[string]any, len(samples))
	for _, s := range samples {
		switch s.Value.Kind() {
		case metrics.KindUint64:
			out[s.Name] = s.Value.Uint64()
		case metrics.KindFloat64:
			if f := s.Value.Float64(); !math.IsInf(f, 0) && !math.IsNaN(f) {
				out[s.Name] = f
			}
		case metrics.KindFloat64Histogram:
			out[s.Name] = summarize(s.Value.Float64Histogram())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out) // an error is the client gone mid-answer: nothing to tell it
}
