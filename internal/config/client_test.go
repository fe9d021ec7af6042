package config

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

const homeFile = "/home/u/.aperio.yaml"

// clientCase is one LoadClient input: the files, environment, flags and
// TARGET argument.
type clientCase struct {
	file   string // ./aperio.yaml; "" = none
	home   string // ~/.aperio.yaml; "" = none
	env    map[string]string
	flags  map[string]string
	target string
}

func (c clientCase) options() ClientOptions {
	files := map[string]string{}
	if c.file != "" {
		files[ClientFile] = c.file
	}
	if c.home != "" {
		files[homeFile] = c.home
	}
	return ClientOptions{
		HomeFile: homeFile,
		Flags:    c.flags,
		Target:   c.target,
		Env:      envOf(c.env),
		Hostname: func() (string, error) { return "host-1", nil },
		ReadFile: filesOf(files),
	}
}

// withBase adds what a client needs to validate (server, token, one
// service) to env, unless env already sets it.
func withBase(env map[string]string) map[string]string {
	out := map[string]string{
		"APERIO_SERVER_URL":   "https://tunnel.example.com",
		"APERIO_SERVER_TOKEN": "apr_x",
	}
	maps.Copy(out, env)
	return out
}

var clientLoadCases = []struct {
	name string
	in   clientCase
	want []string
}{
	{
		name: "defaults",
		in:   clientCase{env: withBase(map[string]string{"APERIO_TARGET": "3000", "APERIO_HOSTNAME": "app.example.com"})},
		want: []string{
			"server.url = https://tunnel.example.com  # env APERIO_SERVER_URL",
			"server.token = <set>  # env APERIO_SERVER_TOKEN",
			"server.api_key = <unset>  # default",
			"name = host-1  # default",
			"max_concurrent = 0  # default",
			"health.interval = 10s  # default",
			"health.timeout = 5s  # default",
			"health.threshold = 2  # default",
			"idle_timeout = 0s  # default",
			"drain_timeout = 30s  # default",
			"reload_drain = 30s  # default",
			"log_level = info  # default",
			"log_format = text  # default",
			"services[0].target = http://localhost:3000  # env APERIO_TARGET",
			"services[0].hostname = app.example.com  # env APERIO_HOSTNAME",
			`services[0].path = ""  # default`,
			"services[0].health.interval = 10s  # default",
		},
	},
	{
		name: "reload_drain from env",
		in:   clientCase{env: withBase(map[string]string{"APERIO_RELOAD_DRAIN": "2m", "APERIO_TARGET": "3000", "APERIO_HOSTNAME": "app.example.com"})},
		want: []string{"reload_drain = 2m  # env APERIO_RELOAD_DRAIN"},
	},
	{
		name: "debug_listen from env",
		in:   clientCase{env: withBase(map[string]string{"APERIO_DEBUG_LISTEN": "127.0.0.1:6061", "APERIO_TARGET": "3000", "APERIO_HOSTNAME": "app.example.com"})},
		want: []string{"debug_listen = 127.0.0.1:6061  # env APERIO_DEBUG_LISTEN"},
	},
	{
		name: "debug_listen localhost from the file",
		in:   clientCase{env: withBase(map[string]string{"APERIO_TARGET": "3000", "APERIO_HOSTNAME": "app.example.com"}), file: "debug_listen: localhost:6061\n"},
		want: []string{"debug_listen = localhost:6061  # file:aperio.yaml:1"},
	},
	{
		name: "home file",
		in:   clientCase{env: withBase(nil), home: "drain_timeout: 1m\nservices: [{target: 3000, hostname: a.example.com}]\n"},
		want: []string{"drain_timeout = 1m  # file:/home/u/.aperio.yaml:1"},
	},
	{
		name: "env wins over home file",
		in:   clientCase{env: withBase(map[string]string{"APERIO_DRAIN_TIMEOUT": "2m"}), home: "drain_timeout: 1m\nservices: [{target: 3000, hostname: a.example.com}]\n"},
		want: []string{"drain_timeout = 2m  # env APERIO_DRAIN_TIMEOUT"},
	},
	{
		name: "file wins over env",
		in: clientCase{
			env:  withBase(map[string]string{"APERIO_DRAIN_TIMEOUT": "2m"}),
			home: "drain_timeout: 1m\n",
			file: "drain_timeout: 3m\nservices: [{target: 3000, hostname: a.example.com}]\n",
		},
		want: []string{"drain_timeout = 3m  # file:aperio.yaml:1"},
	},
	{
		name: "flag wins over file",
		in: clientCase{
			env:   withBase(map[string]string{"APERIO_DRAIN_TIMEOUT": "2m"}),
			home:  "drain_timeout: 1m\n",
			file:  "drain_timeout: 3m\nservices: [{target: 3000, hostname: a.example.com}]\n",
			flags: map[string]string{"drain_timeout": "4m"},
		},
		want: []string{"drain_timeout = 4m  # flag --drain-timeout"},
	},
	{
		name: "precedence is per field",
		in: clientCase{
			home:  "drain_timeout: 1m\nidle_timeout: 1m\nmax_concurrent: 1\npriority: 1\n",
			env:   withBase(map[string]string{"APERIO_DRAIN_TIMEOUT": "2m", "APERIO_IDLE_TIMEOUT": "2m", "APERIO_MAX_CONCURRENT": "2"}),
			file:  "drain_timeout: 3m\nidle_timeout: 3m\nservices: [{target: 3000, hostname: a.example.com}]\n",
			flags: map[string]string{"drain-timeout": "4m"},
		},
		want: []string{
			"drain_timeout = 4m  # flag --drain-timeout",
			"idle_timeout = 3m  # file:aperio.yaml:2",
			"max_concurrent = 2  # env APERIO_MAX_CONCURRENT",
			"priority = 1  # file:/home/u/.aperio.yaml:4",
		},
	},
	{
		name: "scaling block layered field by field",
		in: clientCase{
			file: "scaling:\n  url: https://api.provider.example/scale\n  min: 1\nservices: [{target: 3000, hostname: a.example.com}]\n",
			env: withBase(map[string]string{
				"APERIO_SCALING_MAX":    "5",
				"APERIO_SCALING_MIN":    "9",
				"APERIO_SCALING_SECRET": "s",
			}),
			home:  "scaling:\n  window: 20s\n  min: 7\n",
			flags: map[string]string{"scaling.cold_start": "30s"},
		},
		want: []string{
			"scaling.url = https://api.provider.example/scale  # file:aperio.yaml:2",
			"scaling.min = 1  # file:aperio.yaml:3",
			"scaling.max = 5  # env APERIO_SCALING_MAX",
			"scaling.secret = <set>  # env APERIO_SCALING_SECRET",
			"scaling.cold_start = 30s  # flag --scaling-cold-start",
			"scaling.window = 20s  # file:/home/u/.aperio.yaml:2",
			"scaling.cooldown = 1m  # default",
			"scaling.target_utilization = 0.8  # default",
		},
	},
	{
		name: "scaling block from the environment alone",
		in: clientCase{env: withBase(map[string]string{
			"APERIO_TARGET":      "3000",
			"APERIO_HOSTNAME":    "a.example.com",
			"APERIO_SCALING_URL": "https://api.provider.example/scale",
		})},
		want: []string{
			"scaling.url = https://api.provider.example/scale  # env APERIO_SCALING_URL",
			"scaling.max = 1  # default",
			"scaling.cold_start = 45s  # default",
		},
	},
	{
		name: "scaling max defaults to min",
		in: clientCase{env: withBase(map[string]string{
			"APERIO_TARGET":      "3000",
			"APERIO_HOSTNAME":    "a.example.com",
			"APERIO_SCALING_URL": "https://api.provider.example/scale",
			"APERIO_SCALING_MIN": "3",
		})},
		want: []string{
			"scaling.min = 3  # env APERIO_SCALING_MIN",
			"scaling.max = 3  # default",
		},
	},
	{
		name: "quick mode",
		in: clientCase{
			env:    withBase(nil),
			target: "3000",
			flags:  map[string]string{"hostname": "App.example.com,www.example.com", "path": "/api", "server-url": "wss://t.example.com"},
		},
		want: []string{
			"server.url = wss://t.example.com  # flag --server-url",
			"services[0].target = http://localhost:3000  # arg TARGET",
			"services[0].hostname = app.example.com,www.example.com  # flag --hostname",
			"services[0].path = /api  # flag --path",
		},
	},
	{
		name: "single-service env",
		in: clientCase{env: withBase(map[string]string{
			"APERIO_TARGET":        "localhost:8080",
			"APERIO_HOSTNAME":      "a.example.com, b.example.com",
			"APERIO_TARGET_HEALTH": "/healthz",
		})},
		want: []string{
			"services[0].target = http://localhost:8080  # env APERIO_TARGET",
			"services[0].hostname = a.example.com,b.example.com  # env APERIO_HOSTNAME",
			"services[0].health.endpoint = /healthz  # env APERIO_TARGET_HEALTH",
		},
	},
	{
		name: "env fills the fields of the file's service",
		in: clientCase{
			file: "services:\n  - target: h2c://localhost:50051\n",
			env: withBase(map[string]string{
				"APERIO_TARGET":        "9999",
				"APERIO_HOSTNAME":      "grpc.example.com",
				"APERIO_TARGET_HEALTH": "/ready",
			}),
		},
		want: []string{
			"services[0].target = h2c://localhost:50051  # file:aperio.yaml:2",
			"services[0].hostname = grpc.example.com  # env APERIO_HOSTNAME",
			"services[0].health.endpoint = /ready  # env APERIO_TARGET_HEALTH",
		},
	},
	{
		name: "flags win over the file's service",
		in: clientCase{
			file:   "services:\n  - target: 3000\n    hostname: a.example.com\n    path: /a\n",
			env:    withBase(map[string]string{"APERIO_HOSTNAME": "env.example.com"}),
			target: "https://localhost:8443",
			flags:  map[string]string{"--hostname": "flag.example.com"},
		},
		want: []string{
			"services[0].target = https://localhost:8443  # arg TARGET",
			"services[0].hostname = flag.example.com  # flag --hostname",
			"services[0].path = /a  # file:aperio.yaml:4",
		},
	},
	{
		name: "env wins over the home file's service",
		in: clientCase{
			home: "services:\n  - target: 3000\n    hostname: home.example.com\n",
			env:  withBase(map[string]string{"APERIO_TARGET": "4000"}),
		},
		want: []string{
			"services[0].target = http://localhost:4000  # env APERIO_TARGET",
			"services[0].hostname = home.example.com  # file:/home/u/.aperio.yaml:3",
		},
	},
	{
		name: "the file's services replace the home file's",
		in: clientCase{
			home: "services:\n  - {target: 1000, hostname: home.example.com}\n  - {target: 1001, hostname: home2.example.com}\n",
			file: "services:\n  - {target: 2000, hostname: file.example.com}\n",
			env:  withBase(nil),
		},
		want: []string{
			"services[0].target = http://localhost:2000  # file:aperio.yaml:2",
			"services[0].hostname = file.example.com  # file:aperio.yaml:2",
		},
	},
	{
		name: "top-level health is the default of every service",
		in: clientCase{
			file: `health:
  interval: 30s
  threshold: 3
services:
  - target: 3000
    hostname: [a.example.com, "*.b.example.com"]
    health: {endpoint: /healthz, interval: 5s}
    max_concurrent: 20
    resilience: true
  - target: http://localhost:3001
    hostname: c.example.com
    health:
      threshold: 1
`,
			env: withBase(map[string]string{"APERIO_HEALTH_TIMEOUT": "2s"}),
		},
		want: []string{
			"services[0].hostname = a.example.com,*.b.example.com  # file:aperio.yaml:6",
			"services[0].health.endpoint = /healthz  # file:aperio.yaml:7",
			"services[0].health.interval = 5s  # file:aperio.yaml:7",
			"services[0].health.timeout = 2s  # env APERIO_HEALTH_TIMEOUT",
			"services[0].health.threshold = 3  # file:aperio.yaml:3",
			"services[0].max_concurrent = 20  # file:aperio.yaml:8",
			"services[0].resilience = true  # file:aperio.yaml:9",
			"services[1].target = http://localhost:3001  # file:aperio.yaml:10",
			`services[1].health.endpoint = ""  # default`,
			"services[1].health.interval = 30s  # file:aperio.yaml:2",
			"services[1].health.threshold = 1  # file:aperio.yaml:13",
		},
	},
	{
		name: "allow_connect is per service and off by default",
		in: clientCase{
			file: "services:\n  - {target: 1, hostname: a.example.com, allow_connect: true}\n  - {target: 2, hostname: b.example.com}\n",
			env:  withBase(nil),
		},
		want: []string{
			"services[0].allow_connect = true  # file:aperio.yaml:2",
			"services[1].allow_connect = false  # default",
		},
	},
	{
		name: "api key alias",
		in:   clientCase{env: withBase(map[string]string{"APERIO_API_KEY": "apk_1", "APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"})},
		want: []string{"server.api_key = <set>  # env APERIO_API_KEY"},
	},
	{
		name: "api key canonical spelling wins over the alias",
		in:   clientCase{env: withBase(map[string]string{"APERIO_API_KEY": "apk_1", "APERIO_SERVER_API_KEY": "apk_2", "APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"})},
		want: []string{"server.api_key = <set>  # env APERIO_SERVER_API_KEY"},
	},
	{
		name: "name flag",
		in:   clientCase{env: withBase(map[string]string{"APERIO_NAME": "env-name", "APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"}), flags: map[string]string{"name": "web-1"}},
		want: []string{"name = web-1  # flag --name"},
	},
	{
		name: "lists",
		in: clientCase{
			file: "server:\n  urls:\n    - https://b.example.com\n    - wss://c.example.com\nservices: [{target: 1, hostname: a.example.com}]\n",
			env:  withBase(map[string]string{"APERIO_SERVER_URLS": "https://x.example.com"}),
		},
		want: []string{"server.urls = https://b.example.com,wss://c.example.com  # file:aperio.yaml:2"},
	},
	{
		name: "list env",
		in:   clientCase{env: withBase(map[string]string{"APERIO_SERVER_URLS": "https://x.example.com, https://y.example.com", "APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"})},
		want: []string{"server.urls = https://x.example.com,https://y.example.com  # env APERIO_SERVER_URLS"},
	},
	{
		name: "variables expand in every file",
		in: clientCase{
			file: "scaling:\n  url: https://${PROVIDER}/scale\n  secret: ${SCALE_SECRET}\nservices: [{target: '${APP_PORT:-3000}', hostname: a.example.com}]\n",
			home: "name: ${USER}-laptop\n",
			env:  withBase(map[string]string{"PROVIDER": "api.provider.example", "SCALE_SECRET": "x", "USER": "ann"}),
		},
		want: []string{
			"scaling.url = https://api.provider.example/scale  # file:aperio.yaml:2",
			"scaling.secret = <set>  # file:aperio.yaml:3",
			"services[0].target = http://localhost:3000  # file:aperio.yaml:4",
			"name = ann-laptop  # file:/home/u/.aperio.yaml:1",
		},
	},
}

