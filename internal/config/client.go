package config

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/aperio-dev/aperio/internal/debughttp"
	"github.com/aperio-dev/aperio/tunnel"
)

// ClientFile is the file aperio-client reads from its working directory when
// --config names no other.
const ClientFile = "aperio.yaml"

// ClientHomeFile is the name of the client's per-user file in the home
// directory; cmd joins it to the home directory for ClientOptions.HomeFile.
const ClientHomeFile = ".aperio.yaml"

// DefaultClient returns the client configuration with every default of the
// contract and nothing else: no server, token or service, so it does not
// validate, and no Name, which LoadClient fills from the machine's hostname.
func DefaultClient() Client {
	return Client{
		Health: Health{
			Interval:  10 * time.Second,
			Timeout:   5 * time.Second,
			Threshold: 2,
			Type:      HealthHTTP,
			Success:   Success2xx,
		},
		IdleAction:   IdleActionExit,
		DrainTimeout: 30 * time.Second,
		ReloadDrain:  30 * time.Second,
		LogLevel:     DefaultLogLevel,
		LogFormat:    DefaultLogFormat,
		Transport:    DefaultTransport,
	}
}

// MaxReloadDrain bounds reload_drain: a removed service's requests may hold
// its drain no longer, whatever the setting says.
const MaxReloadDrain = 10 * time.Minute

// clientSettings is the client's table of top-level keys, in --print-config
// order; services, the single-service keys and scaling have their own.
func clientSettings() []setting[Client] {
	type C = Client
	return []setting[C]{
		stringSetting("server.url", "URL of the server (https://, wss://)", func(c *C) *string { return &c.ServerURL }),
		listSetting("server.urls", "more servers to hold tunnels to (comma list)", func(c *C) *[]string { return &c.ServerURLs }, nil),
		stringSetting("server.token", "client token (apr_...)", func(c *C) *string { return &c.Token }).secret(),
		enumSetting("server.transport", "how tunnel frames travel: websocket, or tcp (faster: no WebSocket framing)", func(c *C) *string { return &c.Transport }).oneOf(Transports),
		stringSetting("server.api_key", "admin key for the aperio-client api commands", func(c *C) *string { return &c.APIKey }).secret().alias("APERIO_API_KEY"),
		stringSetting("name", "name shown in the API (default: the machine's hostname)", func(c *C) *string { return &c.Name }),
		intSetting("max_concurrent", "concurrency limit of every service (0 = none announced)", func(c *C) *int { return &c.MaxConcurrent }),
		intSetting("priority", "tier of every service: 0 primary, >0 standby", func(c *C) *int { return &c.Priority }),
		stringSetting("health.endpoint", "path every service is probed on", func(c *C) *string { return &c.Health.Endpoint }),
		durationSetting("health.interval", "time between health probes", func(c *C) *time.Duration { return &c.Health.Interval }),
		durationSetting("health.timeout", "timeout of one health probe", func(c *C) *time.Duration { return &c.Health.Timeout }),
		intSetting("health.threshold", "failed probes before a service is unhealthy", func(c *C) *int { return &c.Health.Threshold }),
		enumSetting("health.type", "how every service is probed: http or grpc", func(c *C) *string { return &c.Health.Type }).oneOf(healthTypes),
		enumSetting("health.success", "statuses an http probe passes on: 2xx or 2xx-3xx", func(c *C) *string { return &c.Health.Success }).oneOf(healthSuccesses),
		durationSetting("idle_timeout", "retire after this long without a request (0 = never)", func(c *C) *time.Duration { return &c.IdleTimeout }),
		enumSetting("idle_action", "once idle_timeout retires the client: exit, or wait (drained and disconnected) for SIGTERM, as a Kubernetes pod must", func(c *C) *string { return &c.IdleAction }).oneOf(IdleActions),
		durationSetting("drain_timeout", "how long a graceful drain may take", func(c *C) *time.Duration { return &c.DrainTimeout }),
		durationSetting("reload_drain", "how long a service removed by a reload may finish its requests (at most 10m)", func(c *C) *time.Duration { return &c.ReloadDrain }),
		enumSetting("log_level", "debug, info, warn or error", func(c *C) *string { return &c.LogLevel }).oneOf(LogLevels).alias("LOG_LEVEL"),
		enumSetting("log_format", "text or json", func(c *C) *string { return &c.LogFormat }).oneOf(LogFormats),
		boolSetting("retry_forever", "keep retrying a server that refuses the tunnel for good (bad token, hostname not allowed) instead of exiting 1", func(c *C) *bool { return &c.RetryForever }),
		stringSetting("status_socket", "unix socket aperio-client status reads (default: one per process; off = none)", func(c *C) *string { return &c.StatusSocket }),
		stringSetting("debug_listen", "loopback host:port serving pprof and runtime metrics (127.0.0.1:6061); empty = none", func(c *C) *string { return &c.DebugListen }),
	}
}

