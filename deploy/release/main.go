// Command release builds Aperio's release artifacts: both binaries for
// every supported platform, static and stamped with the version, packed one
// archive per platform, with a software bill of materials per archive and a
// SHA256SUMS file over all of them.
//
//	go run ./deploy/release [-out dist] [-version v1.2.3] [-commit SHA] [-targets linux/amd64,…]
//
// The build is reproducible: the same commit, version and Go toolchain give
// the same bytes on any machine and in any directory. What would otherwise
// differ is pinned: paths (-trimpath), the build ID (-buildid=), cgo (off),
// archive entry times (the commit's time, or SOURCE_DATE_EPOCH), owners,
// modes and order, and gzip's header time. `make release` runs it;
// release_test.go builds one platform twice, once from a cold build cache,
// and compares the bytes.
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Targets are the platforms a release is built for.
var Targets = []string{
	"linux/amd64", "linux/arm64",
	"darwin/amd64", "darwin/arm64",
	"windows/amd64", "windows/arm64",
}

// Binaries are the commands a release ships, each under cmd/.
var Binaries = []string{"aperio-server", "aperio-client"}

// extraFiles are copied from the repository's root into every archive,
// beside the generated LicensesFile.
var extraFiles = []string{"LICENSE", "README.md", "CHANGELOG.md"}

const (
	versionVar = "github.com/aperio-dev/aperio/internal/buildinfo.version"
	commitVar  = "github.com/aperio-dev/aperio/internal/buildinfo.commit"
)

// Plan is one release build.
type Plan struct {
	Root     string    // the repository's root (holds go.mod)
	Out      string    // where artifacts are written; created, and emptied first
	Version  string    // stamped into the binaries and the archive names
	Commit   string    // stamped into the binaries (buildinfo.commit); none when empty
	Epoch    time.Time // every archive entry's time
	Targets  []string  // os/arch pairs
	Binaries []string  // command names under cmd/
	Go       string    // the go command
	Env      []string  // extra environment for go build (GOCACHE in tests)
	Log      io.Writer // progress
}

func main() {
	out := flag.String("out", "dist", "directory the artifacts are written to (emptied first)")
	version := flag.String("version", "", "version to stamp (default: what scripts/version.sh says of the checkout)")
	commit := flag.String("commit", "", "commit to stamp (default: git rev-parse HEAD)")
	targets := flag.String("targets", strings.Join(Targets, ","), "comma-separated os/arch pairs")
	licenses := flag.String("licenses", "", "only write the dependency-license report of the one target in -targets to this file (make packages)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "release: no arguments expected, got", flag.Args())
		os.Exit(2)
	}
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	p := Plan{
		Root:     root,
		Out:      *out,
		Version:  *version,
		Commit:   *commit,
		Targets:  splitList(*targets),
		Binaries: Binaries,
		Go:       goCommand(),
		Log:      os.Stderr,
	}
	if p.Version == "" {
		p.Version = gitVersion(root)
	}
	if p.Commit == "" {
		p.Commit = gitCommit(root)
	}
	if *licenses != "" {
		if err := p.WriteLicenses(*licenses); err != nil {
			fmt.Fprintln(os.Stderr, "release:", err)
			os.Exit(1)
		}
		return
	}
	if p.Epoch, err = sourceEpoch(root, os.Getenv("SOURCE_DATE_EPOCH")); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(2)
	}
	if err := p.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// gitVersion is the semantic version scripts/version.sh gives the
// checkout (v0.0.0-dev when that fails).
func gitVersion(root string) string {
	cmd := exec.Command("sh", filepath.Join(root, "scripts", "version.sh"), root)
	b, err := cmd.Output()
	if v := strings.TrimSpace(string(b)); err == nil && v != "" {
		return v
	}
	return "v0.0.0-dev"
}

