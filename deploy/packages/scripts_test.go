package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// scriptRun is one maintainer script call in a world where systemctl,
// deb-systemd-helper and deb-systemd-invoke are stand-ins that log their
// arguments.
type scriptRun struct {
	script     string   // under scripts/
	args       []string // what dpkg or rpm passes
	systemd    bool     // systemd runs (/run/systemd/system exists)
	helpers    bool     // deb-systemd-helper and deb-systemd-invoke are installed
	wasEnabled bool     // deb-systemd-helper was-enabled answers yes
}

// runScript runs r and returns the stand-ins' calls, one a line, and the
// directory standing for /etc/systemd/system. The script's absolute paths
// (/run/systemd/system, /etc/systemd/system) are pointed into a scratch
// directory; nothing else of it changes.
func runScript(t *testing.T, r scriptRun, setup func(etc string)) ([]string, string) {
	t.Helper()
	dir := t.TempDir()
	run, etc, bin := filepath.Join(dir, "run-systemd-system"), filepath.Join(dir, "etc-systemd-system"), filepath.Join(dir, "bin")
	for _, d := range []string{etc, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if r.systemd {
		if err := os.MkdirAll(run, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if setup != nil {
		setup(etc)
	}
	log := filepath.Join(dir, "calls")
	stand := func(name, extra string) {
		body := "#!/bin/sh\necho \"" + name + " $*\" >>" + log + "\n" + extra
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stand("systemctl", "")
	if r.helpers {
		answer := "1"
		if r.wasEnabled {
			answer = "0"
		}
		stand("deb-systemd-helper", "if [ \"$1 $2\" = \"--quiet was-enabled\" ]; then exit "+answer+"; fi\n")
		stand("deb-systemd-invoke", "")
	}
	for _, tool := range []string{"rm"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(filepath.Join("scripts", r.script))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(text), "/run/systemd/system", run)
	s = strings.ReplaceAll(s, "/etc/systemd/system", etc)
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", append([]string{script}, r.args...)...)
	cmd.Env = []string{"PATH=" + bin}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", r.script, r.args, err, out)
	}
	calls, _ := os.ReadFile(log)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines, etc
}

// TestMaintainerScripts: what each script does at install, upgrade,
// remove and purge, for dpkg's and rpm's arguments. The rules
// (docs/upgrading.md): install enables the server but starts nothing;
// upgrade keeps the operator's choice and restarts only what runs;
// remove stops; purge forgets the enablement.
func TestMaintainerScripts(t *testing.T) {
	const (
		reload       = "systemctl --system daemon-reload"
		rpmReload    = "systemctl daemon-reload"
		srv          = "aperio-server.service"
		clients      = "aperio-client@*.service"
		unmask       = "deb-systemd-helper unmask " + srv
		wasEnabled   = "deb-systemd-helper --quiet was-enabled " + srv
		enable       = "deb-systemd-helper enable " + srv
		updateState  = "deb-systemd-helper update-state " + srv
		tryRestart   = "deb-systemd-invoke try-restart " + srv
		tryRestartCl = "deb-systemd-invoke try-restart " + clients
	)
	cases := []struct {
		name string
		run  scriptRun
		want []string
	}{
		// aperio-server, Debian.
		{"deb server install", scriptRun{script: "deb/aperio-server.postinst", args: []string{"configure", ""}, systemd: true, helpers: true, wasEnabled: true},
			[]string{unmask, wasEnabled, enable, reload}},
		{"deb server install in a chroot", scriptRun{script: "deb/aperio-server.postinst", args: []string{"configure", ""}, helpers: true, wasEnabled: true},
			[]string{unmask, wasEnabled, enable}},
		{"deb server upgrade", scriptRun{script: "deb/aperio-server.postinst", args: []string{"configure", "1.2.3"}, systemd: true, helpers: true, wasEnabled: true},
			[]string{unmask, wasEnabled, enable, reload, tryRestart}},
		{"deb server upgrade, disabled by the operator", scriptRun{script: "deb/aperio-server.postinst", args: []string{"configure", "1.2.3"}, systemd: true, helpers: true},
			[]string{unmask, wasEnabled, updateState, reload, tryRestart}},
		{"deb server abort-upgrade", scriptRun{script: "deb/aperio-server.postinst", args: []string{"abort-upgrade", "1.2.4"}, systemd: true, helpers: true, wasEnabled: true},
			[]string{unmask, wasEnabled, enable, reload, tryRestart}},
		{"deb server triggered", scriptRun{script: "deb/aperio-server.postinst", args: []string{"triggered", "x"}, systemd: true, helpers: true, wasEnabled: true}, nil},
		{"deb server prerm upgrade", scriptRun{script: "deb/aperio-server.prerm", args: []string{"upgrade", "1.2.4"}, systemd: true, helpers: true}, nil},
		{"deb server prerm failed-upgrade", scriptRun{script: "deb/aperio-server.prerm", args: []string{"failed-upgrade", "1.2.3"}, systemd: true, helpers: true}, nil},
		{"deb server prerm deconfigure", scriptRun{script: "deb/aperio-server.prerm", args: []string{"deconfigure", "in-favour", "x", "1"}, systemd: true, helpers: true}, nil},
		{"deb server prerm remove", scriptRun{script: "deb/aperio-server.prerm", args: []string{"remove"}, systemd: true, helpers: true},
			[]string{"deb-systemd-invoke stop " + srv}},
		{"deb server prerm remove in a chroot", scriptRun{script: "deb/aperio-server.prerm", args: []string{"remove"}, helpers: true}, nil},
		{"deb server postrm upgrade", scriptRun{script: "deb/aperio-server.postrm", args: []string{"upgrade", "1.2.4"}, systemd: true, helpers: true}, nil},
		{"deb server postrm remove", scriptRun{script: "deb/aperio-server.postrm", args: []string{"remove"}, systemd: true, helpers: true},
			[]string{reload}},
		{"deb server postrm purge", scriptRun{script: "deb/aperio-server.postrm", args: []string{"purge"}, systemd: true, helpers: true},
			[]string{reload, "deb-systemd-helper purge " + srv, unmask}},

		// aperio-client, Debian: a template, enabled per instance by the operator.
		{"deb client install", scriptRun{script: "deb/aperio-client.postinst", args: []string{"configure", ""}, systemd: true, helpers: true, wasEnabled: true},
			[]string{reload}},
		{"deb client upgrade", scriptRun{script: "deb/aperio-client.postinst", args: []string{"configure", "1.2.3"}, systemd: true, helpers: true, wasEnabled: true},
			[]string{reload, tryRestartCl}},
		{"deb client prerm upgrade", scriptRun{script: "deb/aperio-client.prerm", args: []string{"upgrade", "1.2.4"}, systemd: true, helpers: true}, nil},
		{"deb client prerm remove", scriptRun{script: "deb/aperio-client.prerm", args: []string{"remove"}, systemd: true, helpers: true},
			[]string{"deb-systemd-invoke stop " + clients}},
		{"deb client postrm remove", scriptRun{script: "deb/aperio-client.postrm", args: []string{"remove"}, systemd: true, helpers: true},
			[]string{reload}},

		// aperio-server, rpm: $1 counts the versions installed after the step.
		{"rpm server install", scriptRun{script: "rpm/aperio-server.post", args: []string{"1"}, systemd: true},
			[]string{rpmReload, "systemctl --no-reload preset " + srv}},
		{"rpm server upgrade post", scriptRun{script: "rpm/aperio-server.post", args: []string{"2"}, systemd: true},
			[]string{rpmReload}},
		{"rpm server upgrade preun", scriptRun{script: "rpm/aperio-server.preun", args: []string{"1"}, systemd: true}, nil},
		{"rpm server erase preun", scriptRun{script: "rpm/aperio-server.preun", args: []string{"0"}, systemd: true},
			[]string{"systemctl --no-reload disable --now " + srv}},
		{"rpm server upgrade postun", scriptRun{script: "rpm/aperio-server.postun", args: []string{"1"}, systemd: true},
			[]string{rpmReload, "systemctl try-restart " + srv}},
		{"rpm server erase postun", scriptRun{script: "rpm/aperio-server.postun", args: []string{"0"}, systemd: true},
			[]string{rpmReload}},
		{"rpm server upgrade postun without systemd", scriptRun{script: "rpm/aperio-server.postun", args: []string{"1"}}, nil},

		// aperio-client, rpm.
		{"rpm client install", scriptRun{script: "rpm/aperio-client.post", args: []string{"1"}, systemd: true}, []string{rpmReload}},
		{"rpm client upgrade preun", scriptRun{script: "rpm/aperio-client.preun", args: []string{"1"}, systemd: true}, nil},
		{"rpm client erase preun", scriptRun{script: "rpm/aperio-client.preun", args: []string{"0"}, systemd: true},
			[]string{"systemctl stop " + clients}},
		{"rpm client upgrade postun", scriptRun{script: "rpm/aperio-client.postun", args: []string{"1"}, systemd: true},
			[]string{rpmReload, "systemctl try-restart " + clients}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := runScript(t, c.run, nil)
			if !slices.Equal(got, c.want) {
				t.Errorf("%s %q called\n  %q\nwant\n  %q", c.run.script, c.run.args, got, c.want)
			}
		})
	}
}

// TestScriptsPurgeClientLinks: purging (deb) or erasing (rpm) the client
// removes the links of the instances the operator enabled, and nothing
// else in /etc/systemd/system.
func TestScriptsPurgeClientLinks(t *testing.T) {
	for _, r := range []scriptRun{
		{script: "deb/aperio-client.postrm", args: []string{"purge"}, systemd: true, helpers: true},
		{script: "rpm/aperio-client.preun", args: []string{"0"}, systemd: true},
	} {
		_, etc := runScript(t, r, func(etc string) {
			wants := filepath.Join(etc, "multi-user.target.wants")
			if err := os.MkdirAll(wants, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"aperio-client@web.service", "aperio-client@api.service", "other.service"} {
				if err := os.Symlink("/usr/lib/systemd/system/"+n, filepath.Join(wants, n)); err != nil {
					t.Fatal(err)
				}
			}
		})
		left, _ := filepath.Glob(filepath.Join(etc, "*", "*"))
		for i := range left {
			left[i] = filepath.Base(left[i])
		}
		if !slices.Equal(left, []string{"other.service"}) {
			t.Errorf("%s %v left %q, want only other.service", r.script, r.args, left)
		}
	}
	// Removing without purging keeps the operator's enablement.
	_, etc := runScript(t, scriptRun{script: "deb/aperio-client.postrm", args: []string{"remove"}, systemd: true, helpers: true}, func(etc string) {
		wants := filepath.Join(etc, "multi-user.target.wants")
		os.MkdirAll(wants, 0o755)
		os.Symlink("/x", filepath.Join(wants, "aperio-client@web.service"))
	})
	if _, err := os.Lstat(filepath.Join(etc, "multi-user.target.wants", "aperio-client@web.service")); err != nil {
		t.Errorf("remove (not purge) deleted an instance's link: %v", err)
	}
}

// TestScriptsParse: every maintainer script is executable, starts with
// #!/bin/sh and parses (sh -n), with the sh Debian runs them with.
func TestScriptsParse(t *testing.T) {
	paths, _ := filepath.Glob("scripts/*/*")
	more, _ := filepath.Glob("scripts/*.sh")
	paths = append(paths, more...)
	if len(paths) < 13 {
		t.Fatalf("found %d scripts: %q", len(paths), paths)
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable (%v)", p, err)
		}
		text, _ := os.ReadFile(p)
		if !strings.HasPrefix(string(text), "#!/bin/sh\n") {
			t.Errorf("%s does not start with #!/bin/sh", p)
		}
		if out, err := exec.Command("/bin/sh", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", p, err, out)
		}
	}
	// Every script the packages name exists.
	b := Build{Here: "."}
	for _, name := range []string{"aperio-server", "aperio-client"} {
		for _, format := range Formats {
			s := b.scripts(name, format)
			for _, p := range []string{s.PreInstall, s.PostInstall, s.PreRemove, s.PostRemove} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s %s: %v", name, format, err)
				}
			}
		}
	}
}
