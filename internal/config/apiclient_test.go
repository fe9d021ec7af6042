package config

import (
	"slices"
	"strings"
	"testing"
)

// apiClientLoadCases are LoadAPIClient inputs and results; they also seed
// FuzzLoadAPIClient.
var apiClientLoadCases = []struct {
	name     string
	in       clientCase
	file     string // ClientOptions.File; "" for the default
	want     APIClient
	sources  [2]string // of server.url and server.api_key
	problems []string
}{
	{
		name:    "environment",
		in:      clientCase{env: map[string]string{"APERIO_SERVER_URL": "https://t.example.com", "APERIO_SERVER_API_KEY": "apk_env"}},
		want:    APIClient{ServerURL: "https://t.example.com", APIKey: "apk_env"},
		sources: [2]string{"env APERIO_SERVER_URL", "env APERIO_SERVER_API_KEY"},
	},
	{
		name:    "alias APERIO_API_KEY",
		in:      clientCase{env: map[string]string{"APERIO_SERVER_URL": "https://t.example.com", "APERIO_API_KEY": "apk_alias"}},
		want:    APIClient{ServerURL: "https://t.example.com", APIKey: "apk_alias"},
		sources: [2]string{"env APERIO_SERVER_URL", "env APERIO_API_KEY"},
	},
	{
		name: "APERIO_SERVER_API_KEY wins over its alias",
		in: clientCase{env: map[string]string{
			"APERIO_SERVER_URL": "https://t.example.com", "APERIO_SERVER_API_KEY": "apk_main", "APERIO_API_KEY": "apk_alias",
		}},
		want:    APIClient{ServerURL: "https://t.example.com", APIKey: "apk_main"},
		sources: [2]string{"env APERIO_SERVER_URL", "env APERIO_SERVER_API_KEY"},
	},
	{
		name: "flag over file over environment over home file",
		in: clientCase{
			file:  "server:\n  url: https://file.example.com\n  api_key: apk_file\n",
			home:  "server: {url: https://home.example.com, api_key: apk_home}\n",
			env:   map[string]string{"APERIO_SERVER_URL": "https://env.example.com", "APERIO_API_KEY": "apk_env"},
			flags: map[string]string{"api-key": "apk_flag"},
		},
		want:    APIClient{ServerURL: "https://file.example.com", APIKey: "apk_flag"},
		sources: [2]string{"file:aperio.yaml:2", "flag --api-key"},
	},
	{
		name: "environment over home file",
		in: clientCase{
			home: "server: {url: https://home.example.com, api_key: apk_home}\n",
			env:  map[string]string{"APERIO_API_KEY": "apk_env"},
		},
		want:    APIClient{ServerURL: "https://home.example.com", APIKey: "apk_env"},
		sources: [2]string{"file:" + homeFile + ":1", "env APERIO_API_KEY"},
	},
	{
		name: "canonical flag spellings",
		in: clientCase{flags: map[string]string{
			"server-url": "wss://t.example.com", "server.api_key": "apk_flag",
		}},
		want:    APIClient{ServerURL: "wss://t.example.com", APIKey: "apk_flag"},
		sources: [2]string{"flag --server-url", "flag --server-api-key"},
	},
	{
		name: "the rest of a client file is not needed and not parsed",
		in: clientCase{file: "server:\n  url: https://t.example.com\n  token: ${NOPE:-}\n  api_key: ${KEY}\n" +
			"max_concurrent: lots\nscaling: {min: 2}\nservices:\n  - target: nonsense://\n"},
		want:    APIClient{ServerURL: "https://t.example.com", APIKey: "apk_expanded"},
		sources: [2]string{"file:aperio.yaml:2", "file:aperio.yaml:4"},
	},
	{
		name: "unknown key in the file",
		in: clientCase{
			file: "server:\n  url: https://t.example.com\n  api_kee: apk_x\n",
		},
		want:    APIClient{ServerURL: "https://t.example.com"},
		sources: [2]string{"file:aperio.yaml:2", "default"},
		problems: []string{
			"config: server.api_kee (aperio.yaml:3): unknown key, did you mean server.api_key?",
			"config: server.api_key: required: set server.api_key in aperio.yaml, APERIO_SERVER_API_KEY (or APERIO_API_KEY) or --api-key",
		},
	},
	{
		name:    "nothing set",
		sources: [2]string{"default", "default"},
		problems: []string{
			"config: server.url: required: set server.url in aperio.yaml, APERIO_SERVER_URL or --server-url",
			"config: server.api_key: required: set server.api_key in aperio.yaml, APERIO_SERVER_API_KEY (or APERIO_API_KEY) or --api-key",
		},
	},
	{
		name:     "bad scheme",
		in:       clientCase{env: map[string]string{"APERIO_SERVER_URL": "ftp://t.example.com", "APERIO_API_KEY": "apk_x"}},
		want:     APIClient{ServerURL: "ftp://t.example.com", APIKey: "apk_x"},
		sources:  [2]string{"env APERIO_SERVER_URL", "env APERIO_API_KEY"},
		problems: []string{`config: server.url (env APERIO_SERVER_URL): "ftp://t.example.com": scheme must be http, https, ws or wss`},
	},
	{
		name: "unknown flag",
		in: clientCase{
			env:   map[string]string{"APERIO_SERVER_URL": "https://t.example.com", "APERIO_API_KEY": "apk_x"},
			flags: map[string]string{"server-token": "apr_x"},
		},
		want:     APIClient{ServerURL: "https://t.example.com", APIKey: "apk_x"},
		sources:  [2]string{"env APERIO_SERVER_URL", "env APERIO_API_KEY"},
		problems: []string{"config: server-token (flag --server-token): unknown flag: only --server-url and --api-key configure `aperio-client api`"},
	},
	{
		name: "--config file",
		in: clientCase{
			env:   map[string]string{"APERIO_SERVER_URL": "https://env.example.com"},
			flags: map[string]string{"api-key": "apk_flag"},
		},
		file:     "missing.yaml",
		want:     APIClient{ServerURL: "https://env.example.com", APIKey: "apk_flag"},
		sources:  [2]string{"env APERIO_SERVER_URL", "flag --api-key"},
		problems: []string{"config: missing.yaml: file does not exist"},
	},
}

