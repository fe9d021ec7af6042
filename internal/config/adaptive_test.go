package config

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const adaptiveBase = `
server: {url: https://tunnel.example.com, token: apr_1}
`

// TestConcurrencyResolution covers the order rule: the more specific
// setting wins, and between the client's max_concurrent and its adaptive
// block the higher-ranked surface wins; max_concurrent is otherwise the
// ceiling.
func TestConcurrencyResolution(t *testing.T) {
	cases := []struct {
		name  string
		in    clientCase
		want  []string // services[i].concurrency mode and limit, in order
		why   string   // substring of services[0]'s reason
		print string   // services[0].concurrency line, "" = unchecked
	}{
		{
			name: "nothing set announces no limit",
			in:   clientCase{file: adaptiveBase + "services: [{target: 1, hostname: a.example.com}]\n"},
			want: []string{"none 0"}, why: "no limit announced",
		},
		{
			name: "max_concurrent alone is fixed",
			in:   clientCase{file: adaptiveBase + "max_concurrent: 8\nservices: [{target: 1, hostname: a.example.com}]\n"},
			want: []string{"fixed 8"}, why: "max_concurrent is set",
		},
		{
			name:  "block with max_concurrent: aimd, max_concurrent is the ceiling",
			in:    clientCase{file: adaptiveBase + "max_concurrent: 8\nadaptive_concurrency: {max: 50}\nservices: [{target: 1, hostname: a.example.com}]\n"},
			want:  []string{"aimd 8"},
			why:   "ceiling max_concurrent",
			print: `services[0].concurrency = "aimd min 1 max 8"  # adaptive_concurrency is set; ceiling max_concurrent`,
		},
		{
			name: "switch alone enables aimd with the default ceiling",
			in:   clientCase{file: adaptiveBase + "services: [{target: 1, hostname: a.example.com}]\n", env: map[string]string{"APERIO_ADAPTIVE_CONCURRENCY": "1"}},
			want: []string{"aimd 0"}, why: "ceiling default 100",
		},
		{
			name: "load-signal without signals says it runs as aimd",
			in:   clientCase{file: adaptiveBase + "adaptive_concurrency: {mode: load-signal, signals: []}\nservices: [{target: 1, hostname: a.example.com}]\n"},
			want: []string{"load-signal 0"}, why: "no signals, so it runs as aimd",
		},
		{
			name: "block max without max_concurrent is the ceiling",
			in:   clientCase{file: adaptiveBase + "adaptive_concurrency: {mode: load-signal, max: 30}\nservices: [{target: 1, hostname: a.example.com}]\n"},
			want: []string{"load-signal 30"}, why: "ceiling adaptive_concurrency.max",
		},
		{
			name: "a flag max_concurrent pins over the file's block",
			in: clientCase{
				file:  adaptiveBase + "adaptive_concurrency: {mode: aimd}\nservices: [{target: 1, hostname: a.example.com}]\n",
				flags: map[string]string{"max-concurrent": "4"},
			},
			want: []string{"fixed 4"}, why: "surface above adaptive_concurrency",
		},
		{
			name: "a flag on the block beats the file's max_concurrent",
			in: clientCase{
				file:  adaptiveBase + "max_concurrent: 6\nservices: [{target: 1, hostname: a.example.com}]\n",
				flags: map[string]string{"adaptive-concurrency-mode": "aimd"},
			},
			want: []string{"aimd 6"}, why: "ceiling max_concurrent",
		},
		{
			name: "the environment's max_concurrent ranks below the file's block",
			in: clientCase{
				file: adaptiveBase + "adaptive_concurrency: true\nservices: [{target: 1, hostname: a.example.com}]\n",
				env:  map[string]string{"APERIO_MAX_CONCURRENT": "12"},
			},
			want: []string{"aimd 12"}, why: "adaptive_concurrency is set",
		},
		{
			name: "a service's max_concurrent is more specific than the client's block",
			in: clientCase{file: adaptiveBase + `adaptive_concurrency: {mode: aimd}
services:
  - {target: 1, hostname: a.example.com, max_concurrent: 3}
  - {target: 2, hostname: b.example.com}
`},
			want: []string{"fixed 3", "aimd 0"}, why: "more specific than adaptive_concurrency",
		},
		{
			name: "a service's block is more specific than the client's max_concurrent",
			in: clientCase{file: adaptiveBase + `max_concurrent: 9
services:
  - {target: 1, hostname: a.example.com, adaptive_concurrency: {min: 2}}
  - {target: 2, hostname: b.example.com}
`},
			want: []string{"aimd 9", "fixed 9"}, why: "services[0].adaptive_concurrency is set",
		},
		{
			name: "a service turns the client's block off",
			in: clientCase{file: adaptiveBase + `max_concurrent: 5
adaptive_concurrency: true
services:
  - {target: 1, hostname: a.example.com, adaptive_concurrency: false}
`},
			want: []string{"fixed 5"}, why: "services[0].adaptive_concurrency is off",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, src, err := LoadClient(c.in.options())
			if err != nil {
				t.Fatalf("LoadClient: %v", err)
			}
			var got []string
			for _, s := range cfg.Services {
				got = append(got, s.Concurrency.Mode+" "+strconv.Itoa(s.Concurrency.Limit))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("concurrency = %q, want %q", got, c.want)
			}
			if why := cfg.Services[0].Concurrency.Why; !strings.Contains(why, c.why) {
				t.Errorf("why = %q, want it to contain %q", why, c.why)
			}
			line := printedClient(t, cfg, src)["services[0].concurrency"]
			if line == "" || (c.print != "" && line != c.print) {
				t.Errorf("printed %q, want %q", line, c.print)
			}
		})
	}
}