// scalingSettings is the table of the client's scaling block.
func scalingSettings() []setting[Scaling] {
	type S = Scaling
	return []setting[S]{
		stringSetting("scaling.url", "endpoint the server calls to scale", func(c *S) *string { return &c.URL }),
		stringSetting("scaling.secret", "bearer token sent to scaling.url", func(c *S) *string { return &c.Secret }).secret(),
		intSetting("scaling.min", "lowest capacity asked for (0 = scale to zero)", func(c *S) *int { return &c.Min }),
		intSetting("scaling.max", "highest capacity asked for (default scaling.min, at least 1)", func(c *S) *int { return &c.Max }),
		durationSetting("scaling.cold_start", "how long a visitor may be held during a cold start", func(c *S) *time.Duration { return &c.ColdStart }),
		floatSetting("scaling.target_utilization", "utilization above which to scale out, in (0,1]", func(c *S) *float64 { return &c.TargetUtilization }),
		durationSetting("scaling.window", "how long utilization must stay high", func(c *S) *time.Duration { return &c.Window }),
		durationSetting("scaling.cooldown", "minimum gap between two scaling calls", func(c *S) *time.Duration { return &c.Cooldown }),
	}
}

// serviceSettings is the table of the keys of one entry of services:. They
// have no environment or flag spelling of their own; see singleSettings.
func serviceSettings() []setting[Service] {
	type S = Service
	tab := []setting[S]{
		stringSetting("name", "handle of the service in logs, status and the server's client list (a-z, 0-9, -; unique)", func(c *S) *string { return &c.Name }),
		scalarSetting("target", "URL of the local app", func(c *S) *string { return &c.Target }, normalizeTarget, identity),
		listSetting("hostname", "public hostnames", func(c *S) *[]string { return &c.Hostnames }, strings.ToLower),
		stringSetting("path", "prefix bind", func(c *S) *string { return &c.Path }),
		intSetting("max_concurrent", "concurrency limit", func(c *S) *int { return &c.MaxConcurrent }),
		intSetting("priority", "tier: 0 primary, >0 standby", func(c *S) *int { return &c.Priority }),
		intSetting("weight", "share among the clients of a bind, 1..1000 (default 1)", func(c *S) *int { return &c.Weight }),
		stringSetting("lb_strategy", "the server's balancing for this service's binds; empty = the server's", func(c *S) *string { return &c.LBStrategy }),
		stringSetting("health.endpoint", "path probed on the target", func(c *S) *string { return &c.Health.Endpoint }),
		durationSetting("health.interval", "time between probes", func(c *S) *time.Duration { return &c.Health.Interval }),
		durationSetting("health.timeout", "timeout of one probe", func(c *S) *time.Duration { return &c.Health.Timeout }),
		intSetting("health.threshold", "failed probes before unhealthy", func(c *S) *int { return &c.Health.Threshold }),
		enumSetting("health.type", "probe: http or grpc (h2c targets)", func(c *S) *string { return &c.Health.Type }).oneOf(healthTypes),
		enumSetting("health.success", "statuses an http probe passes on: 2xx or 2xx-3xx", func(c *S) *string { return &c.Health.Success }).oneOf(healthSuccesses),
		boolSetting("resilience", "allow serve-stale", func(c *S) *bool { return &c.Resilience }),
		boolSetting("allow_connect", "pass CONNECT requests to the target", func(c *S) *bool { return &c.AllowConnect }),
		boolSetting("public", "open even under the server's default_access deny", func(c *S) *bool { return &c.Public }),
		authSetting("auth", "visitor auth methods: basic, bearer, jwt, forward, oidc", func(c *S) **Auth { return &c.Auth }),
		listSetting("allowed_ips", "visitor addresses or CIDRs admitted (others refused)", func(c *S) *[]string { return &c.AllowedIPs }, nil),
		listSetting("denied_ips", "visitor addresses or CIDRs refused", func(c *S) *[]string { return &c.DeniedIPs }, nil),
		boolSetting("identity_jwt", "send the backend a signed identity token", func(c *S) *bool { return &c.IdentityJWT }),
		YAMLSetting("headers", "response header rules the server applies: set, add, remove", func(c *S) **HeaderRules { return &c.Headers }, nil).s,
	}
	tab = append(tab, backendSettings()...)
	tab = append(tab, staticSettings()...)
	for i := range tab {
		tab[i].Env, tab[i].Flag = "", ""
	}
	return tab
}

