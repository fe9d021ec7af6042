package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// TestReleaseIsReproducible builds the client for this machine's platform
// twice, the second time from an empty build cache (every package compiled
// again, in another output directory), and wants the same bytes: archive,
// SBOM and SHA256SUMS. It then unpacks the archive and runs the binary,
// which must report the stamped version. The server goes through the same
// code path; building it too would double the test's time for nothing new.
//
// The cold build is the test's cost (about a minute of CPU: 209 of the
// client's 247 packages are the standard library's) and its point: a
// rebuilder has nothing cached, and a second build from the same cache
// would only link again what the first compiled. It runs beside the
// package's other builds (TestVersionStamped, TestLicenseReport), which
// mostly link from the warm cache: a cold build leaves a core idle while
// it compiles the runtime's chain of packages.
//
// Both plans run in a copy of this test binary built without the race
// detector (runPlan): under -race, packing the 12 MB binary at gzip's best
// compression took 23 s a plan, more than the cold build's own time.
func TestReleaseIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds twice from a cold cache (about a minute); CI runs it without -short")
	}
	t.Parallel()
	root := repoRoot(t)
	target := runtime.GOOS + "/" + runtime.GOARCH
	plan := func(out string, env ...string) Plan {
		return Plan{
			Root:     root,
			Out:      out,
			Version:  "v0.0.0-test",
			Epoch:    time.Unix(1700000000, 0).UTC(),
			Targets:  []string{target},
			Binaries: []string{"aperio-client"},
			Go:       "go",
			Env:      env,
		}
	}
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	runner := planRunner(t)
	runPlan(t, runner, plan(a))
	runPlan(t, runner, plan(b, "GOCACHE="+t.TempDir()))
	sumsA := readFile(t, filepath.Join(a, "SHA256SUMS"))
	sumsB := readFile(t, filepath.Join(b, "SHA256SUMS"))
	if !bytes.Equal(sumsA, sumsB) {
		t.Fatalf("two builds of one commit differ:\n%s\nagainst\n%s", sumsA, sumsB)
	}
	goos, goarch, _ := strings.Cut(target, "/")
	base := "aperio_v0.0.0-test_" + goos + "_" + goarch
	for _, want := range []string{base + ".tar.gz", base + ".sbom.txt"} {
		if !bytes.Contains(sumsA, []byte("  "+want+"\n")) {
			t.Errorf("SHA256SUMS lists no %s:\n%s", want, sumsA)
		}
	}
	if entries, _ := os.ReadDir(a); len(entries) != 3 {
		t.Errorf("out holds %d entries, want the archive, the SBOM and SHA256SUMS (the staging directory removed)", len(entries))
	}

	sbom := string(readFile(t, filepath.Join(a, base+".sbom.txt")))
	for _, want := range []string{"aperio-client: go1.", "github.com/aperio-dev/aperio", "-trimpath=true", "CGO_ENABLED=0"} {
		if !strings.Contains(sbom, want) {
			t.Errorf("SBOM lacks %q:\n%s", want, sbom)
		}
	}
	if strings.Contains(sbom, a) {
		t.Errorf("SBOM names the build directory %s:\n%s", a, sbom)
	}

	files := untar(t, readFile(t, filepath.Join(a, base+".tar.gz")))
	bin, ok := files["aperio-client"]
	if !ok {
		t.Fatalf("archive holds %v, want aperio-client", keys(files))
	}
	for _, name := range extraFiles {
		if got, ok := files[name]; !ok || !bytes.Equal(got, readFile(t, filepath.Join(root, name))) {
			t.Errorf("archive holds %v, want %s as in the repository", keys(files), name)
		}
	}
	if report := string(files[LicensesFile]); !strings.Contains(report, "github.com/spf13/cobra") || !strings.Contains(report, "Go standard library") {
		t.Errorf("archive's %s does not list the linked modules:\n%.600s", LicensesFile, report)
	}
	exe := filepath.Join(t.TempDir(), "aperio-client")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("aperio-client --version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "v0.0.0-test") {
		t.Errorf("aperio-client --version says %q, want the stamped v0.0.0-test", out)
	}
}

// planEnv, when set in a test binary's environment, holds a Plan (JSON)
// that TestMain runs instead of the tests: runPlan's child.
const planEnv = "APERIO_RELEASE_TEST_PLAN"

