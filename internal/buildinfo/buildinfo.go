// Package buildinfo owns the version string both binaries report.
package buildinfo

import "runtime/debug"

// version is set at link time: -ldflags "-X github.com/aperio-dev/aperio/internal/buildinfo.version=v1.2.3".
var version string

// Version returns the linked version, the module version when built with
// `go install`, or "dev".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
