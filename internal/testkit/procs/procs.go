// Package procs builds the module's binaries for process tests, once per
// test binary: the first test that asks builds aperio-server and
// aperio-client into a shared directory, later ones reuse it, and Main
// removes it when the package's tests end. Tests of several packages in
// one go test run share the Go build cache, so only the first build of a
// run compiles.
package procs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	err  error
	out  []byte
)

// Main runs the package's tests, removes the built binaries and exits
// with the tests' code. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// Binaries returns the directory holding aperio-server and aperio-client
// built from this module (static, as releases are), building them on the
// first call. A failed build fails every test that asks.
func Binaries(tb testing.TB) string {
	tb.Helper()
	once.Do(build)
	if err != nil {
		tb.Fatalf("procs: go build: %v\n%s", err, out)
	}
	return dir
}

func build() {
	var root []byte
	if root, err = exec.Command("go", "env", "GOMOD").Output(); err != nil {
		return
	}
	mod := filepath.Dir(strings.TrimSpace(string(root)))
	if dir, err = os.MkdirTemp("", "aperio-bin-"); err != nil {
		return
	}
	// Built as make build builds them (static, -trimpath): a run after
	// make build, as CI's, compiles nothing again.
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+string(os.PathSeparator), "./cmd/aperio-server", "./cmd/aperio-client")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err = cmd.CombinedOutput()
}
