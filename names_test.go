package aperio_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// userFacing lists the files a user copies commands and configs from:
// the README, docs/, deploy/ and examples/ (their text files).
func userFacing(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, dir := range []string{"docs", "deploy", "examples"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch filepath.Ext(path) {
			case ".md", ".yaml", ".yml", ".sh", ".service", ".env", ".tpl", ".txt":
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) < 30 {
		t.Fatalf("found %d user-facing files; walked from the wrong directory?", len(files))
	}
	return files
}

// TestOneNamePerThing (issue 39, trap 10): the master token and a
// client's token are APERIO_SERVER_TOKEN in every page and example (the
// settings' own variable), never another spelling; and no quick start
// puts a secret on a command line, where every user of the machine can
// read it: the commands in fenced blocks, shell scripts and compose files
// take secrets from the environment.
func TestOneNamePerThing(t *testing.T) {
	otherSpelling := regexp.MustCompile(`\bAPERIO_(MASTER_TOKEN|TOKEN|ADMIN_TOKEN|SERVER_MASTER_TOKEN)\b`)
	secretFlag := regexp.MustCompile(`--(server-token|server-api-key|api-key|scaling-secret)[ =]\S`)
	for _, path := range userFacing(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		inCode := !strings.HasSuffix(path, ".md") // a whole script or config is code
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") && strings.HasSuffix(path, ".md") {
				inCode = !inCode
				continue
			}
			if m := otherSpelling.FindString(line); m != "" {
				t.Errorf("%s:%d: %s: the token's variable is APERIO_SERVER_TOKEN", path, i+1, m)
			}
			if inCode && secretFlag.MatchString(line) {
				t.Errorf("%s:%d: a secret on the command line: %s", path, i+1, strings.TrimSpace(line))
			}
		}
	}
}