// lbStrategies are the values of a service's lb_strategy: the server's
// (router.Strategies), repeated because the client links no server package.
var lbStrategies = []string{"round-robin", "least-inflight", "primary-standby", "sticky"}

// maxWeight is the largest weight a service may announce; the server
// clamps larger ones.
const maxWeight = 1000

// serviceOnly are per-service keys someone may write at the top level.
var serviceOnly = map[string]bool{"weight": true, "lb_strategy": true, "resilience": true, "allow_connect": true, "public": true, "auth": true, "allowed_ips": true, "denied_ips": true, "identity_jwt": true, "headers": true}

// singleFields maps each single-service key to the key of services[0] it
// fills.
var singleFields = map[string]string{
	"target":        "target",
	"hostname":      "hostname",
	"path":          "path",
	"target_health": "health_endpoint",
	"serve":         "serve",
}

// singleSettings is the table of the single-service keys: environment and
// flag spellings of fields of services[0]. Only their Key is used; values go
// through serviceSettings.
func singleSettings() []setting[Service] {
	type S = Service
	none := func(*S, value) error { return nil }
	empty := func(*S) string { return "" }
	return []setting[S]{
		newSetting("target", "local app: a port, host:port or URL (also the TARGET argument)", none, empty),
		newSetting("hostname", "public hostnames of the single service (comma list)", none, empty).kind(KindList),
		newSetting("path", "prefix bind of the single service", none, empty),
		newSetting("target_health", "health endpoint path of the single service", none, empty),
		newSetting("serve", "directory the single service serves instead of a target", none, empty),
	}
}

// ClientKeys returns every key of aperio-client that has an environment or
// flag spelling: the top-level keys, the single-service keys (target,
// hostname, path, target_health), the scaling block and the
// adaptive_concurrency block. services is file-only and not listed.
//
// Each Default is the contract's: DefaultClient, and the defaults a
// scaling or adaptive_concurrency block starts from; adaptive_concurrency
// itself defaults to false, as no block means no adaptive limit.
func ClientKeys() []Key {
	keys := keysOf(clientSettings(), ptr(DefaultClient()))
	keys = append(keys, keysOf(singleSettings(), nil)...)
	keys = append(keys, keysOf(scalingSettings(), ptr(tunnel.DefaultScaling()))...)
	ad := keysOf(adaptiveSettings(), newDefaultAdaptive())
	for i := range ad {
		if ad[i].Name == "adaptive_concurrency" {
			ad[i].Default = "false"
		}
	}
	return append(keys, ad...)
}

func ptr[T any](v T) *T { return &v }

// ClientOptions says where LoadClient finds its surfaces.
type ClientOptions struct {
	// File is the yaml file to read; empty means ClientFile if it exists.
	File string
	// FileMustExist makes a missing File an error (--config FILE).
	FileMustExist bool
	// HomeFile is the per-user file (~/.aperio.yaml), read if it exists.
	// Empty means none.
	HomeFile string
	// Flags holds the flags the user set: key (any spelling of a Key's Name
	// or Flag) → raw value, lists comma-separated.
	Flags map[string]string
	// Target is the positional TARGET, or "" when none was given.
	Target string
	// Env is the environment; main passes os.LookupEnv. Nil is empty.
	Env Env
	// Hostname names the machine for the default name; nil means
	// os.Hostname.
	Hostname func() (string, error)
	// ReadFile reads a file; nil means os.ReadFile.
	ReadFile func(name string) ([]byte, error)
	// Quick is the one port of quick mode (aperio-client tcp|udp PORT):
	// when set, it is the whole of expose:, and the surfaces' services
	// and expose entries are left out; the other keys load as usual.
	Quick *Expose
}

