package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
func TestReleaseIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds twice from a cold cache (about a minute); CI runs it without -short")
	}
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
	if err := plan(a).Run(); err != nil {
		t.Fatal(err)
	}
	if err := plan(b, "GOCACHE="+t.TempDir()).Run(); err != nil {
		t.Fatal(err)
	}
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
	if _, ok := files["README.md"]; !ok {
		t.Errorf("archive holds no README.md")
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
