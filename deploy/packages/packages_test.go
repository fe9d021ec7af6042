package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// inCI is true in the CI run, where every tool these tests need is
// installed: there a missing tool fails the test instead of skipping it.
var inCI = os.Getenv("CI") == "true"

func need(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if inCI {
			t.Fatalf("%s not found; .ci/run installs it", tool)
		}
		t.Skipf("%s not found (CI installs it)", tool)
	}
}

// fakeBins writes two small executables standing in for the real
// binaries: the packaging does not look inside them.
func fakeBins(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []string{"aperio-server", "aperio-client"} {
		script := "#!/bin/sh\necho " + b + " test-build\n"
		if err := os.WriteFile(filepath.Join(dir, b), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, licensesFile), []byte(fakeReport), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, prog := range []string{"aperio-server", "aperio-client"} {
		for _, f := range docFiles(prog) {
			path := filepath.Join(dir, f.src)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte("generated "+f.src+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// fakeReport stands in for deploy/release's license report.
const fakeReport = "Licenses of the code linked into the test build\n"

func build(t *testing.T, version string) (string, []string) {
	t.Helper()
	return buildFrom(t, version, fakeBins(t))
}

// buildFrom builds the packages of version from the binaries in bin.
func buildFrom(t *testing.T, version, bin string) (string, []string) {
	t.Helper()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	names, err := Build{Bin: bin, Arch: "amd64", Version: version, Out: out, Here: here, MTime: time.Unix(1700000000, 0).UTC()}.Run()
	if err != nil {
		t.Fatal(err)
	}
	return out, names
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestDebContents: each .deb holds its binary, unit, sysusers entry and
// config files with the right modes, marks the config files as conffiles,
// and carries the maintainer scripts.
func TestDebContents(t *testing.T) {
	need(t, "dpkg-deb")
	out, names := build(t, "v1.2.3")
	want := []string{"aperio-server_1.2.3-1_amd64.deb", "aperio-server-1.2.3-1.x86_64.rpm", "aperio-client_1.2.3-1_amd64.deb", "aperio-client-1.2.3-1.x86_64.rpm"}
	for _, w := range want {
		if !slices.Contains(names, filepath.Join(out, w)) {
			t.Errorf("built %v, want %s among them", names, w)
		}
	}
	cases := []struct {
		deb       string
		files     []string // "mode path"
		conffiles []string
	}{
		{"aperio-server_1.2.3-1_amd64.deb",
			[]string{"-rwxr-xr-x ./usr/bin/aperio-server", "-rw-r--r-- ./usr/lib/systemd/system/aperio-server.service",
				"-rw-r--r-- ./usr/lib/sysusers.d/aperio-server.conf", "-rw-r--r-- ./usr/lib/tmpfiles.d/aperio-server.conf",
				"-rw-r--r-- ./etc/aperio/aperio-server.yaml", "-rw------- ./etc/aperio/aperio-server.env",
				"-rw-r--r-- ./usr/share/doc/aperio-server/copyright", "-rw-r--r-- ./usr/share/doc/aperio-server/LICENSE-THIRD-PARTY.txt",
				"-rw-r--r-- ./usr/share/man/man1/aperio-server.1.gz", "-rw-r--r-- ./usr/share/bash-completion/completions/aperio-server",
				"-rw-r--r-- ./usr/share/zsh/vendor-completions/_aperio-server", "-rw-r--r-- ./usr/share/fish/vendor_completions.d/aperio-server.fish"},
			[]string{"/etc/aperio/aperio-server.yaml", "/etc/aperio/aperio-server.env"}},
		{"aperio-client_1.2.3-1_amd64.deb",
			[]string{"-rwxr-xr-x ./usr/bin/aperio-client", "-rw-r--r-- ./usr/lib/systemd/system/aperio-client@.service",
				"-rw-r--r-- ./usr/lib/sysusers.d/aperio-client.conf", "-rw-r--r-- ./usr/share/doc/aperio-client/example.yaml",
				"drwxr-xr-x ./etc/aperio/client/",
				"-rw-r--r-- ./usr/share/doc/aperio-client/copyright", "-rw-r--r-- ./usr/share/doc/aperio-client/LICENSE-THIRD-PARTY.txt",
				"-rw-r--r-- ./usr/share/man/man1/aperio-client.1.gz", "-rw-r--r-- ./usr/share/bash-completion/completions/aperio-client",
				"-rw-r--r-- ./usr/share/zsh/vendor-completions/_aperio-client", "-rw-r--r-- ./usr/share/fish/vendor_completions.d/aperio-client.fish"},
			nil},
	}
	for _, c := range cases {
		deb := filepath.Join(out, c.deb)
		listing := run(t, "dpkg-deb", "-c", deb)
		got := map[string]bool{}
		for _, line := range strings.Split(listing, "\n") {
			f := strings.Fields(line)
			if len(f) >= 6 {
				got[f[0]+" "+f[5]] = true
				if f[1] != "root/root" {
					t.Errorf("%s: %s owned by %s, want root/root", c.deb, f[5], f[1])
				}
			}
		}
		for _, w := range c.files {
			if !got[w] {
				t.Errorf("%s lacks %q:\n%s", c.deb, w, listing)
			}
		}
		if strings.Contains(listing, "/usr/share/licenses/") {
			t.Errorf("%s holds rpm's /usr/share/licenses:\n%s", c.deb, listing)
		}
		pkg := strings.Split(c.deb, "_")[0]
		tree := t.TempDir()
		run(t, "dpkg-deb", "-x", deb, tree)
		copyright, _ := os.ReadFile(filepath.Join(tree, "usr/share/doc", pkg, "copyright"))
		for _, w := range []string{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", "\nLicense: Apache-2.0\n",
			"/usr/share/common-licenses/Apache-2.0", "/usr/share/doc/" + pkg + "/LICENSE-THIRD-PARTY.txt"} {
			if !strings.Contains(string(copyright), w) {
				t.Errorf("%s: its copyright file lacks %q:\n%s", c.deb, w, copyright)
			}
		}
		if report, _ := os.ReadFile(filepath.Join(tree, "usr/share/doc", pkg, licensesFile)); string(report) != fakeReport {
			t.Errorf("%s: the license report is %q, want the one built beside the binaries", c.deb, report)
		}
		ctl := t.TempDir()
		run(t, "dpkg-deb", "-e", deb, ctl)
		conf, _ := os.ReadFile(filepath.Join(ctl, "conffiles"))
		g := strings.Fields(string(conf))
		slices.Sort(g)
		w := slices.Sorted(slices.Values(c.conffiles))
		if !slices.Equal(g, w) {
			t.Errorf("%s conffiles %q, want %q", c.deb, g, w)
		}
		for _, s := range []string{"preinst", "postinst", "prerm", "postrm"} {
			st, err := os.Stat(filepath.Join(ctl, s))
			if err != nil || st.Mode()&0o111 == 0 {
				t.Errorf("%s: maintainer script %s missing or not executable (%v)", c.deb, s, err)
			}
			want, _ := os.ReadFile(filepath.Join("scripts", "deb", pkg+"."+s))
			if got, _ := os.ReadFile(filepath.Join(ctl, s)); s != "preinst" && string(got) != string(want) {
				t.Errorf("%s: its %s is not scripts/deb/%s.%s", c.deb, s, pkg, s)
			}
		}
	}
}

// TestRPMContents: each .rpm lists the same files, with the config files
// marked %config(noreplace).
func TestRPMContents(t *testing.T) {
	need(t, "rpm")
	out, _ := build(t, "v1.2.3")
	rpm := filepath.Join(out, "aperio-server-1.2.3-1.x86_64.rpm")
	list := run(t, "rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILEFLAGS:fflags} %{FILENAMES}\n]", rpm)
	for _, w := range []string{"-rwxr-xr-x  /usr/bin/aperio-server", "-rw-r--r-- cn /etc/aperio/aperio-server.yaml",
		"-rw------- cn /etc/aperio/aperio-server.env", "-rw-r--r--  /usr/lib/systemd/system/aperio-server.service"} {
		if !strings.Contains(list, w) {
			t.Errorf("%s lacks %q:\n%s", filepath.Base(rpm), w, list)
		}
	}
	for _, w := range []string{"-rw-r--r-- l /usr/share/licenses/aperio-server/LICENSE", "-rw-r--r-- l /usr/share/licenses/aperio-server/LICENSE-THIRD-PARTY.txt"} {
		if !strings.Contains(list, w) {
			t.Errorf("%s lacks the license file %q:\n%s", filepath.Base(rpm), w, list)
		}
	}
	for _, w := range []string{"/usr/share/man/man1/aperio-server.1.gz", "/usr/share/zsh/site-functions/_aperio-server", "/usr/share/bash-completion/completions/aperio-server"} {
		if !strings.Contains(list, w) {
			t.Errorf("%s lacks %s:\n%s", filepath.Base(rpm), w, list)
		}
	}
	if strings.Contains(list, "/usr/share/doc/aperio-server/copyright") {
		t.Errorf("%s holds Debian's copyright file:\n%s", filepath.Base(rpm), list)
	}
	scripts := run(t, "rpm", "-qp", "--scripts", rpm)
	for _, w := range []string{"useradd --system", "systemctl --no-reload preset aperio-server.service", "systemctl try-restart aperio-server.service", "disable --now aperio-server.service"} {
		if !strings.Contains(scripts, w) {
			t.Errorf("the rpm's scripts lack %q:\n%s", w, scripts)
		}
	}
	if !strings.Contains(list, "/usr/lib/systemd/system-preset/80-aperio-server.preset") {
		t.Errorf("%s lacks the preset that enables the server:\n%s", filepath.Base(rpm), list)
	}
}

// TestUnitsVerify: systemd accepts both units without a warning, and
// their sandboxing keeps systemd-analyze's exposure score at or below 2.0
// (of 10). The binaries' paths are pointed at a stand-in, which verify
// needs to exist.
func TestUnitsVerify(t *testing.T) {
	need(t, "systemd-analyze")
	dir := t.TempDir()
	stand := filepath.Join(dir, "stand-in")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{"aperio-server.service": "aperio-server.service", "aperio-client@.service": "aperio-client@web.service"} {
		data, err := os.ReadFile(filepath.Join("files", src))
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.ReplaceAll(data, []byte("/usr/bin/aperio-server"), []byte(stand))
		data = bytes.ReplaceAll(data, []byte("/usr/bin/aperio-client"), []byte(stand))
		unit := filepath.Join(dir, dst)
		if err := os.WriteFile(unit, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if out := run(t, "systemd-analyze", "verify", unit); strings.TrimSpace(out) != "" {
			t.Errorf("systemd-analyze verify %s:\n%s", src, out)
		}
		out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--threshold=20", unit).CombinedOutput()
		if err != nil {
			t.Errorf("%s is exposed above 2.0: %v\n%s", src, err, out)
		}
		if i := bytes.Index(out, []byte("Overall exposure level")); i >= 0 {
			t.Logf("%s", bytes.TrimSpace(out[i:]))
		}
	}
	// Only the server may bind low ports; the client holds no capability.
	server, _ := os.ReadFile("files/aperio-server.service")
	client, _ := os.ReadFile("files/aperio-client@.service")
	if !bytes.Contains(server, []byte("AmbientCapabilities=CAP_NET_BIND_SERVICE")) || !bytes.Contains(client, []byte("CapabilityBoundingSet=\n")) {
		t.Error("the server must hold CAP_NET_BIND_SERVICE only, the client no capability")
	}
	if bytes.Contains(client, []byte("AmbientCapabilities")) {
		t.Error("the client unit grants a capability")
	}
}

// TestPackageVersion: release tags lose their v; pre-releases and dev
// builds get a tilde; hyphens in the pre-release and build become dots;
// bare commit hashes and hostile versions are refused.
func TestPackageVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3": "1.2.3", "1.2.3": "1.2.3", "v1.2.3-rc.1": "1.2.3~rc.1",
		"v1.2.4-dev.3+g0123456789ab":       "1.2.4~dev.3+g0123456789ab",
		"v1.2.4-dev.0+g0123456789ab.dirty": "1.2.4~dev.0+g0123456789ab.dirty",
		"v0.0.0-dev.818+g305661b9041e":     "0.0.0~dev.818+g305661b9041e",
		"v2.0.0-beta-2+build-7":            "2.0.0~beta.2+build.7",
	} {
		if got, err := PackageVersion(in); err != nil || got != want {
			t.Errorf("PackageVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.0; rm -rf /", "v1\nDepends: evil", strings.Repeat("1", 65), "../x",
		"bbd9c7d", "bbd9c7d-dirty", "v1", "v1.2", "v1.2.3.4", "v01.2.3", "v1.2.3-", "v1.2.3+", "v1.2.3~rc1", "v1.2.x"} {
		if got, err := PackageVersion(bad); err == nil {
			t.Errorf("PackageVersion(%q) = %q, want it refused", bad, got)
		}
	}
	if _, err := (Build{Bin: t.TempDir(), Arch: "amd64", Version: "v1.0.0"}).Run(); err == nil {
		t.Error("Run accepted a bin directory without the binaries")
	}
	if _, err := (Build{Bin: fakeBins(t), Arch: "s390x", Version: "v1.0.0"}).Run(); err == nil {
		t.Error("Run accepted an unsupported arch")
	}
}

// TestPackageVersionOrder: dpkg and rpm order the package versions (with
// the package's revision or release, -1) as semver orders the versions
// they come from, so every upgrade along this line is an upgrade to apt
// and to dnf.
func TestPackageVersionOrder(t *testing.T) {
	need(t, "dpkg")
	need(t, "rpm")
	line := []string{
		"v0.0.0-dev.9+gffffffffffff",
		"v0.0.0-dev.10+g000000000000",
		"v0.0.0-dev.10+g000000000000.dirty",
		"v0.1.0-rc.1",
		"v0.1.0-rc.1.dev.2+gabcdefabcdef",
		"v0.1.0-rc.2",
		"v0.1.0",
		"v0.1.1-dev.1+g123456789abc",
		"v0.1.1-dev.12+g023456789abc",
		"v0.1.1",
		"v0.2.0",
		"v0.10.0",
		"v1.0.0",
	}
	for i := 1; i < len(line); i++ {
		older, err := PackageVersion(line[i-1])
		if err != nil {
			t.Fatal(err)
		}
		newer, err := PackageVersion(line[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := exec.Command("dpkg", "--compare-versions", older+"-1", "lt", newer+"-1").Run(); err != nil {
			t.Errorf("dpkg does not order %s (%s) before %s (%s): %v", older, line[i-1], newer, line[i], err)
		}
		// rpm's own comparison of two version-release strings: -1 when
		// the first is older.
		out, err := exec.Command("rpm", "--eval", fmt.Sprintf("%%{lua: print(rpm.vercmp(%q, %q))}", older+"-1", newer+"-1")).Output()
		if err != nil || strings.TrimSpace(string(out)) != "-1" {
			t.Errorf("rpm does not order %s (%s) before %s (%s): vercmp = %q, %v", older, line[i-1], newer, line[i], out, err)
		}
	}
}

// debianRoot returns a throwaway Debian root the install tests run in,
// named by the variable env (APERIO_TEST_DEBIAN_ROOT, or
// APERIO_TEST_DEBIAN_SYSTEMD_ROOT for one with systemd; both made by
// debootstrap in .ci/run), waiting for it while .ci/run still builds it in
// the background.
func debianRoot(t *testing.T, env string) string {
	t.Helper()
	root := os.Getenv(env)
	if root == "" {
		if inCI {
			t.Fatalf("%s is unset; .ci/run makes it with debootstrap", env)
		}
		t.Skipf("%s unset: debootstrap --variant=minbase bookworm DIR, touch DIR/.ready, export it", env)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(root, ".ready")); err == nil {
			return root
		}
		if b, err := os.ReadFile(filepath.Join(root, ".failed")); err == nil {
			t.Fatalf("making the Debian root failed:\n%s", b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 10 minutes", root)
		}
		time.Sleep(2 * time.Second) // .ci/run's debootstrap is another process: poll its marker
	}
}

// TestInstallRemovePurge installs both .debs with dpkg in a throwaway
// Debian root, checks the files, the users and that an edited conffile
// survives an upgrade; then removes (conffiles stay) and purges them
// (conffiles gone, nothing of the packages left but the users and the
// state directory, which are kept on purpose).
func TestInstallRemovePurge(t *testing.T) {
	if os.Geteuid() != 0 {
		if inCI {
			t.Fatal("CI runs as root; chroot needs it")
		}
		t.Skip("needs root for chroot")
	}
	root := debianRoot(t, "APERIO_TEST_DEBIAN_ROOT")
	out, _ := build(t, "v1.2.3")
	outNext, _ := build(t, "v1.2.4")
	tmp := filepath.Join(root, "tmp", "aperio-packages-test")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	for _, d := range []string{out, outNext} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, e.Name()), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	chroot := func(args ...string) string {
		t.Helper()
		return run(t, "chroot", append([]string{root}, args...)...)
	}
	in := func(p string) string { return filepath.Join(root, p) }
	t.Cleanup(func() {
		exec.Command("chroot", root, "dpkg", "--purge", "aperio-server", "aperio-client").Run()
	})

	chroot("dpkg", "-i", "/tmp/aperio-packages-test/aperio-server_1.2.3-1_amd64.deb", "/tmp/aperio-packages-test/aperio-client_1.2.3-1_amd64.deb")
	// The install enables the server (deb-systemd-helper works without a
	// running systemd): the link that starts it at boot.
	wants := in("etc/systemd/system/multi-user.target.wants/aperio-server.service")
	if _, err := os.Lstat(wants); err != nil {
		t.Errorf("the install did not enable aperio-server: %v", err)
	}
	if got := chroot("/usr/bin/aperio-server"); !strings.Contains(got, "aperio-server test-build") {
		t.Errorf("installed aperio-server runs as %q", got)
	}
	for _, u := range []string{"aperio", "aperio-client"} {
		line := chroot("getent", "passwd", u)
		if !strings.Contains(line, "/usr/sbin/nologin") {
			t.Errorf("user %s: %q, want a system user without a login shell", u, line)
		}
	}
	st, err := os.Stat(in("etc/aperio/aperio-server.env"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("aperio-server.env: %v %v, want mode 0600", st, err)
	}
	for _, f := range []string{"usr/lib/systemd/system/aperio-server.service", "usr/lib/systemd/system/aperio-client@.service", "usr/lib/sysusers.d/aperio-server.conf", "etc/aperio/client"} {
		if _, err := os.Stat(in(f)); err != nil {
			t.Errorf("installed package lacks /%s: %v", f, err)
		}
	}

	// An operator edits the config; the upgrade keeps the edit.
	edited := []byte("port: 9999\ndata_dir: /var/lib/aperio\n")
	if err := os.WriteFile(in("etc/aperio/aperio-server.yaml"), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	chroot("dpkg", "-i", "--force-confold", "/tmp/aperio-packages-test/aperio-server_1.2.4-1_amd64.deb")
	if got, _ := os.ReadFile(in("etc/aperio/aperio-server.yaml")); !bytes.Equal(got, edited) {
		t.Errorf("the upgrade replaced the edited config:\n%s", got)
	}
	if v := chroot("dpkg-query", "-W", "-f=${Version}", "aperio-server"); v != "1.2.4-1" {
		t.Errorf("after the upgrade dpkg says version %q", v)
	}
	if _, err := os.Lstat(wants); err != nil {
		t.Errorf("the upgrade disabled aperio-server: %v", err)
	}

	chroot("dpkg", "--remove", "aperio-server", "aperio-client")
	if _, err := os.Stat(in("usr/bin/aperio-server")); !os.IsNotExist(err) {
		t.Errorf("remove left /usr/bin/aperio-server: %v", err)
	}
	if _, err := os.Stat(in("etc/aperio/aperio-server.yaml")); err != nil {
		t.Errorf("remove (not purge) deleted the config: %v", err)
	}
	if _, err := os.Lstat(wants); err != nil {
		t.Errorf("remove (not purge) forgot that aperio-server was enabled: %v", err)
	}
	chroot("dpkg", "--purge", "aperio-server", "aperio-client")
	if _, err := os.Lstat(wants); !os.IsNotExist(err) {
		t.Errorf("purge left the link enabling aperio-server: %v", err)
	}
	for _, f := range []string{"etc/aperio/aperio-server.yaml", "etc/aperio/aperio-server.env", "usr/lib/systemd/system/aperio-server.service", "usr/bin/aperio-client"} {
		if _, err := os.Stat(in(f)); !os.IsNotExist(err) {
			t.Errorf("purge left /%s: %v", f, err)
		}
	}
	if s := chroot("sh", "-c", "dpkg-query -W -f='${Status}' aperio-server 2>&1 || true"); strings.Contains(s, "installed") && !strings.Contains(s, "not-installed") {
		t.Errorf("after purge dpkg still knows aperio-server: %q", s)
	}
}