// LoadClient builds the client configuration, field by field: a flag (or
// the TARGET argument) wins over the file, which wins over the environment,
// which wins over the home file, which wins over the defaults. ${VAR} and
// ${VAR:-default} in the files' values expand from o.Env.
//
// services comes whole from the file, or else from the home file. The
// single-service keys (TARGET, APERIO_TARGET, APERIO_HOSTNAME,
// APERIO_TARGET_HEALTH, --hostname, --path) fill services[0] field by field,
// creating it when no file declares services; they are an error when the
// declaration has several services. Each service's health starts from the
// top-level health. Scaling stays nil unless some surface sets a scaling
// field.
//
// The error joins every problem, loading and validation alike, each an
// *Error. The configuration and sources are returned even then, with the
// defaults in place of values that did not load.
func LoadClient(o ClientOptions) (Client, *Sources, error) {
	file := o.File
	if file == "" {
		file = ClientFile
	}
	l := newLoader()
	top, sc, svc, single := clientSettings(), scalingSettings(), serviceSettings(), singleSettings()
	ad, svcAd := adaptiveSettings(), serviceAdaptiveSettings()

	sch := clientFileSchema(top, sc, ad)
	svcSch := newSchema()
	addSettings(svcSch, svc)
	addSettings(svcSch, svcAd)
	exSch := newSchema()
	exTab := exposeSettings()
	addSettings(exSch, exTab)

	local, localFile := l.readYAML(o.ReadFile, file, o.FileMustExist, o.Env, sch)
	home, homeFile := layer{}, (*yamlFile)(nil)
	if o.HomeFile != "" {
		home, homeFile = l.readYAML(o.ReadFile, o.HomeFile, false, o.Env, sch)
	}
	env := layer{}
	envLayer(env, top, o.Env, nil)
	envLayer(env, sc, o.Env, nil)
	envLayer(env, ad, o.Env, nil)
	singleEnv := layer{}
	envLayer(singleEnv, single, o.Env, func(norm string) string { return singleFields[norm] })
	flags, singleFlags := l.flagLayers(o, top, sc, single, ad)
	layers := []layer{flags, local, env, home}

	cfg := DefaultClient()
	apply(l, &cfg, top, layers, func() *Client {
		c := DefaultClient()
		return &c
	}, "")
	if l.src.Of("name").Kind == SourceDefault {
		hostname := o.Hostname
		if hostname == nil {
			hostname = os.Hostname
		}
		if h, err := hostname(); err == nil {
			cfg.Name = h
		}
	}
	if present(sc, layers...) {
		s := tunnel.DefaultScaling()
		cfg.Scaling = &s
		apply(l, cfg.Scaling, sc, layers, func() *Scaling {
			s := tunnel.DefaultScaling()
			return &s
		}, "")
		if l.src.Of("scaling.max").Kind == SourceDefault {
			cfg.Scaling.Max = tunnel.DefaultScalingMax(cfg.Scaling.Min)
		}
	}
	if present(ad, layers...) {
		a := DefaultAdaptive()
		cfg.Adaptive = &a
		apply(l, cfg.Adaptive, ad, layers, newDefaultAdaptive, "")
	}

	d := serviceDecl{svc: svc, adaptive: svcAd, singleFlags: singleFlags, singleEnv: singleEnv}
	if v, ok := local["services"]; ok {
		d.items, d.from = l.serviceItems(v, localFile, svcSch), localFile
		if hv, ok := home["services"]; ok {
			// Shadowed by the file's services, but bad input is still
			// reported. The sources go to a throwaway.
			shadow := &loader{src: newSources(), failed: l.failed}
			for i, it := range l.serviceItems(hv, homeFile, svcSch) {
				var scratch Service
				apply(shadow, &scratch, svc, []layer{it}, nil, fmt.Sprintf("services[%d].", i))
			}
			l.errs = append(l.errs, shadow.errs...)
		}
	} else if v, ok := home["services"]; ok {
		d.items, d.from = l.serviceItems(v, homeFile, svcSch), homeFile
	}
	cfg.Services = l.services(&cfg, d, localFile)
	cfg.Expose = l.exposeEntries(exTab, exSch, local, localFile, home, homeFile)
	if o.Quick != nil {
		cfg.Services, cfg.Expose = nil, []Expose{quickExpose(l, *o.Quick)}
	}
	rank := func(key string) int { return sourceRank(l.src.Of(key), o.HomeFile) }
	for i := range cfg.Services {
		cfg.Services[i].Concurrency = cfg.resolve(i, rank)
	}
	problems := cfg.problems(l.src)
	files := &checker{src: l.src}
	checkBackendFiles(cfg, o.ReadFile, files)
	checkServeDirs(cfg, files)
	return cfg, l.src, l.result(append(problems, files.errs...))
}

