package config

import (
	"maps"
	"slices"
	"strings"
)

// APIClient is the configuration of `aperio-client api`: where the admin
// API is and the credential to call it with. It reads the same surfaces as
// Client but needs only these two keys.
type APIClient struct {
	// ServerURL is the server's URL (server.url). Required; http://,
	// https://, ws:// or wss://.
	ServerURL string
	// APIKey is the bearer credential of the admin API (server.api_key,
	// also APERIO_API_KEY): an apk_ admin key, or the master token.
	// Required. Secret.
	APIKey string
}

// apiClientKeys are the keys of Client that LoadAPIClient reads.
var apiClientKeys = []string{"server.url", "server.api_key"}

// apiClientFlags maps the normalized spellings LoadAPIClient accepts in
// ClientOptions.Flags to the key they set: the canonical keys, and the
// `api` command's own flag names (--api-key).
var apiClientFlags = map[string]string{
	"server_url":     "server.url",
	"server_api_key": "server.api_key",
	"api_key":        "server.api_key",
}

// LoadAPIClient builds the configuration of `aperio-client api` with the
// client's precedence, field by field: a flag wins over the file (o.File,
// or ClientFile when it exists), which wins over the environment
// (APERIO_SERVER_URL, APERIO_SERVER_API_KEY, then APERIO_API_KEY), which
// wins over the home file. o.Target and o.Hostname are not used.
//
// o.Flags may hold server.url and server.api_key in any spelling, and
// api-key; the source of a flag value is recorded under the spelling
// given, so pass the flag's own name ("api-key") for messages to name it.
// Other flags are errors.
//
// The files are the client's: every key of Client may appear in them, and
// an unknown key is an error as it is for LoadClient. Only server.url and
// server.api_key are parsed and checked; services and the rest are
// ignored, so a file that does not yet declare a service is fine.
//
// The error joins every problem, each an *Error, as LoadClient's does.
func LoadAPIClient(o ClientOptions) (APIClient, *Sources, error) {
	file := o.File
	if file == "" {
		file = ClientFile
	}
	l := newLoader()
	var tab []setting[Client]
	for _, s := range clientSettings() {
		if slices.Contains(apiClientKeys, s.Name) {
			tab = append(tab, s)
		}
	}

	// The schema of the whole client file, LoadClient's, so that every file
	// the client runs is read here too and unknown keys are reported the
	// same way.
	sch := clientFileSchema(clientSettings(), scalingSettings(), adaptiveSettings())

	local, _ := l.readYAML(o.ReadFile, file, o.FileMustExist, o.Env, sch)
	home := layer{}
	if o.HomeFile != "" {
		home, _ = l.readYAML(o.ReadFile, o.HomeFile, false, o.Env, sch)
	}
	env := layer{}
	envLayer(env, tab, o.Env, nil)
	flags := layer{}
	for _, k := range slices.Sorted(maps.Keys(o.Flags)) {
		norm := normalize(strings.TrimLeft(k, "-"))
		src := Source{Kind: SourceFlag, Name: strings.ReplaceAll(norm, "_", "-")}
		key, ok := apiClientFlags[norm]
		if !ok {
			l.fail(k, src, "unknown flag: only --server-url and --api-key configure `aperio-client api`")
			continue
		}
		flags[normalize(key)] = value{src: src, text: o.Flags[k]}
	}

	var c Client
	apply(l, &c, tab, []layer{flags, local, env, home}, func() *Client { return &Client{} }, "")
	cfg := APIClient{ServerURL: c.ServerURL, APIKey: c.APIKey}
	return cfg, l.src, l.result(cfg.problems(l.src))
}

// Validate reports every problem of c, each an *Error, joined with
// errors.Join; nil when there is none.
func (c APIClient) Validate() error {
	return joinProblems(c.problems(nil))
}

func (c APIClient) problems(src *Sources) []*Error {
	v := &checker{src: src}
	if c.ServerURL == "" {
		v.add("server.url", "required: set server.url in %s, APERIO_SERVER_URL or --server-url", ClientFile)
	} else if msg := checkURL(c.ServerURL, serverURLSchemes...); msg != "" {
		v.add("server.url", "%s", msg)
	}
	if c.APIKey == "" {
		v.add("server.api_key", "required: set server.api_key in %s, APERIO_SERVER_API_KEY (or APERIO_API_KEY) or --api-key", ClientFile)
	}
	return v.errs
}