func TestLoadClient(t *testing.T) {
	for _, tc := range clientLoadCases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, src, err := LoadClient(tc.in.options())
			if err != nil {
				t.Fatalf("LoadClient() error = %v, want nil", err)
			}
			lines := printedClient(t, cfg, src)
			for _, want := range tc.want {
				key, _, _ := strings.Cut(want, " = ")
				if got := lines[key]; got != want {
					t.Errorf("LoadClient() %s = %q, want %q", key, got, want)
				}
			}
		})
	}
}

func TestLoadClientValues(t *testing.T) {
	in := clientCase{
		file: `
server:
  url: https://tunnel.example.com
  token: apr_1
max_concurrent: 10
services:
  - target: 3000
    hostname: App.Example.com
    path: /api
    priority: 1
scaling:
  url: https://api.provider.example/apps/web/scale
  max: 8
`,
		env: map[string]string{"APERIO_SCALING_MAX": "2", "APERIO_SCALING_COOLDOWN": "90"},
	}
	got, _, err := LoadClient(in.options())
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	want := DefaultClient()
	want.ServerURL = "https://tunnel.example.com"
	want.Token = "apr_1"
	want.Name = "host-1"
	want.MaxConcurrent = 10
	svc := DefaultService()
	svc.Target = "http://localhost:3000"
	svc.Hostnames = []string{"app.example.com"}
	svc.Path = "/api"
	svc.Priority = 1
	svc.Health = want.Health
	svc.Concurrency = Concurrency{Mode: ConcurrencyFixed, Limit: 10, Why: "max_concurrent is set"}
	want.Services = []Service{svc}
	scaling := tunnel.DefaultScaling()
	scaling.URL = "https://api.provider.example/apps/web/scale"
	scaling.Max = 8
	scaling.Cooldown = 90 * time.Second
	want.Scaling = &scaling
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LoadClient() = %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(got.Scaling, want.Scaling) {
		t.Errorf("LoadClient().Scaling = %+v, want %+v", got.Scaling, want.Scaling)
	}
}