// flagLayers sorts o.Flags and o.Target into the flag layer of the
// top-level and scaling keys and the flag layer of services[0].
func (l *loader) flagLayers(o ClientOptions, top []setting[Client], sc []setting[Scaling], single []setting[Service], ad []setting[Adaptive]) (layer, layer) {
	known := make(map[string]string) // normalized key → flag name
	for _, k := range ClientKeys() {
		known[normalize(k.Name)] = k.Flag
	}
	flags, singles := layer{}, layer{}
	for _, k := range slices.Sorted(maps.Keys(o.Flags)) {
		norm := normalize(strings.TrimLeft(k, "-"))
		name, ok := known[norm]
		if !ok {
			src := Source{Kind: SourceFlag, Name: strings.ReplaceAll(norm, "_", "-")}
			msg := "unknown flag"
			if s := clientFlagSchema(top, sc, single, ad).suggest(norm); s != "" {
				msg += ", did you mean --" + strings.ReplaceAll(normalize(s), "_", "-") + "?"
			}
			l.fail(k, src, msg)
			continue
		}
		v := value{src: Source{Kind: SourceFlag, Name: name}, text: o.Flags[k]}
		if field, ok := singleFields[norm]; ok {
			singles[field] = v
		} else {
			flags[norm] = v
		}
	}
	if o.Target != "" {
		v := value{src: Source{Kind: SourceArg, Name: "TARGET"}, text: o.Target}
		if prev, ok := singles["target"]; ok {
			l.fail("services[0].target", v.src, "TARGET and --"+prev.src.Name+" are both set")
		} else {
			singles["target"] = v
		}
	}
	return flags, singles
}

// clientFileSchema is the top level of a client's file: its settings, the
// scaling and adaptive_concurrency blocks, services: and expose:. Both
// LoadClient and LoadAPIClient read files with it, so that `aperio-client
// api` accepts every file the client runs (it uses only server.*).
func clientFileSchema(top []setting[Client], sc []setting[Scaling], ad []setting[Adaptive]) *schema {
	sch := newSchema()
	addSettings(sch, top)
	addSettings(sch, sc)
	addSettings(sch, ad)
	sch.add("services", true)
	sch.add("expose", true)
	sch.hint = func(norm string) string {
		if _, ok := singleFields[norm]; ok || serviceOnly[norm] || isBackendKey(norm) || isStaticKey(norm) {
			return "unknown top-level key; " + norm + " is a per-service setting, put it in an entry of services:"
		}
		return ""
	}
	return sch
}

func clientFlagSchema(top []setting[Client], sc []setting[Scaling], single []setting[Service], ad []setting[Adaptive]) *schema {
	sch := newSchema()
	addSettings(sch, top)
	addSettings(sch, single)
	addSettings(sch, sc)
	addSettings(sch, ad)
	return sch
}

func newDefaultAdaptive() *Adaptive {
	a := DefaultAdaptive()
	return &a
}

