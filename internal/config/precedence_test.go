package config

import (
	"slices"
	"strings"
	"testing"
)

// exampleFile is the repository's example aperio.yaml as a newcomer
// copies it into the working directory.
const exampleFile = `server:
  url: https://tunnel.example.com
  token: apr_example
services:
  - target: 3000
    hostname: app.example.com
`

// The trap of issue 19: a copied example aperio.yaml in the working
// directory silently overrode the exported environment, and the client
// talked to tunnel.example.com. The documented order stays (the file
// wins), but the load now warns, naming both sources.
func TestCopiedExampleOverridingEnvWarns(t *testing.T) {
	env := envOf(map[string]string{
		"APERIO_SERVER_URL":   "https://tunnel.mycompany.net",
		"APERIO_SERVER_TOKEN": "apr_real",
		"APERIO_HOSTNAME":     "app.mycompany.net",
		"APERIO_LOG_LEVEL":    "debug",
	})
	cfg, src, err := LoadClient(ClientOptions{Env: env, ReadFile: filesOf(map[string]string{ClientFile: exampleFile})})
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	if cfg.ServerURL != "https://tunnel.example.com" {
		t.Errorf("ServerURL = %q, want the file's (the documented order)", cfg.ServerURL)
	}
	want := []string{
		"aperio.yaml:2 sets server.url, overriding APERIO_SERVER_URL",
		"aperio.yaml:3 sets server.token, overriding APERIO_SERVER_TOKEN",
		"aperio.yaml:6 sets services[0].hostname, overriding APERIO_HOSTNAME",
	}
	diffLines(t, "Warnings()", src.Warnings(), want)

	// The API CLI reads the same file the same way.
	_, asrc, _ := LoadAPIClient(ClientOptions{Env: env, ReadFile: filesOf(map[string]string{ClientFile: exampleFile})})
	if got := asrc.Warnings(); !slices.Contains(got, want[0]) {
		t.Errorf("LoadAPIClient Warnings() = %q, want it to hold %q", got, want[0])
	}
}

func TestPrecedenceWarningGolden(t *testing.T) {
	env := envOf(map[string]string{
		"APERIO_SERVER_URL":     "https://tunnel.mycompany.net",
		"APERIO_SERVER_TOKEN":   "apr_same",
		"APERIO_MAX_CONCURRENT": "4",
		"APERIO_SCALING_MAX":    "3",
		"APERIO_NAME":           "from-env",
	})
	file := "server:\n  url: https://tunnel.example.com\n  token: ${APERIO_SERVER_TOKEN}\nmax_concurrent: 4\nname: web-1\n" +
		"scaling: {url: https://hook.example/scale, max: 5}\nservices: [{target: 3000, hostname: a.example.com}]\n"
	_, src, err := LoadClient(ClientOptions{Env: env, ReadFile: filesOf(map[string]string{ClientFile: file})})
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	// server.token and max_concurrent are the same text on both surfaces:
	// nothing is overridden, no warning.
	golden(t, "precedence_warnings.golden", []byte(strings.Join(src.Warnings(), "\n")+"\n"))
}

// Without an environment value under the file's, or with only a flag
// over the environment, there is nothing to warn about.
func TestPrecedenceNoWarning(t *testing.T) {
	env := envOf(map[string]string{"APERIO_SERVER_URL": "https://env.example.com", "APERIO_SERVER_TOKEN": "apr_x", "APERIO_TARGET": "3000", "APERIO_HOSTNAME": "a.example.com"})
	_, src, err := LoadClient(ClientOptions{Env: env, Flags: map[string]string{"server-url": "https://flag.example.com"}, ReadFile: filesOf(nil)})
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	if got := src.Warnings(); len(got) != 0 {
		t.Errorf("Warnings() = %q, want none", got)
	}
}

func TestSourcesFiles(t *testing.T) {
	files := filesOf(map[string]string{"/etc/aperio/a.yaml": exampleFile, "/home/u/.aperio.yaml": "name: x\n"})
	_, src, err := LoadClient(ClientOptions{File: "/etc/aperio/a.yaml", FileMustExist: true, HomeFile: "/home/u/.aperio.yaml", ReadFile: files})
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	diffLines(t, "Files()", src.Files(), []string{"/etc/aperio/a.yaml", "/home/u/.aperio.yaml"})
	_, src, _ = LoadClient(ClientOptions{File: "/nope.yaml", ReadFile: files})
	if got := src.Files(); len(got) != 0 {
		t.Errorf("Files() with no file read = %q, want none", got)
	}
}