// TestAdaptiveSpellings proves the block's three spellings and that a
// service's block starts from the client's, field by field.
func TestAdaptiveSpellings(t *testing.T) {
	in := clientCase{
		file: adaptiveBase + `adaptive_concurrency:
  mode: load-signal
  window: 20s
services:
  - target: 1
    hostname: a.example.com
    adaptive_concurrency: {mode: aimd, decrease_factor: 0.8}
`,
		env:   map[string]string{"APERIO_ADAPTIVE_CONCURRENCY_MIN_SAMPLES": "7", "APERIO_ADAPTIVE_CONCURRENCY_SIGNALS": "CPU,backend"},
		flags: map[string]string{"adaptive-concurrency-initial": "4"},
	}
	cfg, src, err := LoadClient(in.options())
	if err != nil {
		t.Fatalf("LoadClient: %v", err)
	}
	top := cfg.Adaptive
	if top == nil || top.Mode != "load-signal" || top.Window != 20*time.Second || top.MinSamples != 7 || top.Initial != 4 || !slices.Equal(top.Signals, []string{"cpu", "backend"}) {
		t.Fatalf("client block = %+v", top)
	}
	svc := cfg.Services[0].Adaptive
	if svc == nil || svc.Mode != "aimd" || svc.DecreaseFactor != 0.8 || svc.Window != 20*time.Second || svc.Initial != 4 || !svc.Enabled {
		t.Fatalf("service block = %+v, want aimd 0.8 with the client's window and initial", svc)
	}
	lines := printedClient(t, cfg, src)
	for _, want := range []string{
		"adaptive_concurrency.min_samples = 7  # env APERIO_ADAPTIVE_CONCURRENCY_MIN_SAMPLES",
		"adaptive_concurrency.initial = 4  # flag --adaptive-concurrency-initial",
		"services[0].adaptive_concurrency.mode = aimd  # file:aperio.yaml:9",
		"services[0].adaptive_concurrency.window = 20s  # file:aperio.yaml:5",
	} {
		key, _, _ := strings.Cut(want, " = ")
		if got := lines[key]; got != want {
			t.Errorf("printed %q, want %q", got, want)
		}
	}
}