// serviceDecl is what the surfaces say about services.
type serviceDecl struct {
	svc      []setting[Service]
	adaptive []setting[Adaptive] // the service's adaptive_concurrency keys
	items    []layer             // one layer per declared service
	from     *yamlFile           // the file that declared items; nil when none did
	// singleFlags and singleEnv hold the single-service values, keyed by
	// the service key they fill.
	singleFlags, singleEnv layer
}

// serviceItems flattens a services: list into one layer per entry.
// The lists of the main file and its includes are concatenated, in the
// order the files are read (see readIncludes).
func (l *loader) serviceItems(v value, f *yamlFile, sch *schema) []layer {
	return l.listItems("services", "expected a mapping of service settings (target, hostname, ...)", v, f, sch)
}

// listItems flattens the list key (services:, expose:) into one layer
// per entry; what says what an entry must be.
func (l *loader) listItems(key, what string, v value, f *yamlFile, sch *schema) []layer {
	var items []layer
	for _, part := range append([]value{v}, v.more...) {
		pf := part.file
		if pf == nil {
			pf = f
		}
		n := deref(part.node)
		if n.Kind != yaml.SequenceNode {
			l.fail(key, part.src, "expected a list of "+key)
			continue
		}
		for _, it := range n.Content {
			it = deref(it)
			item := layer{}
			prefix := fmt.Sprintf("%s[%d].", key, len(items))
			if it.Kind != yaml.MappingNode {
				l.fail(strings.TrimSuffix(prefix, "."), pf.source(it), what)
			} else {
				pf.walk(it, "", nil, prefix, sch, item, 1)
			}
			items = append(items, item)
		}
	}
	return items
}

// services builds the services of c from d; see LoadClient for the rules.
func (l *loader) services(c *Client, d serviceDecl, localFile *yamlFile) []Service {
	singles := len(d.singleFlags)+len(d.singleEnv) > 0
	if singles && len(d.items) > 1 {
		for _, s := range singleSettings() {
			for _, lay := range []layer{d.singleFlags, d.singleEnv} {
				if v, ok := lay[singleFields[s.norm]]; ok {
					l.fail(s.Name, v.src, fmt.Sprintf("sets a field of the single service, but %s declares %d services: set it in one of them instead", d.from.path, len(d.items)))
				}
			}
		}
		singles = false
	}
	if singles && len(d.items) == 0 {
		d.items = []layer{{}}
	}
	if len(d.items) == 0 {
		return nil
	}
	out := make([]Service, len(d.items))
	for i, item := range d.items {
		prefix := fmt.Sprintf("services[%d].", i)
		s := DefaultService()
		s.Health = c.Health
		for _, k := range []string{"health.endpoint", "health.interval", "health.timeout", "health.threshold", "health.type", "health.success"} {
			l.src.set(prefix+k, l.src.Of(k))
		}
		layers := []layer{item}
		if i == 0 && singles {
			switch {
			case d.from == nil:
				layers = []layer{d.singleFlags, d.singleEnv}
			case d.from == localFile:
				layers = []layer{d.singleFlags, item, d.singleEnv}
			default: // the home file ranks below the environment
				layers = []layer{d.singleFlags, d.singleEnv, item}
			}
		}
		apply(l, &s, d.svc, layers, func() *Service { return &Service{} }, prefix)
		resolveServe(&s, l.src.Of(prefix+"serve"))
		if present(d.adaptive, item) {
			// The service's block starts from the client's, field by
			// field, as its health does.
			a := DefaultAdaptive()
			if c.Adaptive != nil {
				a = *c.Adaptive
				a.Signals = slices.Clone(a.Signals)
			}
			for _, st := range d.adaptive {
				l.src.set(prefix+st.Name, l.src.Of(st.Name))
			}
			s.Adaptive = &a
			apply(l, s.Adaptive, d.adaptive, []layer{item}, newDefaultAdaptive, prefix)
		}
		out[i] = s
	}
	return out
}

// Validate reports every problem of c, each an *Error, joined with
// errors.Join; nil when there is none. Errors name no source: LoadClient
// returns the same problems with their sources.
func (c Client) Validate() error {
	return joinProblems(c.problems(nil))
}

