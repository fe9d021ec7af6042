package buildinfo

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestFromBuild(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "github.com/aperio-dev/aperio", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name         string
		linked       string
		linkedCommit string
		bi           *debug.BuildInfo
		want         Info
	}{
		{"no record", "", "", nil, Info{Version: "dev", Commit: "unknown", GoVersion: runtime.Version()}},
		{"devel, no vcs", "", "", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}},
			Info{Version: "dev", Commit: "unknown", GoVersion: "go1.99.1"}},
		{"stamped", "", "", stamped, Info{Version: "v1.4.0", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true, GoVersion: "go1.99.1"}},
		{"linked version wins", "v2.0.0-rc1", "", stamped, Info{Version: "v2.0.0-rc1", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true, GoVersion: "go1.99.1"}},
		{"linked commit without vcs", "v2.0.0", "feedface", &debug.BuildInfo{GoVersion: "go1.99.1"},
			Info{Version: "v2.0.0", Commit: "feedface", GoVersion: "go1.99.1"}},
		{"vcs wins over a linked commit", "", "feedface", stamped, Info{Version: "v1.4.0", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true, GoVersion: "go1.99.1"}},
		{"empty revision", "", "", &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision"}}},
			Info{Version: "dev", Commit: "unknown", GoVersion: runtime.Version()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.OS, tt.want.Arch = runtime.GOOS, runtime.GOARCH
			if got := fromBuild(tt.linked, tt.linkedCommit, tt.bi); got != tt.want {
				t.Errorf("fromBuild = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	in := Info{Version: "v1.4.0", Commit: "abc123", Modified: true, GoVersion: "go1.99.1", OS: "linux", Arch: "arm64"}
	want := "aperio-client v1.4.0\ncommit:   abc123 (modified)\ngo:       go1.99.1\nplatform: linux/arm64\n"
	if got := in.Text("aperio-client"); got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	in.Modified = false
	if got := in.Text("x"); strings.Contains(got, "modified") {
		t.Errorf("Text of an unmodified tree = %q, want no (modified)", got)
	}
}

// TestAddVersion: `version` and --version print the same report, the
// running binary's; `version` takes no argument.
func TestAddVersion(t *testing.T) {
	exec := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := &cobra.Command{Use: "prog", RunE: func(*cobra.Command, []string) error { return nil }, SilenceUsage: true, SilenceErrors: true}
		AddVersion(root, "prog", &out)
		root.SetOut(&out)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	want := Read().Text("prog")
	for _, args := range [][]string{{"version"}, {"--version"}} {
		got, err := exec(args...)
		if err != nil || got != want {
			t.Errorf("prog %v = %q, %v; want %q", args, got, err, want)
		}
	}
	if !strings.HasPrefix(want, "prog "+Version()+"\ncommit:   "+Read().Commit+"\ngo:       "+runtime.Version()+"\n") {
		t.Errorf("report %q lacks the version, commit or Go release", want)
	}
	if _, err := exec("version", "extra"); err == nil {
		t.Error("version extra succeeded, want an error")
	}
}

// TestVersionTemplateVerbatim: a linked version that looks like a template
// prints as written.
func TestVersionTemplateVerbatim(t *testing.T) {
	old := read
	read = func() Info { in := old(); in.Version = "v1{{.Name}}"; return in }
	t.Cleanup(func() { read = old })
	var out bytes.Buffer
	root := &cobra.Command{Use: "prog", Run: func(*cobra.Command, []string) {}}
	AddVersion(root, "prog", &out)
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil || !strings.HasPrefix(out.String(), "prog v1{{.Name}}\n") {
		t.Errorf("--version = %q, %v; want the version verbatim", out.String(), err)
	}
}
