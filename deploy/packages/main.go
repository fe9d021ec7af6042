// Command packages builds Aperio's Linux packages, .deb and .rpm for
// aperio-server and aperio-client, from binaries already built for one
// architecture:
//
//	go run . -bin DIR -arch amd64 -version v1.2.3 -out DIR
//
// DIR holds aperio-server and aperio-client for linux/ARCH. `make packages`
// builds those and runs this for amd64 and arm64. It is a module of its own
// so that nfpm, the packaging library, stays out of Aperio's go.mod and
// binaries.
//
// What a package holds (files/ and scripts/ next to this file):
//   - the binary in /usr/bin;
//   - a hardened systemd unit: aperio-server.service (with
//     CAP_NET_BIND_SERVICE only), or aperio-client@.service (one client
//     config per instance, no capability);
//   - a system user (sysusers.d, and a preinst that creates it with
//     useradd on systems that do not run systemd-sysusers);
//   - default config files in /etc/aperio, kept on upgrade (conffiles);
//   - the server's state directory through tmpfiles.d and StateDirectory;
//   - its man page and bash, zsh and fish completions, which `make
//     packages` generates into DIR/docs with the binaries' hidden
//     __gendocs command (internal/clidoc);
//   - the license: Debian's copyright file in /usr/share/doc/NAME, the
//     repository's LICENSE in /usr/share/licenses/NAME for rpm, and in both
//     the report of the licenses of what the binary links
//     (LICENSE-THIRD-PARTY.txt, which `make packages` writes into DIR with
//     deploy/release -licenses).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// Formats are the package formats built for each binary.
var Formats = []string{"deb", "rpm"}

// Archs are the architectures packages are built for (Go's names; nfpm
// maps them to each format's: amd64→x86_64 for rpm, arm64→aarch64).
var Archs = []string{"amd64", "arm64"}

// Build is one architecture's packages.
type Build struct {
	Bin     string    // directory with aperio-server and aperio-client for linux/Arch
	Arch    string    // amd64 or arm64
	Version string    // the semantic version (v1.2.3, v1.2.4-dev.3+g0123abcd)
	Out     string    // where the packages are written
	Here    string    // the directory holding files/ and scripts/
	MTime   time.Time // every file's time in the packages
}

func main() {
	var b Build
	flag.StringVar(&b.Bin, "bin", "", "directory holding aperio-server and aperio-client built for linux/ARCH")
	flag.StringVar(&b.Arch, "arch", "amd64", "architecture: "+strings.Join(Archs, " or "))
	flag.StringVar(&b.Version, "version", "", "semantic version of the packages (scripts/version.sh: v1.2.3, v1.2.4-dev.3+g0123abcd)")
	flag.StringVar(&b.Out, "out", "dist/packages", "directory the packages are written to")
	flag.Parse()
	if b.Bin == "" || b.Version == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: packages -bin DIR -arch amd64|arm64 -version V [-out DIR]")
		os.Exit(2)
	}
	here, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "packages:", err)
		os.Exit(1)
	}
	b.Here = here
	b.MTime = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var n int64
		if _, err := fmt.Sscan(s, &n); err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "packages: SOURCE_DATE_EPOCH %q is not a count of seconds\n", s)
			os.Exit(2)
		}
		b.MTime = time.Unix(n, 0).UTC()
	}
	names, err := b.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "packages:", err)
		os.Exit(1)
	}
	for _, n := range names {
		fmt.Println(n)
	}
}

// PackageVersion turns a semantic version (scripts/version.sh) into one
// dpkg and rpm order as semver does: the v goes, a pre-release follows a
// tilde, which sorts before the release (v1.3.0-rc.1 → 1.3.0~rc.1,
// v1.2.4-dev.3+g0123abcd → 1.2.4~dev.3+g0123abcd), and hyphens inside the
// pre-release or build become dots (rpm refuses them in a version and dpkg
// would read the last one as the revision). Anything not semantic is
// refused: a bare commit hash cannot be ordered.
func PackageVersion(v string) (string, error) {
	if v == "" || len(v) > 64 {
		return "", fmt.Errorf("version %q: want 1 to 64 characters", v)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-+", r)) {
			return "", fmt.Errorf("version %q: only letters, digits and . - + are allowed", v)
		}
	}
	s := strings.TrimPrefix(v, "v")
	s, build, hasBuild := strings.Cut(s, "+")
	core, pre, hasPre := strings.Cut(s, "-")
	nums := strings.Split(core, ".")
	bad := len(nums) != 3 || hasPre && pre == "" || hasBuild && build == ""
	for _, n := range nums {
		bad = bad || n == "" || strings.Trim(n, "0123456789") != "" || len(n) > 1 && n[0] == '0'
	}
	if bad {
		return "", fmt.Errorf("version %q is not a semantic version (v1.2.3, v1.2.4-dev.3+g0123abcd): build with scripts/version.sh's", v)
	}
	out := core
	if hasPre {
		out += "~" + strings.ReplaceAll(pre, "-", ".")
	}
	if hasBuild {
		out += "+" + strings.ReplaceAll(build, "-", ".")
	}
	return out, nil
}