func TestLoadClientScalingAbsent(t *testing.T) {
	in := clientCase{
		file: "scaling:\nservices: [{target: 1, hostname: a.example.com}]\n",
		env:  withBase(nil),
	}
	got, _, err := LoadClient(in.options())
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	if got.Scaling != nil {
		t.Errorf("LoadClient().Scaling = %+v, want nil", got.Scaling)
	}
}

func TestLoadClientName(t *testing.T) {
	tests := []struct {
		name     string
		hostname func() (string, error)
		want     string
	}{
		{"from the machine", func() (string, error) { return "box", nil }, "box"},
		{"unknown machine name", func() (string, error) { return "", errors.New("no hostname") }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := clientCase{env: withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"})}.options()
			o.Hostname = tc.hostname
			got, _, err := LoadClient(o)
			if err != nil {
				t.Fatalf("LoadClient() error = %v", err)
			}
			if got.Name != tc.want {
				t.Errorf("LoadClient().Name = %q, want %q", got.Name, tc.want)
			}
		})
	}
}

func TestLoadClientConfigFile(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		mustExist bool
		want      []string
	}{
		{"explicit file", "/etc/aperio/client.yaml", true, nil},
		{"missing explicit file", "/etc/aperio/nope.yaml", true, []string{"config: /etc/aperio/nope.yaml: file does not exist"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := ClientOptions{
				File:          tc.file,
				FileMustExist: tc.mustExist,
				Env:           envOf(withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"})),
				ReadFile: filesOf(map[string]string{
					"/etc/aperio/client.yaml": "name: from-config\n",
					ClientFile:                "name: from-cwd\n",
				}),
			}
			got, _, err := LoadClient(o)
			diffLines(t, "LoadClient() errors", problems(t, err), tc.want)
			if tc.want == nil && got.Name != "from-config" {
				t.Errorf("LoadClient().Name = %q, want from-config", got.Name)
			}
		})
	}
}

