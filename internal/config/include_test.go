package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles writes name → content under a new temporary directory and
// returns it.
func writeFiles(tb testing.TB, files map[string]string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

func TestIncludeMergesAndConcatenatesServices(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"aperio.yaml":   "include: [conf.d/*.yaml, secrets.yaml]\nmax_concurrent: 7\nservices:\n  - {target: 3000, hostname: main.example.com}\n",
		"conf.d/a.yaml": "max_concurrent: 1\nlog_level: debug\nservices:\n  - {target: 3001, hostname: a.example.com}\n",
		"conf.d/b.yaml": "log_level: warn\nservices:\n  - {target: 3002, hostname: b.example.com}\n",
		"secrets.yaml":  "server:\n  url: https://t.example.com\n  token: apr_inc\n",
	})
	main := filepath.Join(dir, "aperio.yaml")
	cfg, src, err := LoadClient(ClientOptions{File: main, FileMustExist: true})
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	if cfg.MaxConcurrent != 7 {
		t.Errorf("MaxConcurrent = %d, want the including file's 7", cfg.MaxConcurrent)
	}
	if cfg.LogLevel != "warn" {
		t.Errorf("LogLevel = %q, want the later include's warn", cfg.LogLevel)
	}
	var hosts []string
	for _, s := range cfg.Services {
		hosts = append(hosts, s.Hostnames...)
	}
	diffLines(t, "services' hostnames", hosts, []string{"a.example.com", "b.example.com", "main.example.com"})
	for key, want := range map[string]string{
		"server.token":         "file:" + filepath.Join(dir, "secrets.yaml") + ":3",
		"log_level":            "file:" + filepath.Join(dir, "conf.d/b.yaml") + ":1",
		"services[1].hostname": "file:" + filepath.Join(dir, "conf.d/b.yaml") + ":3",
		"services[2].target":   "file:" + main + ":4",
	} {
		if got := src.Of(key).String(); got != want {
			t.Errorf("Sources.Of(%s) = %q, want %q", key, got, want)
		}
	}
	diffLines(t, "Files()", src.Files(), []string{main, filepath.Join(dir, "conf.d/a.yaml"), filepath.Join(dir, "conf.d/b.yaml"), filepath.Join(dir, "secrets.yaml")})
}

func TestIncludeErrors(t *testing.T) {
	deep := map[string]string{"aperio.yaml": "include: " + filepathName(1) + "\n"}
	for i := 1; i <= 9; i++ {
		deep[filepathName(i)] = "include: " + filepathName(i+1) + "\n"
	}
	deep[filepathName(10)] = "name: x\n"
	many := map[string]string{"aperio.yaml": "include: 'm/*.yaml'\n"}
	for i := range 65 {
		many["m/"+filepathName(i)] = "name: x\n"
	}
	tests := []struct {
		name  string
		files map[string]string
		want  string // in one problem, with DIR for the directory
	}{
		{"missing file", map[string]string{"aperio.yaml": "include: nope.yaml\n"}, "DIR/nope.yaml: file does not exist"},
		{"cycle", map[string]string{"aperio.yaml": "include: b.yaml\n", "b.yaml": "include: [aperio.yaml]\n"}, "include (DIR/b.yaml:1): include cycle: DIR/b.yaml includes DIR/aperio.yaml, which is already being read"},
		{"too deep", deep, "includes nest deeper than 8 files"},
		{"too many", many, "more than 64 files included"},
		{"not a list", map[string]string{"aperio.yaml": "include: {a: b}\n"}, "include (DIR/aperio.yaml:1): expected a file, a glob or a list of them"},
		{"error in an include names its file:line", map[string]string{"aperio.yaml": "include: b.yaml\n", "b.yaml": "\nmax_concurent: 3\n"}, "max_concurent (DIR/b.yaml:2): unknown key, did you mean max_concurrent?"},
		{"too large", map[string]string{"aperio.yaml": "include: big.yaml\n", "big.yaml": "# " + strings.Repeat("x", MaxFileBytes) + "\n"}, "DIR/big.yaml: file is larger than 1048576 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			_, _, err := LoadClient(ClientOptions{File: filepath.Join(dir, "aperio.yaml"), FileMustExist: true})
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			for _, p := range problems(t, err) {
				if strings.Contains(p, want) {
					return
				}
			}
			t.Errorf("LoadClient() problems = %q, want one holding %q", problems(t, err), want)
		})
	}
}

func filepathName(i int) string {
	return "d" + string(rune('0'+i/10)) + string(rune('0'+i%10)) + ".yaml"
}
