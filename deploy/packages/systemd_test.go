package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSystemdInstallUpgradeRemove installs, upgrades and removes the .debs
// under a running systemd: a container of Debian booting systemd as PID
// 1, made from APERIO_TEST_DEBIAN_SYSTEMD_ROOT (a debootstrapped root
// with systemd, which .ci/run makes in the background). The packages hold
// the real binaries, built here with their version stamped, so the
// hardened units run the real server and client. It checks what the
// chroot test cannot see: the install enables the server without starting
// it (it has no token yet); once configured and started, an upgrade
// restarts the server and the running client instances, which then run
// the new binaries, and leaves a stopped server stopped; remove stops
// them and systemd forgets the units; purge drops their enablement.
//
// To run it locally, as root with Docker running:
//
//	debootstrap --variant=minbase --include=systemd,systemd-sysv bookworm /tmp/aperio-debroot-systemd
//	touch /tmp/aperio-debroot-systemd/.ready
//	APERIO_TEST_DEBIAN_SYSTEMD_ROOT=/tmp/aperio-debroot-systemd go test -run TestSystemdInstallUpgradeRemove .
func TestSystemdInstallUpgradeRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		if inCI {
			t.Fatal("CI runs as root; the packages' files in the image must be root's")
		}
		t.Skip("needs root to read the Debian root and to run Docker")
	}
	need(t, "docker")
	need(t, "go")
	if err := exec.Command("docker", "info").Run(); err != nil {
		if inCI {
			t.Fatalf("docker info: %v; CI needs a running Docker Engine", err)
		}
		t.Skipf("Docker Engine is not running (docker info: %v)", err)
	}
	root := debianRoot(t, "APERIO_TEST_DEBIAN_SYSTEMD_ROOT")
	if _, err := os.Stat(filepath.Join(root, "lib/systemd/systemd")); err != nil {
		t.Fatalf("%s has no systemd (debootstrap it with --include=systemd,systemd-sysv): %v", root, err)
	}
	start := time.Now()
	out, _ := buildFrom(t, "v1.2.3", realBins(t, "v1.2.3"))
	outNext, _ := buildFrom(t, "v1.2.4", realBins(t, "v1.2.4"))
	t.Logf("built the binaries and packages in %v", time.Since(start).Round(time.Millisecond))

	c := bootSystemd(t, root)
	for _, deb := range []string{
		filepath.Join(out, "aperio-server_1.2.3-1_amd64.deb"), filepath.Join(out, "aperio-client_1.2.3-1_amd64.deb"),
		filepath.Join(outNext, "aperio-server_1.2.4-1_amd64.deb"), filepath.Join(outNext, "aperio-client_1.2.4-1_amd64.deb"),
	} {
		run(t, "docker", "cp", deb, c.name+":/tmp/")
	}

	// Install: the server is enabled, not started (it has no token).
	c.exec("dpkg", "-i", "/tmp/aperio-server_1.2.3-1_amd64.deb", "/tmp/aperio-client_1.2.3-1_amd64.deb")
	if got := c.query("systemctl", "is-enabled", "aperio-server"); got != "enabled" {
		t.Errorf("after the install aperio-server is %q, want enabled", got)
	}
	if got := c.query("systemctl", "is-active", "aperio-server"); got != "inactive" {
		t.Errorf("after the install aperio-server is %q, want inactive: an unconfigured server must not be started", got)
	}
	if got := c.show("aperio-server", "ExecMainStartTimestampMonotonic"); got != "0" {
		t.Errorf("the install started aperio-server (ExecMainStartTimestampMonotonic=%s)", got)
	}
	if got := c.query("systemctl", "is-enabled", "aperio-client@web"); got != "disabled" {
		t.Errorf("after the install aperio-client@web is %q, want disabled: the operator enables instances", got)
	}

	// The operator configures both and starts them.
	token := randomToken(t)
	c.write("/etc/aperio/aperio-server.env", "APERIO_SERVER_TOKEN="+token+"\n", "0600")
	c.write("/etc/aperio/client/web.yaml", "server:\n  url: http://127.0.0.1:8080\nservices:\n  - target: http://127.0.0.1:3000\n    hostname: app.example.com\n", "0644")
	c.write("/etc/aperio/client/web.env", "APERIO_SERVER_TOKEN="+token+"\n", "0600")
	c.exec("systemctl", "enable", "aperio-client@web")
	c.exec("systemctl", "start", "aperio-server", "aperio-client@web")
	serverPID := c.running("aperio-server", "v1.2.3")
	clientPID := c.running("aperio-client@web", "")

	// Upgrade: both are restarted, on the new binaries.
	c.exec("dpkg", "-i", "--force-confold", "/tmp/aperio-server_1.2.4-1_amd64.deb", "/tmp/aperio-client_1.2.4-1_amd64.deb")
	if pid := c.running("aperio-server", "v1.2.4"); pid == serverPID {
		t.Errorf("after the upgrade aperio-server still runs as PID %s: not restarted", pid)
	}
	if pid := c.running("aperio-client@web", ""); pid == clientPID {
		t.Errorf("after the upgrade aperio-client@web still runs as PID %s: not restarted", pid)
	}
	if got := c.query("systemctl", "is-enabled", "aperio-server"); got != "enabled" {
		t.Errorf("after the upgrade aperio-server is %q, want enabled", got)
	}
	// An upgrade (here a reinstall) leaves a stopped server stopped.
	c.exec("systemctl", "stop", "aperio-server")
	c.exec("dpkg", "-i", "--force-confold", "/tmp/aperio-server_1.2.4-1_amd64.deb")
	if got := c.query("systemctl", "is-active", "aperio-server"); got != "inactive" {
		t.Errorf("the upgrade started the stopped aperio-server: it is %q", got)
	}
	c.exec("systemctl", "start", "aperio-server")

	// Remove, one package at a time so that each one's scripts show: it
	// stops and systemd forgets its unit.
	for _, r := range []struct{ pkg, unit string }{{"aperio-client", "aperio-client@web"}, {"aperio-server", "aperio-server"}} {
		pid := c.show(r.unit, "MainPID")
		c.exec("dpkg", "--remove", r.pkg)
		if got := c.query("systemctl", "is-active", r.unit); got != "inactive" {
			t.Errorf("after removing %s, %s is %q, want inactive", r.pkg, r.unit, got)
		}
		if got := c.query("sh", "-c", "kill -0 "+pid+" 2>/dev/null && echo alive || echo gone"); got != "gone" {
			t.Errorf("after removing %s, its PID %s is %s", r.pkg, pid, got)
		}
		if got := c.show(r.unit, "LoadState"); got != "not-found" {
			t.Errorf("after removing %s, systemd still has %s (LoadState=%s): no daemon-reload", r.pkg, r.unit, got)
		}
	}
	// The units' enablement is kept for a reinstall, until purge.
	links := "ls /etc/systemd/system/multi-user.target.wants/ | grep aperio || true"
	if got, want := c.query("sh", "-c", links), "aperio-client@web.service\naperio-server.service"; got != want {
		t.Errorf("after remove (not purge) the links enabling units are %q, want %q", got, want)
	}
	c.exec("dpkg", "--purge", "aperio-server", "aperio-client")
	if got := c.query("sh", "-c", links); got != "" {
		t.Errorf("purge left links enabling units: %q", got)
	}
	t.Logf("the whole test took %v", time.Since(start).Round(time.Millisecond))
}