var clientErrorCases = []struct {
	name string
	in   clientCase
	want []string
}{
	{
		name: "nothing configured",
		in:   clientCase{},
		want: []string{
			"config: server.url: required: set server.url in aperio.yaml, APERIO_SERVER_URL or --server-url",
			"config: server.token: required: set server.token in aperio.yaml, APERIO_SERVER_TOKEN or --server-token",
			"config: services: no service: declare services: or expose: in aperio.yaml, or give a TARGET (or APERIO_TARGET) and --hostname (or APERIO_HOSTNAME)",
		},
	},
	{
		name: "scaling max 0 below min",
		in: clientCase{
			env: withBase(nil),
			file: `services:
  - target: 3000
    hostname: app.example.com
scaling:
  url: https://api.provider.example/scale
  min: 3
  max: 0
`,
		},
		want: []string{"config: scaling.max (aperio.yaml:7): 0 is below scaling.min 3"},
	},
	{
		name: "scaling max below min",
		in: clientCase{
			env: withBase(map[string]string{"SCALE_SECRET": "s"}),
			file: `# aperio.yaml
services:
  - target: 3000
    hostname: app.example.com

# scale between 3 and 2 instances
scaling:
  url: https://api.provider.example/scale
  secret: ${SCALE_SECRET}
  min: 3

  max: 2
`,
		},
		want: []string{"config: scaling.max (aperio.yaml:12): 2 is below scaling.min 3"},
	},
	{
		name: "scaling ranges",
		in: clientCase{
			env: withBase(map[string]string{
				"APERIO_TARGET":                     "1",
				"APERIO_HOSTNAME":                   "a.example.com",
				"APERIO_SCALING_URL":                "ftp://provider.example",
				"APERIO_SCALING_TARGET_UTILIZATION": "1.5",
				"APERIO_SCALING_WINDOW":             "500ms",
				"APERIO_SCALING_COLD_START":         "10m",
			}),
			flags: map[string]string{"scaling-cooldown": "0.5", "scaling-min": "-1"},
		},
		want: []string{
			`config: scaling.url (env APERIO_SCALING_URL): "ftp://provider.example": scheme must be http or https`,
			"config: scaling.min (flag --scaling-min): must not be negative, got -1",
			"config: scaling.cold_start (env APERIO_SCALING_COLD_START): 10m is above the maximum of 5m",
			"config: scaling.target_utilization (env APERIO_SCALING_TARGET_UTILIZATION): 1.5 is outside (0, 1]",
			"config: scaling.window (env APERIO_SCALING_WINDOW): 500ms is below the minimum of 1s",
			"config: scaling.cooldown (flag --scaling-cooldown): 500ms is below the minimum of 1s",
		},
	},
	{
		name: "scaling url with credentials, long secret",
		in: clientCase{
			env: withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com",
				"APERIO_SCALING_SECRET": strings.Repeat("s", 4097)}),
			file: "scaling:\n  url: https://user:pw@provider.example/scale\n",
		},
		want: []string{
			"config: scaling.url (aperio.yaml:2): must not carry credentials: set scaling.secret instead",
			"config: scaling.secret (env APERIO_SCALING_SECRET): is longer than 4096 bytes",
		},
	},
	{
		name: "scaling without url",
		in: clientCase{
			env:  withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com", "APERIO_SCALING_MAX": "3"}),
			file: "scaling:\n  target_utilization: 0\n",
		},
		want: []string{
			"config: scaling.url: required when the scaling block is declared",
			"config: scaling.target_utilization (aperio.yaml:2): 0 is outside (0, 1]",
		},
	},
	{
		name: "bad services",
		in: clientCase{
			env: withBase(nil),
			file: `services:
  - target: 3000
    hostname: bad_host.example.com
    path: api
  - hostname: [ok.example.com, "app.*.example.com"]
  - target: ftp://files
  - target: 3001
    hostname: OK.example.com
`,
		},
		want: []string{
			`config: services[2].target (aperio.yaml:6): "ftp://files": scheme must be http, https, h2c or unix`,
			`config: services[0].hostname (aperio.yaml:3): "bad_host.example.com" is not a valid DNS name or *. wildcard`,
			`config: services[0].path (aperio.yaml:4): "api" does not start with /`,
			"config: services[1].target: required: the URL of the local app (a port, host:port or URL), or serve: a directory",
			`config: services[1].hostname (aperio.yaml:5): "app.*.example.com" is not a valid DNS name or *. wildcard`,
			"config: services[3].hostname (aperio.yaml:8): ok.example.com is already served by services[1]",
		},
	},
	{
		name: "unknown service key with did you mean",
		in: clientCase{
			env:  withBase(nil),
			file: "services:\n  - target: 3000\n    hostnme: a.example.com\n    health: {endpont: /x}\n",
		},
		want: []string{
			"config: services[0].hostnme (aperio.yaml:3): unknown key, did you mean hostname?",
			"config: services[0].health.endpont (aperio.yaml:4): unknown key, did you mean health.endpoint?",
		},
	},
	{
		name: "per-service key at the top level",
		in: clientCase{
			env:  withBase(nil),
			file: "target: 3000\nhostname: a.example.com\n",
		},
		want: []string{
			"config: target (aperio.yaml:1): unknown top-level key; target is a per-service setting, put it in an entry of services:",
			"config: hostname (aperio.yaml:2): unknown top-level key; hostname is a per-service setting, put it in an entry of services:",
			"config: services: no service: declare services: or expose: in aperio.yaml, or give a TARGET (or APERIO_TARGET) and --hostname (or APERIO_HOSTNAME)",
		},
	},
	{
		name: "hostile weight and lb_strategy",
		in: clientCase{
			env:  withBase(nil),
			file: "services:\n  - target: http://127.0.0.1:1\n    hostname: a.example.com\n    weight: 5000\n    lb_strategy: random\n  - target: http://127.0.0.1:2\n    hostname: b.example.com\n    weight: -1\n",
		},
		want: []string{
			"config: services[0].weight (aperio.yaml:4): must be within 1..1000, got 5000",
			`config: services[0].lb_strategy (aperio.yaml:5): "random" is not round-robin, least-inflight, primary-standby or sticky`,
			"config: services[1].weight (aperio.yaml:8): must be within 1..1000, got -1",
		},
	},
	{
		name: "server key in the client file",
		in: clientCase{
			env:  withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"}),
			file: "lb_strategy: round-robin\nscaling:\n  enabled: true\n",
		},
		want: []string{
			"config: lb_strategy (aperio.yaml:1): unknown top-level key; lb_strategy is a per-service setting, put it in an entry of services:",
			"config: scaling.enabled (aperio.yaml:3): unknown key",
		},
	},
	{
		name: "single-service settings with several services",
		in: clientCase{
			env:   withBase(map[string]string{"APERIO_HOSTNAME": "x.example.com", "APERIO_TARGET_HEALTH": "/h"}),
			flags: map[string]string{"path": "/p"},
			file:  "services:\n  - {target: 1, hostname: a.example.com}\n  - {target: 2, hostname: b.example.com}\n",
		},
		want: []string{
			"config: hostname (env APERIO_HOSTNAME): sets a field of the single service, but aperio.yaml declares 2 services: set it in one of them instead",
			"config: path (flag --path): sets a field of the single service, but aperio.yaml declares 2 services: set it in one of them instead",
			"config: target_health (env APERIO_TARGET_HEALTH): sets a field of the single service, but aperio.yaml declares 2 services: set it in one of them instead",
		},
	},
	{
		name: "TARGET and --target",
		in: clientCase{
			env:    withBase(map[string]string{"APERIO_HOSTNAME": "a.example.com"}),
			target: "3000",
			flags:  map[string]string{"target": "4000"},
		},
		want: []string{"config: services[0].target (arg TARGET): TARGET and --target are both set"},
	},
	{
		name: "bad TARGET",
		in: clientCase{
			env:    withBase(map[string]string{"APERIO_HOSTNAME": "a.example.com"}),
			target: "ftp://x",
		},
		want: []string{`config: services[0].target (arg TARGET): "ftp://x": scheme must be http, https, h2c or unix`},
	},
	{
		name: "bad TARGET port",
		in: clientCase{
			env:    withBase(map[string]string{"APERIO_HOSTNAME": "a.example.com"}),
			target: "localhost:http",
		},
		want: []string{`config: services[0].target (arg TARGET): "localhost:http" is not a port, host:port or URL`},
	},
	{
		name: "unknown flag",
		in: clientCase{
			env:   withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"}),
			flags: map[string]string{"server-ulr": "https://x", "frobnicate": "1"},
		},
		want: []string{
			"config: frobnicate (flag --frobnicate): unknown flag",
			"config: server-ulr (flag --server-ulr): unknown flag, did you mean --server-url?",
		},
	},
	{
		name: "malformed flag",
		in: clientCase{
			env:   withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"}),
			flags: map[string]string{"max-concurrent": "ten"},
		},
		want: []string{`config: max_concurrent (flag --max-concurrent): invalid integer "ten"`},
	},
	{
		name: "bad value in a shadowed home file",
		in: clientCase{
			env:  withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com", "APERIO_DRAIN_TIMEOUT": "1m"}),
			home: "drain_timeout: later\nservices:\n  - {target: 1, hostname: a.example.com, priority: high}\n",
			file: "services: [{target: 1, hostname: a.example.com}]\n",
		},
		want: []string{
			`config: drain_timeout (/home/u/.aperio.yaml:1): invalid duration "later" (want e.g. 45s, 15m, 2d, or a number of seconds)`,
			`config: services[0].priority (/home/u/.aperio.yaml:3): invalid integer "high"`,
		},
	},
	{
		name: "services is not a list",
		in: clientCase{
			env:  withBase(nil),
			file: "services:\n  target: 3000\n",
		},
		want: []string{"config: services (aperio.yaml:1): expected a list of services"},
	},
	{
		name: "service entry is not a mapping",
		in: clientCase{
			env:  withBase(nil),
			file: "services:\n  - http://localhost:3000\n",
		},
		want: []string{
			"config: services[0] (aperio.yaml:2): expected a mapping of service settings (target, hostname, ...)",
			"config: services[0].target: required: the URL of the local app (a port, host:port or URL), or serve: a directory",
		},
	},
	{
		name: "bad server urls",
		in: clientCase{
			env: withBase(map[string]string{
				"APERIO_SERVER_URL":  "tunnel.example.com",
				"APERIO_SERVER_URLS": "https://ok.example.com,ftp://b",
				"APERIO_TARGET":      "1",
				"APERIO_HOSTNAME":    "a.example.com",
			}),
		},
		want: []string{
			`config: server.url (env APERIO_SERVER_URL): "tunnel.example.com": scheme must be http, https, ws or wss`,
			`config: server.urls (env APERIO_SERVER_URLS): "ftp://b": scheme must be http, https, ws or wss`,
		},
	},
	{
		name: "top-level health problem reported once",
		in: clientCase{
			env:  withBase(map[string]string{"APERIO_HEALTH_INTERVAL": "0"}),
			file: "health: {threshold: 0}\nservices:\n  - {target: 1, hostname: a.example.com}\n  - {target: 2, hostname: b.example.com, health: {endpoint: healthz}}\n",
		},
		want: []string{
			"config: health.interval (env APERIO_HEALTH_INTERVAL): must be positive, got 0s",
			"config: health.threshold (aperio.yaml:1): must be at least 1, got 0",
			`config: services[1].health.endpoint (aperio.yaml:4): "healthz" does not start with /`,
		},
	},
	{
		name: "reload_drain out of bounds",
		in: clientCase{
			env:  withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"}),
			file: "reload_drain: 11m\n",
		},
		want: []string{"config: reload_drain (aperio.yaml:1): 11m is outside [0s, 10m]"},
	},
	{
		name: "negative reload_drain",
		in: clientCase{
			env: withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com", "APERIO_RELOAD_DRAIN": "-1s"}),
		},
		want: []string{`config: reload_drain (env APERIO_RELOAD_DRAIN): duration "-1s" is negative`},
	},
	{
		name: "debug_listen not loopback",
		in: clientCase{
			env: withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com", "APERIO_DEBUG_LISTEN": "0.0.0.0:6061"}),
		},
		want: []string{`config: debug_listen (env APERIO_DEBUG_LISTEN): 0.0.0.0 in "0.0.0.0:6061": debughttp: debug_listen must be a loopback address (127.0.0.1, ::1 or localhost)`},
	},
	{
		name: "debug_listen empty host",
		in: clientCase{
			env:  withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"}),
			file: "debug_listen: \":6061\"\n",
		},
		want: []string{`config: debug_listen (aperio.yaml:1): an empty host (every interface) in ":6061": debughttp: debug_listen must be a loopback address (127.0.0.1, ::1 or localhost)`},
	},
	{
		name: "debug_listen public address",
		in: clientCase{
			env:   withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"}),
			flags: map[string]string{"debug_listen": "203.0.113.9:6061"},
		},
		want: []string{`config: debug_listen (flag --debug-listen): 203.0.113.9 in "203.0.113.9:6061": debughttp: debug_listen must be a loopback address (127.0.0.1, ::1 or localhost)`},
	},
	{
		name: "negative counts",
		in: clientCase{
			env:   withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com", "APERIO_PRIORITY": "-1"}),
			flags: map[string]string{"max_concurrent": "-5"},
		},
		want: []string{
			"config: max_concurrent (flag --max-concurrent): must not be negative, got -5",
			"config: priority (env APERIO_PRIORITY): must not be negative, got -1",
		},
	},
}