// Run writes the packages and returns their paths.
func (b Build) Run() ([]string, error) {
	if !slices.Contains(Archs, b.Arch) {
		return nil, fmt.Errorf("arch %q: want one of %s", b.Arch, strings.Join(Archs, ", "))
	}
	version, err := PackageVersion(b.Version)
	if err != nil {
		return nil, err
	}
	need := []string{"aperio-server", "aperio-client", licensesFile}
	for _, prog := range []string{"aperio-server", "aperio-client"} {
		for _, f := range docFiles(prog) {
			need = append(need, f.src)
		}
	}
	for _, bin := range need {
		if st, err := os.Stat(filepath.Join(b.Bin, bin)); err != nil {
			return nil, err
		} else if strings.HasPrefix(bin, "aperio-") && st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%s is not executable", filepath.Join(b.Bin, bin))
		}
	}
	if err := os.MkdirAll(b.Out, 0o755); err != nil {
		return nil, err
	}
	var out []string
	for _, info := range []*nfpm.Info{b.server(version), b.client(version)} {
		for _, format := range Formats {
			path, err := b.write(info, format)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", info.Name, format, err)
			}
			out = append(out, path)
		}
	}
	return out, nil
}

func (b Build) write(info *nfpm.Info, format string) (string, error) {
	p, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	// Each format fills its own defaults into the Info: give it a copy,
	// with the format's own maintainer scripts.
	cp := *info
	cp.Contents = append(files.Contents(nil), info.Contents...)
	cp.Scripts = b.scripts(info.Name, format)
	nfpm.WithDefaults(&cp)
	if err := nfpm.Validate(&cp); err != nil {
		return "", err
	}
	path := filepath.Join(b.Out, p.ConventionalFileName(&cp))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := p.Package(&cp, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	return path, f.Close()
}

// licensesFile is the report of the linked modules' licenses that DIR
// holds beside the binaries (deploy/release's LicensesFile).
const licensesFile = "LICENSE-THIRD-PARTY.txt"

func (b Build) file(name string) string { return filepath.Join(b.Here, "files", name) }

// scripts are the maintainer scripts of package name in format: the
// preinst that makes the system user (both formats), then each format's
// own, which follow its rules for services (scripts/deb: deb-systemd-helper
// and deb-systemd-invoke; scripts/rpm: the %systemd_post, %systemd_preun
// and %systemd_postun_with_restart conventions). docs/upgrading.md has the
// table of what install, upgrade, remove and purge do.
func (b Build) scripts(name, format string) nfpm.Scripts {
	dir := filepath.Join(b.Here, "scripts")
	pre := filepath.Join(dir, "preinstall-"+strings.TrimPrefix(name, "aperio-")+".sh")
	if format == "rpm" {
		s := func(phase string) string { return filepath.Join(dir, "rpm", name+"."+phase) }
		return nfpm.Scripts{PreInstall: pre, PostInstall: s("post"), PreRemove: s("preun"), PostRemove: s("postun")}
	}
	s := func(phase string) string { return filepath.Join(dir, "deb", name+"."+phase) }
	return nfpm.Scripts{PreInstall: pre, PostInstall: s("postinst"), PreRemove: s("prerm"), PostRemove: s("postrm")}
}

// common is what both packages share.
func (b Build) common(name, version, desc string) *nfpm.Info {
	return &nfpm.Info{
		Name:          name,
		Arch:          b.Arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Release:       "1",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    "Aperio developers <aperio@users.noreply.github.com>",
		Description:   desc,
		Homepage:      "https://github.com/aperio-dev/aperio",
		License:       "Apache-2.0",
		MTime:         b.MTime,
		Overridables: nfpm.Overridables{
			RPM: nfpm.RPM{BuildHost: "aperio-release", Group: "System Environment/Daemons"},
		},
	}
}

// docFile is one generated documentation file: its path under DIR (as
// the binaries' hidden __gendocs command writes it, internal/clidoc) and
// where the package installs it; packager "" is both formats.
type docFile struct {
	src, dst, packager string
}

// docFiles are prog's man page and shell completions, installed where
// each distribution's man and shells look for them.
func docFiles(prog string) []docFile {
	return []docFile{
		{filepath.Join("docs", "man1", prog+".1.gz"), "/usr/share/man/man1/" + prog + ".1.gz", ""},
		{filepath.Join("docs", "completions", "bash", prog), "/usr/share/bash-completion/completions/" + prog, ""},
		{filepath.Join("docs", "completions", "zsh", "_"+prog), "/usr/share/zsh/vendor-completions/_" + prog, "deb"},
		{filepath.Join("docs", "completions", "zsh", "_"+prog), "/usr/share/zsh/site-functions/_" + prog, "rpm"},
		{filepath.Join("docs", "completions", "fish", prog+".fish"), "/usr/share/fish/vendor_completions.d/" + prog + ".fish", ""},
	}
}

// docs are the package contents of prog's man page and completions.
func (b Build) docs(prog string) files.Contents {
	var out files.Contents
	for _, f := range docFiles(prog) {
		c := b.content(filepath.Join(b.Bin, f.src), f.dst, "", 0o644)
		c.Packager = f.packager
		out = append(out, c)
	}
	return out
}

// licenses are a package's license files: Debian's copyright file and the
// report under /usr/share/doc (Debian policy), the LICENSE and the report
// as %license files under /usr/share/licenses for rpm.
func (b Build) licenses(name string) files.Contents {
	report := filepath.Join(b.Bin, licensesFile)
	license := filepath.Join(b.Here, "..", "..", "LICENSE")
	deb := func(c *files.Content) *files.Content { c.Packager = "deb"; return c }
	rpm := func(c *files.Content) *files.Content { c.Packager = "rpm"; return c }
	return files.Contents{
		deb(b.content(b.file(name+".copyright"), "/usr/share/doc/"+name+"/copyright", "", 0o644)),
		deb(b.content(report, "/usr/share/doc/"+name+"/"+licensesFile, "", 0o644)),
		rpm(b.content(license, "/usr/share/licenses/"+name+"/LICENSE", files.TypeRPMLicense, 0o644)),
		rpm(b.content(report, "/usr/share/licenses/"+name+"/"+licensesFile, files.TypeRPMLicense, 0o644)),
	}
}

func (b Build) content(src, dst, typ string, mode os.FileMode) *files.Content {
	return &files.Content{
		Source:      src,
		Destination: dst,
		Type:        typ,
		FileInfo:    &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: b.MTime},
	}
}