// realBins builds aperio-server and aperio-client from this repository
// (static and -trimpath as `make build` does, so CI's build cache serves
// everything but the link) with version stamped, beside fakeBins' docs and
// license report.
func realBins(t *testing.T, version string) string {
	t.Helper()
	dir := fakeBins(t)
	for _, b := range []string{"aperio-server", "aperio-client"} {
		if err := os.Remove(filepath.Join(dir, b)); err != nil { // go build does not overwrite a script
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/aperio-dev/aperio/internal/buildinfo.version="+version,
		"-o", dir+string(filepath.Separator), "./cmd/aperio-server", "./cmd/aperio-client")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", version, err, b)
	}
	return dir
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// systemdContainer is a Docker container running systemd as PID 1.
type systemdContainer struct {
	t    *testing.T
	name string
}

// bootSystemd imports root as a Docker image, starts it with systemd as
// PID 1 (no network: the services talk over its loopback) and waits until
// the boot is over. The container and the image go at cleanup.
func bootSystemd(t *testing.T, root string) *systemdContainer {
	t.Helper()
	name := fmt.Sprintf("aperio-packages-systemd-%d", os.Getpid())
	image := name + ":test"
	s := time.Now()
	tarCmd := exec.Command("tar", "-C", root, "--exclude=./.ready", "-c", ".")
	importCmd := exec.Command("docker", "import", "-", image)
	pipe, err := tarCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	importCmd.Stdin = pipe
	var tarErr strings.Builder
	tarCmd.Stderr = &tarErr
	if err := tarCmd.Start(); err != nil {
		t.Fatal(err)
	}
	importOut, importErr := importCmd.CombinedOutput()
	if err := tarCmd.Wait(); err != nil {
		t.Fatalf("tar %s: %v\n%s", root, err, tarErr.String())
	}
	if importErr != nil {
		t.Fatalf("docker import: %v\n%s", importErr, importOut)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "rmi", "-f", image).CombinedOutput(); err != nil {
			t.Errorf("docker rmi %s: %v\n%s", image, err, out)
		}
	})
	// systemd needs CAP_SYS_ADMIN (mounts, the units' sandboxes) and
	// its own cgroup namespace; not --privileged, which also asks for
	// capabilities a nested Docker may lack (unable to apply caps).
	// CAP_SYS_PTRACE lets docker exec read the services' /proc/PID/exe.
	run(t, "docker", "run", "-d", "--name", name, "--network", "none",
		"--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE", "--security-opt", "seccomp=unconfined", "--cgroupns", "private",
		"--tmpfs", "/run", "--tmpfs", "/run/lock", "-e", "container=docker",
		image, "/lib/systemd/systemd")
	c := &systemdContainer{t: t, name: name}
	t.Cleanup(func() {
		if t.Failed() {
			boot, _ := exec.Command("docker", "logs", "--tail", "30", name).CombinedOutput()
			t.Logf("systemd's console:\n%s", boot)
			out, _ := exec.Command("docker", "exec", name, "journalctl", "--no-pager", "-n", "80", "-u", "aperio-server", "-u", "aperio-client@web").CombinedOutput()
			t.Logf("the services' journal:\n%s", out)
		}
		if out, err := exec.Command("docker", "rm", "-f", "-v", name).CombinedOutput(); err != nil {
			t.Errorf("docker rm %s: %v\n%s", name, err, out)
		}
	})
	var state string
	poll(t, 60*time.Second, "systemd to finish booting", func() bool {
		state = c.query("timeout", "20", "systemctl", "is-system-running", "--wait")
		return state == "running" || state == "degraded"
	})
	if state == "degraded" {
		t.Logf("systemd booted degraded: %s", c.query("systemctl", "--failed", "--no-legend"))
	}
	t.Logf("imported the root and booted systemd in %v", time.Since(s).Round(time.Millisecond))
	return c
}

