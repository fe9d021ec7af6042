// Package buildinfo owns what both binaries report about their build: the
// version, the commit, the Go release and the platform.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// version is set at link time: -ldflags "-X github.com/aperio-dev/aperio/internal/buildinfo.version=v1.2.3".
var version string

// commit may be set at link time the same way (buildinfo.commit=SHA), for
// builds from a tree without its .git (an image build): it is used when
// the build recorded no vcs.revision.
var commit string

// Version returns the linked version, the module version when built with
// `go install`, or "dev".
func Version() string { return read().Version }

// Info is what `version` and --version print.
type Info struct {
	Version string
	// Commit is the VCS revision the binary was built from (vcs.revision),
	// or "unknown" when the build recorded none (go test, -buildvcs=false,
	// a tree outside version control).
	Commit string
	// Modified is set when the tree had uncommitted changes (vcs.modified).
	Modified bool
	// GoVersion is the Go release that built the binary.
	GoVersion string
	// OS and Arch are the platform the binary runs on.
	OS, Arch string
}

// Read returns the running binary's Info.
func Read() Info { return read() }

// read parses the build record once: it never changes while the binary
// runs, and every announcement and health answer asks for the version
// (debug.ReadBuildInfo parses the embedded module list on each call).
var read = sync.OnceValue(func() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuild(version, commit, bi)
})

// fromBuild assembles Info from the linked version and commit and the
// build's record (nil when there is none).
func fromBuild(linked, linkedCommit string, bi *debug.BuildInfo) Info {
	in := Info{Version: linked, Commit: "unknown", GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if linkedCommit != "" {
		in.Commit = linkedCommit
	}
	if bi != nil {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if s.Value != "" {
					in.Commit = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	return in
}

// Text is the report of program's build, one field a line:
//
//	aperio-server v1.2.3
//	commit:   0123abcd… (modified)
//	go:       go1.25.1
//	platform: linux/amd64
func (in Info) Text(program string) string {
	commit := in.Commit
	if in.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("%s %s\ncommit:   %s\ngo:       %s\nplatform: %s/%s\n", program, in.Version, commit, in.GoVersion, in.OS, in.Arch)
}