func (c Client) problems(src *Sources) []*Error {
	v := &checker{src: src}
	if c.ServerURL == "" {
		v.add("server.url", "required: set server.url in %s, APERIO_SERVER_URL or --server-url", ClientFile)
	} else if msg := checkURL(c.ServerURL, serverURLSchemes...); msg != "" {
		v.add("server.url", "%s", msg)
	}
	for _, u := range c.ServerURLs {
		if msg := checkURL(u, serverURLSchemes...); msg != "" {
			v.add("server.urls", "%s", msg)
		}
	}
	if c.Token == "" {
		v.add("server.token", "required: set server.token in %s, APERIO_SERVER_TOKEN or --server-token", ClientFile)
	}
	v.nonNegative("max_concurrent", int64(c.MaxConcurrent))
	v.nonNegative("priority", int64(c.Priority))
	v.health("", c.Health, nil)
	v.nonNegativeDuration("idle_timeout", c.IdleTimeout)
	v.nonNegativeDuration("drain_timeout", c.DrainTimeout)
	v.durationWithin("reload_drain", c.ReloadDrain, 0, MaxReloadDrain)

	if len(c.Services) == 0 && len(c.Expose) == 0 {
		v.add("services", "no service: declare services: or expose: in %s, or give a TARGET (or APERIO_TARGET) and --hostname (or APERIO_HOSTNAME)", ClientFile)
	}
	v.expose(c.Expose)
	bound := make(map[string]int) // hostname and path → index of the service serving it
	names := make(map[string]int) // services[].name → index
	for i, s := range c.Services {
		p := fmt.Sprintf("services[%d].", i)
		if s.Name != "" {
			if !validServiceName(s.Name) {
				v.add(p+"name", "%q is not a handle: 1 to %d of a-z, 0-9 and -, not starting or ending with -", s.Name, maxServiceName)
			} else if j, dup := names[s.Name]; dup {
				v.add(p+"name", "%q is already the name of services[%d]", s.Name, j)
			} else {
				names[s.Name] = i
			}
		}
		if s.Target == "" && s.Serve == "" {
			v.add(p+"target", "required: the URL of the local app (a port, host:port or URL), or serve: a directory")
		} else if s.Target != "" {
			if msg := checkTarget(s.Target); msg != "" {
				v.add(p+"target", "%s", msg)
			}
		}
		v.backend(p, s)
		v.static(p, s)
		// No hostname is valid: the server binds the token's exact
		// hostnames (auto-bind) or, where allowed, a catch-all, and tells
		// the client when it may have neither.
		for _, h := range s.Hostnames {
			if !validHostname(h) {
				v.add(p+"hostname", "%q is not a valid DNS name or *. wildcard", h)
				continue
			}
			bind := strings.ToLower(h) + s.Path
			if j, dup := bound[bind]; dup && j != i {
				v.add(p+"hostname", "%s is already served by services[%d]", bind, j)
			}
			bound[bind] = i
		}
		if s.Path != "" && !strings.HasPrefix(s.Path, "/") {
			v.add(p+"path", "%q does not start with /", s.Path)
		}
		v.nonNegative(p+"max_concurrent", int64(s.MaxConcurrent))
		v.nonNegative(p+"priority", int64(s.Priority))
		if s.Weight < 0 || s.Weight > maxWeight {
			v.add(p+"weight", "must be within 1..%d, got %d", maxWeight, s.Weight)
		}
		if s.LBStrategy != "" {
			v.oneOf(p+"lb_strategy", s.LBStrategy, lbStrategies)
		}
		v.health(p, s.Health, &c.Health)
		v.adaptive(p, s.Adaptive)
		v.access(p, s)
		v.headers(p, s)
	}
	v.adaptive("", c.Adaptive)

	if sc := c.Scaling; sc != nil {
		v.scaling(*sc)
	}
	v.oneOf("log_level", c.LogLevel, LogLevels)
	v.oneOf("log_format", c.LogFormat, LogFormats)
	v.oneOf("server.transport", c.Transport, Transports)
	v.oneOf("idle_action", c.IdleAction, IdleActions)
	if c.DebugListen != "" {
		if err := debughttp.CheckAddr(c.DebugListen); err != nil {
			v.add("debug_listen", "%v", err)
		}
	}
	return v.errs
}