func TestLoadClientErrors(t *testing.T) {
	for _, tc := range clientErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := LoadClient(tc.in.options())
			diffLines(t, "LoadClient() errors", problems(t, err), tc.want)
		})
	}
}

func TestClientValidate(t *testing.T) {
	valid := func() Client {
		c := DefaultClient()
		c.ServerURL = "https://tunnel.example.com"
		c.Token = "apr_x"
		c.Services = []Service{{Target: "http://localhost:3000", Hostnames: []string{"a.example.com"}, Health: c.Health}}
		return c
	}
	tests := []struct {
		name string
		cfg  func() Client
		want []string
	}{
		{"valid", valid, nil},
		{"default", DefaultClient, []string{
			"config: server.url: required: set server.url in aperio.yaml, APERIO_SERVER_URL or --server-url",
			"config: server.token: required: set server.token in aperio.yaml, APERIO_SERVER_TOKEN or --server-token",
			"config: services: no service: declare services: or expose: in aperio.yaml, or give a TARGET (or APERIO_TARGET) and --hostname (or APERIO_HOSTNAME)",
		}},
		{"valid scaling", func() Client {
			c := valid()
			s := tunnel.DefaultScaling()
			s.URL, s.Min, s.Max = "https://p.example/scale", 1, 1
			c.Scaling = &s
			return c
		}, nil},
		{"zero scaling", func() Client {
			c := valid()
			c.Scaling = &Scaling{URL: "https://p.example/scale"}
			return c
		}, []string{
			"config: scaling.target_utilization: 0 is outside (0, 1]",
			"config: scaling.window: 0s is below the minimum of 1s",
			"config: scaling.cooldown: 0s is below the minimum of 1s",
		}},
		{"service health zero", func() Client {
			c := valid()
			c.Services[0].Health = Health{}
			return c
		}, []string{
			"config: services[0].health.interval: must be positive, got 0s",
			"config: services[0].health.timeout: must be positive, got 0s",
			"config: services[0].health.threshold: must be at least 1, got 0",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			diffLines(t, "Validate()", problems(t, tc.cfg().Validate()), tc.want)
		})
	}
}