// TestMain runs the Plan in planEnv, when there is one, and exits 0 once
// it succeeded, 1 with its error on stderr when it failed.
func TestMain(m *testing.M) {
	if spec := os.Getenv(planEnv); spec != "" {
		var p Plan
		err := json.Unmarshal([]byte(spec), &p)
		if err == nil {
			err = p.Run()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "release plan:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// planRunner builds this package's test binary without the race detector
// (GOFLAGS cleared too), for runPlan: Plan.Run's own work, packing and
// hashing, is an order of magnitude slower under -race and has no
// goroutines for it to check.
func planRunner(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "release.test")
	cmd := exec.Command("go", "test", "-c", "-o", exe, ".")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	return exe
}

// runPlan runs p in exe (planRunner's binary) and fails t if it fails.
func runPlan(t *testing.T, exe string, p Plan) {
	t.Helper()
	spec, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), planEnv+"="+string(spec))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plan for %s: %v\n%s", p.Out, err, out)
	}
}

// TestArchivesAreDeterministic: the same files give the same archive bytes
// whenever they are packed, and entries carry the epoch, root ownership
// and the mode given.
func TestArchivesAreDeterministic(t *testing.T) {
	files := []archiveFile{
		{name: "aperio-server", data: bytes.Repeat([]byte{0x7f, 'E', 'L', 'F'}, 1000), mode: 0o755},
		{name: "README.md", data: []byte("# Aperio\n"), mode: 0o644},
	}
	epoch := time.Unix(1700000000, 0).UTC()
	for name, pack := range map[string]func([]archiveFile, time.Time) ([]byte, error){
		"tar.gz": tarGzArchive, "zip": zipArchive,
	} {
		one, err := pack(files, epoch)
		if err != nil {
			t.Fatal(err)
		}
		two, err := pack(files, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(one, two) {
			t.Errorf("%s: two packs of the same files differ", name)
		}
		if name == "zip" {
			zr, err := zip.NewReader(bytes.NewReader(one), int64(len(one)))
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range zr.File {
				if f.Name != files[i].name || !f.Modified.Equal(epoch) || f.Mode().Perm() != os.FileMode(files[i].mode) {
					t.Errorf("zip entry %d: %s %v %v, want %s %v %o", i, f.Name, f.Modified, f.Mode(), files[i].name, epoch, files[i].mode)
				}
			}
			continue
		}
		gz, err := gzip.NewReader(bytes.NewReader(one))
		if err != nil {
			t.Fatal(err)
		}
		if !gz.ModTime.IsZero() || gz.Name != "" {
			t.Errorf("gzip header carries time %v, name %q; want neither", gz.ModTime, gz.Name)
		}
		tr := tar.NewReader(gz)
		for i := 0; ; i++ {
			h, err := tr.Next()
			if err == io.EOF {
				if i != len(files) {
					t.Errorf("tar holds %d entries, want %d", i, len(files))
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name != files[i].name || !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 || h.Mode != files[i].mode {
				t.Errorf("tar entry %d: %s %v uid %d gid %d mode %o", i, h.Name, h.ModTime, h.Uid, h.Gid, h.Mode)
			}
		}
	}
}

// TestPlanRefusesBadInput: a version that would make an odd file name or
// flag, an unknown platform, and a malformed SOURCE_DATE_EPOCH are refused
// before anything is built or removed.
func TestPlanRefusesBadInput(t *testing.T) {
	out := t.TempDir()
	keep := filepath.Join(out, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Plan{
		{Out: out, Version: "v1 -X main.evil=1", Targets: []string{"linux/amd64"}, Binaries: Binaries},
		{Out: out, Version: "../../etc", Targets: []string{"linux/amd64"}, Binaries: Binaries},
		{Out: out, Version: strings.Repeat("v", 65), Targets: []string{"linux/amd64"}, Binaries: Binaries},
		{Out: out, Version: "", Targets: []string{"linux/amd64"}, Binaries: Binaries},
		{Out: out, Version: "v1", Targets: []string{"plan9/386"}, Binaries: Binaries},
		{Out: out, Version: "v1", Binaries: Binaries},
	} {
		if err := p.Run(); err == nil {
			t.Errorf("Run(%+v) = nil, want an error", p)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a refused plan emptied its out directory: %v", err)
	}
	for _, bad := range []string{"yesterday", "-5", "1e9"} {
		if _, err := sourceEpoch(t.TempDir(), bad); err == nil {
			t.Errorf("SOURCE_DATE_EPOCH=%q accepted", bad)
		}
	}
	if got, err := sourceEpoch(t.TempDir(), "1700000000"); err != nil || got.Unix() != 1700000000 {
		t.Errorf("SOURCE_DATE_EPOCH=1700000000 gives %v, %v", got, err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func untar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLicenseReport: the report of what the linux/amd64 binaries link
// names every linked module (as go list sees it) with its license kind,
// holds each license text verbatim, the Go standard library's too, and
// names no directory of this machine.
func TestLicenseReport(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	p := Plan{Root: root, Targets: []string{"linux/amd64"}, Binaries: Binaries, Go: "go"}
	out := filepath.Join(t.TempDir(), LicensesFile)
	if err := p.WriteLicenses(out); err != nil {
		t.Fatal(err)
	}
	report := string(readFile(t, out))
	lister := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Dir}}{{end}}{{end}}", "./cmd/aperio-server", "./cmd/aperio-client")
	lister.Dir = root
	lister.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	list, err := lister.Output()
	if err != nil {
		t.Fatal(err)
	}
	mods := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		if path, dir, ok := strings.Cut(line, " "); ok {
			mods[path] = dir
		}
	}
	if len(mods) < 10 {
		t.Fatalf("go list found %d modules; the test cannot judge the report", len(mods))
	}
	for path, dir := range mods {
		if !strings.Contains(report, "\n  "+path+" ") {
			t.Errorf("the report's table lacks %s", path)
		}
		if strings.Contains(report, dir) {
			t.Errorf("the report names the directory %s", dir)
		}
	}
	cobra := string(readFile(t, filepath.Join(mods["github.com/spf13/cobra"], "LICENSE.txt")))
	if !strings.Contains(report, strings.TrimRight(cobra, "\n")) {
		t.Error("the report does not hold cobra's LICENSE.txt verbatim")
	}
	for _, w := range []string{"github.com/spf13/cobra                             v", "Apache-2.0", "Go standard library and runtime", "Copyright 2009 The Go Authors"} {
		if !strings.Contains(report, w) {
			t.Errorf("the report lacks %q", w)
		}
	}
	if err := (Plan{Root: root, Targets: []string{"linux/amd64", "linux/arm64"}, Binaries: Binaries, Go: "go"}).WriteLicenses(out); err == nil {
		t.Error("WriteLicenses accepted two targets")
	}
}

// TestLicenseFiles: license and notice files are found whatever their
// case or suffix; a module with only a NOTICE, or none, has no license;
// an oversized file is refused rather than read whole.
func TestLicenseFiles(t *testing.T) {
	write := func(dir, name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	write(dir, "license.md", "Permission is hereby granted, free of charge, to any person")
	write(dir, "NOTICE", "This product includes software developed by someone.")
	write(dir, "main.go", "package x")
	if err := os.Mkdir(filepath.Join(dir, "LICENSES"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := licenseFiles(dir)
	if err != nil || len(got) != 2 || got[0].Name != "NOTICE" || got[1].Name != "license.md" || got[1].Kind != "MIT" {
		t.Errorf("licenseFiles = %+v, %v; want NOTICE and license.md (MIT)", got, err)
	}
	noLicense := t.TempDir()
	write(noLicense, "NOTICE", "notice only")
	if got, err := licenseFiles(noLicense); err != nil || got != nil {
		t.Errorf("a module with only a NOTICE: %+v, %v; want no license", got, err)
	}
	huge := t.TempDir()
	write(huge, "LICENSE", strings.Repeat("x", maxLicenseFile+1))
	if _, err := licenseFiles(huge); err == nil {
		t.Error("an oversized LICENSE was accepted")
	}
	for text, want := range map[string]string{
		"Apache License\n  Version 2.0, January 2004":                                                      "Apache-2.0",
		"Mozilla Public License Version 2.0":                                                               "MPL-2.0",
		"Redistribution and use in source and binary forms ... Neither the name of Google":                 "BSD-3-Clause",
		"Redistribution and use in source and binary forms, with or without modification":                  "BSD-2-Clause",
		"Permission to use, copy, modify, and/or distribute this software for any purpose with or without": "ISC",
		"All rights reserved. No permission granted.":                                                      "see text",
	} {
		if got := classifyLicense([]byte(text)); got != want {
			t.Errorf("classifyLicense(%q) = %s, want %s", text, got, want)
		}
	}
}

// TestVersionScript runs scripts/version.sh in a scratch git repository
// through a release's life: no tag, a release tag, commits after it, an
// edit, a pre-release, and tags that are not releases.
func TestVersionScript(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
			"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func() string {
		t.Helper()
		out, err := exec.Command("sh", filepath.Join(root, "scripts", "version.sh"), dir).CombinedOutput()
		if err != nil {
			t.Fatalf("version.sh: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	n := 0
	commit := func() string {
		t.Helper()
		n++
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "f")
		git("commit", "-q", "-m", "c")
		return git("rev-parse", "--short=12", "HEAD")
	}

	if got := version(); got != "v0.0.0-dev" {
		t.Errorf("outside git: %q, want v0.0.0-dev", got)
	}
	git("init", "-q")
	c := commit()
	c = commit()
	check := func(want string) {
		t.Helper()
		if got := version(); got != want {
			t.Errorf("version.sh = %q, want %q", got, want)
		}
	}
	check("v0.0.0-dev.2+g" + c)
	git("tag", "v1.2")     // not a release: two numbers
	git("tag", "release1") // not a release
	check("v0.0.0-dev.2+g" + c)
	git("tag", "v1.2.3")
	check("v1.2.3")
	c = commit()
	c = commit()
	check("v1.2.4-dev.2+g" + c)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("v1.2.4-dev.2+g" + c + ".dirty")
	git("checkout", "-q", "f")
	if err := os.WriteFile(filepath.Join(dir, "untracked"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("v1.2.4-dev.2+g" + c) // untracked files do not make a tree dirty
	git("tag", "v1.3.0-rc.1")
	check("v1.3.0-rc.1")
	c = commit()
	check("v1.3.0-rc.1.dev.1+g" + c)
	git("tag", "v1.3.0") // the release on the same commit wins over its rc
	check("v1.3.0")
	git("tag", "-a", "-m", "annotated", "v1.10.0")
	check("v1.10.0") // 1.10 > 1.3: versions compare as numbers
	if err := validVersion(version() + "-dev.1+g0123456789ab.dirty"); err != nil {
		t.Errorf("a version.sh version is not one release accepts: %v", err)
	}
}

// TestVersionStamped builds aperio-server as a release does, with a
// version and a commit, and runs `aperio-server version`: both are what
// it prints (not "commit: unknown", which a -buildvcs=false build showed).
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("links aperio-server (tens of seconds); CI runs it without -short")
	}
	t.Parallel()
	p := Plan{Root: repoRoot(t), Version: "v1.2.4-dev.3+g0123456789ab", Commit: "0123456789abcdef0123456789abcdef01234567", Go: "go", Env: []string{"GOFLAGS=-buildvcs=false"}}
	bin := filepath.Join(t.TempDir(), "aperio-server")
	if err := p.build(runtime.GOOS, runtime.GOARCH, "aperio-server", bin); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("aperio-server version: %v\n%s", err, out)
	}
	for _, want := range []string{"aperio-server v1.2.4-dev.3+g0123456789ab\n", "commit:   0123456789abcdef0123456789abcdef01234567\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("aperio-server version printed %q, want %q in it", out, want)
		}
	}
	if err := (Plan{Out: t.TempDir(), Version: "v1.0.0", Commit: "HEAD; rm", Targets: []string{"linux/amd64"}, Binaries: Binaries}).Run(); err == nil {
		t.Error("Run accepted a commit that is not hex")
	}
}

// TestMakefileStamps: make build links the version and the commit.
func TestMakefileStamps(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not found")
	}
	cmd := exec.Command("make", "-n", "build", "VERSION=v9.8.7", "COMMIT=abcdef0123")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	for _, want := range []string{"-X " + versionVar + "=v9.8.7", "-X " + commitVar + "=abcdef0123"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make build runs %q, want %q in it", out, want)
		}
	}
}

// TestChangelog: CHANGELOG.md, which every archive holds, is one entry per
// release, newest first (Unreleased on top), each grouped under the known
// headings only, none empty.
func TestChangelog(t *testing.T) {
	text := string(readFile(t, filepath.Join(repoRoot(t), "CHANGELOG.md")))
	release := regexp.MustCompile(`^## v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.]+)? \([0-9]{4}-[0-9]{2}-[0-9]{2}\)$`)
	sections := []string{"### Added", "### Changed", "### Fixed", "### Security", "### Upgrade notes"}
	var entries []string
	section, items := "", 0
	endSection := func() {
		if section != "" && items == 0 {
			t.Errorf("CHANGELOG.md: %s under %s lists nothing", section, entries[len(entries)-1])
		}
	}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			endSection()
			if line != "## Unreleased" && !release.MatchString(line) {
				t.Errorf("CHANGELOG.md: heading %q, want ## Unreleased or ## vX.Y.Z (YYYY-MM-DD)", line)
			}
			if line == "## Unreleased" && len(entries) > 0 {
				t.Error("CHANGELOG.md: Unreleased is not the first entry")
			}
			if slices.Contains(entries, line) {
				t.Errorf("CHANGELOG.md: %s twice", line)
			}
			entries = append(entries, line)
			section, items = "", 0
		case strings.HasPrefix(line, "### "):
			endSection()
			if !slices.Contains(sections, line) {
				t.Errorf("CHANGELOG.md: section %q, want one of %q", line, sections)
			}
			if len(entries) == 0 {
				t.Errorf("CHANGELOG.md: %s before any release entry", line)
			}
			section, items = line, 0
		case strings.HasPrefix(line, "- ") && section != "":
			items++
		}
	}
	endSection()
	if len(entries) == 0 {
		t.Error("CHANGELOG.md has no entry")
	}
}