func (b Build) server(version string) *nfpm.Info {
	info := b.common("aperio-server", version,
		"Aperio's public server: routes visitors' HTTP through tunnels to aperio-clients,\n"+
			"with per-client limits and autoscaling. Embedded SQLite store by default.")
	info.Overridables.Contents = files.Contents{
		b.content(filepath.Join(b.Bin, "aperio-server"), "/usr/bin/aperio-server", "", 0o755),
		b.content(b.file("aperio-server.service"), "/usr/lib/systemd/system/aperio-server.service", "", 0o644),
		b.content(b.file("aperio-server.sysusers"), "/usr/lib/sysusers.d/aperio-server.conf", "", 0o644),
		b.content(b.file("aperio-server.tmpfiles"), "/usr/lib/tmpfiles.d/aperio-server.conf", "", 0o644),
		b.content(b.file("aperio-server.yaml"), "/etc/aperio/aperio-server.yaml", files.TypeConfigNoReplace, 0o644),
		b.content(b.file("aperio-server.env"), "/etc/aperio/aperio-server.env", files.TypeConfigNoReplace, 0o600),
	}
	info.Overridables.Contents = append(info.Overridables.Contents, b.licenses("aperio-server")...)
	info.Overridables.Contents = append(info.Overridables.Contents, b.docs("aperio-server")...)
	preset := b.content(b.file("aperio-server.preset"), "/usr/lib/systemd/system-preset/80-aperio-server.preset", "", 0o644)
	preset.Packager = "rpm" // Debian enables through deb-systemd-helper, not presets
	info.Overridables.Contents = append(info.Overridables.Contents, preset)
	return info
}

func (b Build) client(version string) *nfpm.Info {
	info := b.common("aperio-client", version,
		"Aperio's client: runs beside a local app, dials out to an aperio-server\n"+
			"and publishes the app's hostnames through the tunnel.")
	info.Overridables.Contents = files.Contents{
		b.content(filepath.Join(b.Bin, "aperio-client"), "/usr/bin/aperio-client", "", 0o755),
		b.content(b.file("aperio-client@.service"), "/usr/lib/systemd/system/aperio-client@.service", "", 0o644),
		b.content(b.file("aperio-client.sysusers"), "/usr/lib/sysusers.d/aperio-client.conf", "", 0o644),
		b.content(b.file("client-example.yaml"), "/usr/share/doc/aperio-client/example.yaml", "", 0o644),
		{Destination: "/etc/aperio/client", Type: files.TypeDir,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: 0o755, MTime: b.MTime}},
	}
	info.Overridables.Contents = append(info.Overridables.Contents, b.licenses("aperio-client")...)
	info.Overridables.Contents = append(info.Overridables.Contents, b.docs("aperio-client")...)
	return info
}