func TestClientKeys(t *testing.T) {
	byName := make(map[string]Key)
	for _, k := range ClientKeys() {
		byName[k.Name] = k
	}
	tests := []struct {
		name    string
		env     string
		flag    string
		aliases []string
		secret  bool
	}{
		{"server.url", "APERIO_SERVER_URL", "server-url", nil, false},
		{"server.urls", "APERIO_SERVER_URLS", "server-urls", nil, false},
		{"server.token", "APERIO_SERVER_TOKEN", "server-token", nil, true},
		{"server.api_key", "APERIO_SERVER_API_KEY", "server-api-key", []string{"APERIO_API_KEY"}, true},
		{"max_concurrent", "APERIO_MAX_CONCURRENT", "max-concurrent", nil, false},
		{"health.interval", "APERIO_HEALTH_INTERVAL", "health-interval", nil, false},
		{"idle_timeout", "APERIO_IDLE_TIMEOUT", "idle-timeout", nil, false},
		{"reload_drain", "APERIO_RELOAD_DRAIN", "reload-drain", nil, false},
		{"debug_listen", "APERIO_DEBUG_LISTEN", "debug-listen", nil, false},
		{"log_level", "APERIO_LOG_LEVEL", "log-level", []string{"LOG_LEVEL"}, false},
		{"target", "APERIO_TARGET", "target", nil, false},
		{"hostname", "APERIO_HOSTNAME", "hostname", nil, false},
		{"path", "APERIO_PATH", "path", nil, false},
		{"target_health", "APERIO_TARGET_HEALTH", "target-health", nil, false},
		{"scaling.url", "APERIO_SCALING_URL", "scaling-url", nil, false},
		{"scaling.secret", "APERIO_SCALING_SECRET", "scaling-secret", nil, true},
		{"scaling.cold_start", "APERIO_SCALING_COLD_START", "scaling-cold-start", nil, false},
		{"scaling.target_utilization", "APERIO_SCALING_TARGET_UTILIZATION", "scaling-target-utilization", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, ok := byName[tc.name]
			if !ok {
				t.Fatalf("ClientKeys() has no %s", tc.name)
			}
			if k.Env != tc.env || k.Flag != tc.flag || !slices.Equal(k.EnvAliases, tc.aliases) || k.Secret != tc.secret {
				t.Errorf("ClientKeys() %s = %+v, want Env %s, Flag %s, EnvAliases %v, Secret %v", tc.name, k, tc.env, tc.flag, tc.aliases, tc.secret)
			}
		})
	}
	if _, ok := byName["services"]; ok {
		t.Errorf("ClientKeys() lists services, want it file-only")
	}
}