func TestLoadAPIClient(t *testing.T) {
	for _, tt := range apiClientLoadCases {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.in.options()
			o.Env = envOf(map[string]string{"KEY": "apk_expanded"})
			if tt.in.env != nil {
				o.Env = envOf(tt.in.env)
			}
			if tt.file != "" {
				o.File, o.FileMustExist = tt.file, true
			}
			got, src, err := LoadAPIClient(o)
			if got != tt.want {
				t.Errorf("LoadAPIClient = %+v, want %+v", got, tt.want)
			}
			for i, key := range apiClientKeys {
				if s := src.Of(key).String(); s != tt.sources[i] {
					t.Errorf("source of %s = %q, want %q", key, s, tt.sources[i])
				}
			}
			if p := problems(t, err); !slices.Equal(p, tt.problems) {
				diffLines(t, "problems", p, tt.problems)
			}
		})
	}
}

func TestAPIClientValidate(t *testing.T) {
	tests := []struct {
		in   APIClient
		want []string
	}{
		{APIClient{ServerURL: "https://t.example.com", APIKey: "k"}, nil},
		{APIClient{ServerURL: "t.example.com", APIKey: "k"}, []string{`config: server.url: "t.example.com": scheme must be http, https, ws or wss`}},
	}
	for _, tt := range tests {
		if got := problems(t, tt.in.Validate()); !slices.Equal(got, tt.want) {
			t.Errorf("%+v.Validate() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzLoadAPIClient(f *testing.F) {
	for _, tc := range apiClientLoadCases {
		f.Add(tc.in.file)
	}
	env := envOf(map[string]string{"KEY": "apk_x", "APERIO_SERVER_URL": "https://env.example.com"})
	f.Fuzz(func(t *testing.T, data string) {
		read := func(string) ([]byte, error) { return []byte(data), nil }
		cfg, _, err := LoadAPIClient(ClientOptions{Env: env, ReadFile: read})
		for _, p := range problems(t, err) { // fails on anything but *Error
			if strings.ContainsAny(p, "\r\n") {
				t.Fatalf("LoadAPIClient() problem %q spans several lines", p)
			}
		}
		if err == nil && (cfg.ServerURL == "" || cfg.APIKey == "") {
			t.Fatalf("LoadAPIClient() = %+v with no error, want both settings", cfg)
		}
	})
}

// TestAPIClientReadsEveryClientFile: a file the client runs (expose:,
// adaptive_concurrency, scaling, services) is one `aperio-client api`
// reads too, taking only server.*; issue 39's trap: api exited 2 with
// "expose: unknown key" beside a valid client config.
func TestAPIClientReadsEveryClientFile(t *testing.T) {
	file := "server:\n  url: https://t.example.com\n  token: apr_0123456789abcdef0123\n  api_key: apk_x\n" +
		"name: web-1\nmax_concurrent: 10\n" +
		"adaptive_concurrency: {enabled: true, mode: aimd, min: 2}\n" +
		"scaling: {url: https://provider.example.com/scale, min: 0, max: 2}\n" +
		"services:\n  - target: http://localhost:3000\n    hostname: web.example.com\n" +
		"expose:\n  - name: echo\n    target: 18091\n    remote_port: 20105\n"
	in := clientCase{file: file}
	if _, _, err := LoadClient(in.options()); err != nil {
		t.Fatalf("the client refuses the file, so the test proves nothing: %v", err)
	}
	got, _, err := LoadAPIClient(in.options())
	if err != nil {
		t.Fatalf("LoadAPIClient of a file the client runs: %v", err)
	}
	if got != (APIClient{ServerURL: "https://t.example.com", APIKey: "apk_x"}) {
		t.Errorf("LoadAPIClient = %+v", got)
	}
	// What the client refuses as unknown, api refuses the same way.
	bad := clientCase{file: "server: {url: https://t.example.com, api_key: apk_x}\nexpsoe: []\n"}
	_, _, cerr := LoadClient(bad.options())
	_, _, aerr := LoadAPIClient(bad.options())
	if cerr == nil || aerr == nil || !strings.Contains(aerr.Error(), "expsoe (aperio.yaml:2): unknown key") {
		t.Errorf("an unknown key: client %v, api %v; want both to refuse it", cerr, aerr)
	}
}