func TestAdaptiveProblems(t *testing.T) {
	cases := []struct {
		name string
		file string
		env  map[string]string
		want string
	}{
		{"unknown mode", "adaptive_concurrency: {mode: fast}\n", nil, "adaptive_concurrency.mode"},
		{"max below min", "adaptive_concurrency: {min: 5, max: 2}\n", nil, "adaptive_concurrency.max (aperio.yaml:3): 2 is below adaptive_concurrency.min 5"},
		{"unknown signal", "adaptive_concurrency: {signals: [cpu, disk]}\n", nil, `unknown signal "disk"`},
		{"ratio out of range", "adaptive_concurrency: {scale_up_step_ratio: 2}\n", nil, "scale_up_step_ratio"},
		{"bad env", "", map[string]string{"APERIO_ADAPTIVE_CONCURRENCY_MIN": "x"}, "env APERIO_ADAPTIVE_CONCURRENCY_MIN"},
		{"service block", "services: [{target: 1, hostname: b.example.com, adaptive_concurrency: {min_samples: 0}}]\n", nil, "services[0].adaptive_concurrency.min_samples"},
		{"typo", "adaptive_concurrency: {decrease_factr: 0.5}\n", nil, "did you mean adaptive_concurrency.decrease_factor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := adaptiveBase + c.file
			if !strings.Contains(c.file, "services") {
				file += "services: [{target: 1, hostname: a.example.com}]\n"
			}
			_, _, err := LoadClient(clientCase{file: file, env: c.env}.options())
			msgs := problems(t, err)
			if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, c.want) }) {
				t.Errorf("problems = %q, want one containing %q", msgs, c.want)
			}
		})
	}
	// decrease_factor and increase_after_successes fall back at startup
	// with a warning instead of stopping it.
	_, _, err := LoadClient(clientCase{file: adaptiveBase + "adaptive_concurrency: {decrease_factor: 3, increase_after_successes: -2}\nservices: [{target: 1, hostname: a.example.com}]\n"}.options())
	if err != nil {
		t.Errorf("out-of-range decrease_factor: %v, want it accepted (falls back with a warning)", err)
	}
}

// TestAdaptiveFallbacks: an explicit 0 for increase_after_successes or
// decrease_factor (like any value out of range) is not taken as "the
// default": the service learns with 1 and 0.5, and ClientWarnings says so,
// naming the key of each block that wrote it.
func TestAdaptiveFallbacks(t *testing.T) {
	file := adaptiveBase + `adaptive_concurrency: {increase_after_successes: 0, decrease_factor: 0}
services:
  - {target: 1, hostname: a.example.com}
  - {target: 2, hostname: b.example.com, adaptive_concurrency: {increase_after_successes: 4, decrease_factor: 1.5}}
  - {target: 3, hostname: c.example.com, adaptive_concurrency: {increase_after_successes: 4, decrease_factor: 0.8}}
`
	cfg, _, err := LoadClient(clientCase{file: file}.options())
	if err != nil {
		t.Fatalf("LoadClient: %v", err)
	}
	want := []struct {
		streak int
		factor float64
	}{{1, 0.5}, {4, 0.5}, {4, 0.8}}
	for i, w := range want {
		a := cfg.Services[i].Concurrency.Adaptive
		if a.IncreaseAfterSuccesses != w.streak || a.DecreaseFactor != w.factor {
			t.Errorf("services[%d] learns with increase_after_successes %d, decrease_factor %g; want %d, %g",
				i, a.IncreaseAfterSuccesses, a.DecreaseFactor, w.streak, w.factor)
		}
	}
	got := ClientWarnings(cfg)
	wantWarnings := []string{
		"adaptive_concurrency.increase_after_successes: 0 is below 1, using 1",
		"adaptive_concurrency.decrease_factor: 0 is outside (0, 1], using 0.5",
		"services[1].adaptive_concurrency.decrease_factor: 1.5 is outside (0, 1], using 0.5",
	}
	if !slices.Equal(got, wantWarnings) {
		t.Errorf("ClientWarnings() = %q, want %q", got, wantWarnings)
	}
}