// gitCommit is the checkout's commit, or "" outside git.
func gitCommit(root string) string {
	cmd := exec.Command("git", "rev-parse", "HEAD")
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// sourceEpoch is the time every archive entry carries: SOURCE_DATE_EPOCH
// when set (the reproducible-builds convention), else the last commit's
// time, else the Unix epoch.
func sourceEpoch(root, env string) (time.Time, error) {
	if env != "" {
		n, err := strconv.ParseInt(env, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a non-negative count of seconds", env)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	cmd := exec.Command("git", "log", "-1", "--format=%ct")
	cmd.Dir = root
	if b, err := cmd.Output(); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return time.Unix(n, 0).UTC(), nil
		}
	}
	return time.Unix(0, 0).UTC(), nil
}

// validVersion refuses a version that would make an odd file name or an
// odd -X flag.
func validVersion(v string) error {
	if v == "" || len(v) > 64 {
		return fmt.Errorf("version %q: want 1 to 64 characters", v)
	}
	for _, r := range v {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-+_", r)
		if !ok {
			return fmt.Errorf("version %q: only letters, digits and . - + _ are allowed", v)
		}
	}
	return nil
}

// validCommit accepts an empty commit or 4 to 64 hex digits.
func validCommit(c string) error {
	if c == "" {
		return nil
	}
	if len(c) < 4 || len(c) > 64 || strings.Trim(c, "0123456789abcdefABCDEF") != "" {
		return fmt.Errorf("commit %q: want 4 to 64 hex digits", c)
	}
	return nil
}

// Run builds every target and writes the archives, SBOMs and SHA256SUMS.
func (p Plan) Run() error {
	if err := validVersion(p.Version); err != nil {
		return err
	}
	if err := validCommit(p.Commit); err != nil {
		return err
	}
	if len(p.Targets) == 0 || len(p.Binaries) == 0 {
		return errors.New("nothing to build: no targets or no binaries")
	}
	for _, t := range p.Targets {
		if !slices.Contains(Targets, t) {
			return fmt.Errorf("target %q is not one of %s", t, strings.Join(Targets, ", "))
		}
	}
	if p.Log == nil {
		p.Log = io.Discard
	}
	if err := os.RemoveAll(p.Out); err != nil {
		return err
	}
	stage := filepath.Join(p.Out, "stage")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	var artifacts []string
	began := time.Now()
	for i, t := range p.Targets {
		fmt.Fprintf(p.Log, "release: [%d/%d] %s (%s so far)\n", i+1, len(p.Targets), t, time.Since(began).Round(time.Second))
		names, err := p.target(stage, t)
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		artifacts = append(artifacts, names...)
	}
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	if err := writeSums(p.Out, artifacts); err != nil {
		return err
	}
	fmt.Fprintf(p.Log, "release: %d artifacts and SHA256SUMS in %s, %s\n", len(artifacts), p.Out, time.Since(began).Round(time.Second))
	return nil
}

// target builds one platform's binaries and writes its archive and SBOM,
// returning their file names.
func (p Plan) target(stage, t string) ([]string, error) {
	goos, goarch, _ := strings.Cut(t, "/")
	dir := filepath.Join(stage, goos+"_"+goarch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []archiveFile
	var sbom bytes.Buffer
	for _, b := range p.Binaries {
		name := b
		if goos == "windows" {
			name += ".exe"
		}
		bin := filepath.Join(dir, name)
		fmt.Fprintf(p.Log, "release: building %s for %s\n", b, t)
		if err := p.build(goos, goarch, b, bin); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		files = append(files, archiveFile{name: name, data: data, mode: 0o755})
		// `go version -m` lists the Go version, the main module, every
		// dependency with its version and hash, and the build settings:
		// the bill of materials a scanner needs.
		cmd := exec.Command(p.Go, "version", "-m", bin)
		cmd.Dir = p.Root
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go version -m %s: %w", name, err)
		}
		// Its first line starts with the path it was given: name the
		// binary instead, so the SBOM does not depend on where it was built.
		out = bytes.Replace(out, []byte(bin+":"), []byte(name+":"), 1)
		sbom.Write(out)
	}
	for _, f := range extraFiles {
		data, err := os.ReadFile(filepath.Join(p.Root, f))
		if err != nil {
			return nil, err
		}
		files = append(files, archiveFile{name: f, data: data, mode: 0o644})
	}
	report, err := p.licenseReport(goos, goarch)
	if err != nil {
		return nil, err
	}
	files = append(files, archiveFile{name: LicensesFile, data: report, mode: 0o644})
	base := fmt.Sprintf("aperio_%s_%s_%s", p.Version, goos, goarch)
	var archive []byte
	if goos == "windows" {
		base += ".zip"
		archive, err = zipArchive(files, p.Epoch)
	} else {
		base += ".tar.gz"
		archive, err = tarGzArchive(files, p.Epoch)
	}
	if err != nil {
		return nil, err
	}
	sbomName := fmt.Sprintf("aperio_%s_%s_%s.sbom.txt", p.Version, goos, goarch)
	if err := os.WriteFile(filepath.Join(p.Out, base), archive, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.Out, sbomName), sbom.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return []string{base, sbomName}, nil
}

// WriteLicenses writes the dependency-license report of the plan's one
// target to path: what `make packages` puts in the packages.
func (p Plan) WriteLicenses(path string) error {
	if len(p.Targets) != 1 || !slices.Contains(Targets, p.Targets[0]) {
		return fmt.Errorf("-licenses wants exactly one of the targets %s, got %q", strings.Join(Targets, ", "), p.Targets)
	}
	goos, goarch, _ := strings.Cut(p.Targets[0], "/")
	report, err := p.licenseReport(goos, goarch)
	if err != nil {
		return err
	}
	return os.WriteFile(path, report, 0o644)
}

// build runs go build for one binary: static, without paths or a build ID
// that would vary between machines.
func (p Plan) build(goos, goarch, name, out string) error {
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s=%s", versionVar, p.Version)
	if p.Commit != "" {
		ldflags += fmt.Sprintf(" -X %s=%s", commitVar, p.Commit)
	}
	cmd := exec.Command(p.Go, "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/"+name)
	cmd.Dir = p.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=")
	cmd.Env = append(cmd.Env, p.Env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", name, err, stderr.String())
	}
	return nil
}

type archiveFile struct {
	name string
	data []byte
	mode int64
}

// tarGzArchive packs files in the order given, every entry owned by root
// and timed at epoch, and gzips them with no name or time in the header.
func tarGzArchive(files []archiveFile, epoch time.Time) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{
			Name:     f.name,
			Mode:     f.mode,
			Size:     int64(len(f.data)),
			ModTime:  epoch,
			Typeflag: tar.TypeReg,
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// zipArchive packs files in the order given, each timed at epoch.
func zipArchive(files []archiveFile, epoch time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: epoch}
		h.SetMode(os.FileMode(f.mode))
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeSums writes SHA256SUMS over the named files of dir, sorted by name,
// in the format `sha256sum -c` reads.
func writeSums(dir string, names []string) error {
	names = slices.Sorted(slices.Values(names))
	var out bytes.Buffer
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&out, "%s  %s\n", hex.EncodeToString(sum[:]), n)
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), out.Bytes(), 0o644)
}