// health checks the probe settings under prefix. For a service, parent is
// the client's health: fields equal to it were checked there and are not
// reported again once per service.
func (v *checker) health(prefix string, h Health, parent *Health) {
	var p Health
	if parent != nil {
		p = *parent
	}
	own := func(same bool) bool { return parent == nil || !same }
	if own(h.Endpoint == p.Endpoint) && h.Endpoint != "" && !strings.HasPrefix(h.Endpoint, "/") {
		v.add(prefix+"health.endpoint", "%q does not start with /", h.Endpoint)
	}
	if own(h.Interval == p.Interval) {
		v.positive(prefix+"health.interval", h.Interval)
	}
	if own(h.Timeout == p.Timeout) {
		v.positive(prefix+"health.timeout", h.Timeout)
	}
	if own(h.Threshold == p.Threshold) && h.Threshold < 1 {
		v.add(prefix+"health.threshold", "must be at least 1, got %d", h.Threshold)
	}
	if own(h.Type == p.Type) && h.Type != "" {
		v.oneOf(prefix+"health.type", h.Type, healthTypes)
	}
	if own(h.Success == p.Success) && h.Success != "" {
		v.oneOf(prefix+"health.success", h.Success, healthSuccesses)
	}
}

// scaling reports the rules sc breaks (tunnel.Scaling.Problems) under
// their scaling.* keys, in the config's words: they show the URL, which
// the server's never do, and name the keys. An explicit max: 0 is below a
// positive min like any other value: only an unset max takes the default
// (tunnel.DefaultScalingMax).
func (v *checker) scaling(sc Scaling) {
	for _, p := range sc.Problems() {
		key := "scaling." + p.Field
		switch p.Rule {
		case tunnel.ScalingRequired:
			v.add(key, "required when the scaling block is declared")
		case tunnel.ScalingUnparsable:
			v.add(key, "%q is not a valid URL", sc.URL)
		case tunnel.ScalingScheme:
			v.add(key, "%q: scheme must be %s", sc.URL, orList(hookSchemes))
		case tunnel.ScalingNoHost:
			v.add(key, "%q has no host", sc.URL)
		case tunnel.ScalingCredentials:
			v.add(key, "must not carry credentials: set scaling.secret instead")
		case tunnel.ScalingTooLong:
			limit := tunnel.MaxScalingSecretBytes
			if p.Field == "url" {
				limit = tunnel.MaxScalingURLBytes
			}
			v.add(key, "is longer than %d bytes", limit)
		case tunnel.ScalingNegative:
			v.add(key, "must not be negative, got %s", scalingValue(sc, p.Field))
		case tunnel.ScalingBelowMin:
			v.add(key, "%d is below scaling.min %d", sc.Max, sc.Min)
		case tunnel.ScalingAboveMax:
			v.add(key, "%s is above the maximum of %s", scalingValue(sc, p.Field), formatDuration(tunnel.MaxColdStart))
		case tunnel.ScalingOutOfRange:
			v.add(key, "%g is outside (0, 1]", sc.TargetUtilization)
		case tunnel.ScalingTooShort:
			v.add(key, "%s is below the minimum of %s", scalingValue(sc, p.Field), formatDuration(tunnel.MinScalingWindow))
		default:
			v.add(key, "%s", p)
		}
	}
}

// scalingValue is the value of sc's field named by a
// tunnel.ScalingError's Field, as the config's messages show it.
func scalingValue(sc Scaling, field string) string {
	switch field {
	case "min":
		return strconv.Itoa(sc.Min)
	case "max":
		return strconv.Itoa(sc.Max)
	case "cold_start":
		return formatDuration(sc.ColdStart)
	case "window":
		return formatDuration(sc.Window)
	case "cooldown":
		return formatDuration(sc.Cooldown)
	}
	return ""
}

// maxServiceName bounds services[].name: a handle, shown in lists and
// logs, so short; the same bound as a DNS label.
const maxServiceName = 63

// validServiceName reports whether n is a service handle: 1 to 63 of
// a-z, 0-9 and -, not starting or ending with -.
func validServiceName(n string) bool {
	if n == "" || len(n) > maxServiceName || n[0] == '-' || n[len(n)-1] == '-' {
		return false
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