// exec runs args in the container and fails the test on an error.
func (c *systemdContainer) exec(args ...string) string {
	c.t.Helper()
	return run(c.t, "docker", append([]string{"exec", c.name}, args...)...)
}

// query runs args in the container and returns their trimmed standard
// output whatever their status: systemctl is-active and is-enabled answer
// with both.
func (c *systemdContainer) query(args ...string) string {
	c.t.Helper()
	out, err := exec.Command("docker", append([]string{"exec", c.name}, args...)...).Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		c.t.Fatalf("docker exec %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// show returns a property of unit, as systemctl show reports it.
func (c *systemdContainer) show(unit, prop string) string {
	c.t.Helper()
	return c.query("systemctl", "show", "-p", prop, "--value", unit)
}

// write puts content in the container's file path with mode.
func (c *systemdContainer) write(path, content, mode string) {
	c.t.Helper()
	f := filepath.Join(c.t.TempDir(), "file")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		c.t.Fatal(err)
	}
	run(c.t, "docker", "cp", f, c.name+":"+path)
	c.exec("chown", "root:root", path)
	c.exec("chmod", mode, path)
}

// running checks that unit is active, has not been restarted after a
// failure, and runs the binary now installed (not one dpkg has since
// replaced); for the server, that the process answering on its port
// reports version. It returns the unit's main PID.
func (c *systemdContainer) running(unit, version string) string {
	c.t.Helper()
	if got := c.query("systemctl", "is-active", unit); got != "active" {
		c.t.Fatalf("%s is %q, want active", unit, got)
	}
	pid := c.show(unit, "MainPID")
	if pid == "" || pid == "0" {
		c.t.Fatalf("%s is active without a main PID", unit)
	}
	if n := c.show(unit, "NRestarts"); n != "0" {
		c.t.Errorf("%s restarted %s times after failures", unit, n)
	}
	prog, _, _ := strings.Cut(unit, "@")
	if exe := c.query("readlink", "/proc/"+pid+"/exe"); exe != "/usr/bin/"+prog {
		c.t.Errorf("%s (PID %s) runs %q, want /usr/bin/%s", unit, pid, exe, prog)
	}
	if version == "" {
		return pid
	}
	// The image has no HTTP client: bash's /dev/tcp asks the server.
	out := c.exec("bash", "-c", `exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /aperio/health HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3`)
	_, body, _ := strings.Cut(out, "\r\n\r\n")
	var health struct {
		Version          string `json:"version"`
		ConnectedClients int    `json:"connected_clients"`
	}
	if err := json.Unmarshal([]byte(body), &health); err != nil {
		c.t.Fatalf("%s's /aperio/health: %v\n%s", unit, err, out)
	}
	if health.Version != version {
		c.t.Errorf("%s (PID %s) reports version %q, want %q", unit, pid, health.Version, version)
	}
	return pid
}

// poll calls cond until it holds, failing the test after timeout: the
// condition lives in another process (systemd in the container).
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
