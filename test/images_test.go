//go:build e2e

package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImageLabels: the server image the suite runs carries the OCI labels
// deploy/images/build.sh sets, for the commit checked out here, and its
// binary reports the same commit (the link-time stamp, or Go's own VCS
// stamp, which agree).
func TestImageLabels(t *testing.T) {
	imgs := images(t)
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	head := strings.TrimSpace(string(out))
	out, err = exec.Command("git", "log", "-1", "--format=%cI", "HEAD").Output()
	if err != nil {
		t.Fatalf("git log: %v", err)
	}
	created := strings.TrimSpace(string(out))
	for _, name := range []string{"SERVER", "PROVIDER", "POSTGRES", "E2E_PEBBLE"} {
		tag := imgs[name]
		label := func(key string) string {
			return docker(t, "image", "inspect", "-f", `{{index .Config.Labels "org.opencontainers.image.`+key+`"}}`, tag)
		}
		want := map[string]string{
			"revision": head,
			"source":   "https://github.com/aperio-dev/aperio",
			"created":  created,
		}
		for key, w := range want {
			if got := label(key); got != w {
				t.Errorf("%s label org.opencontainers.image.%s = %q, want %q", tag, key, got, w)
			}
		}
		if v := label("version"); v == "" || v == "<no value>" {
			t.Errorf("%s label org.opencontainers.image.version = %q, want the build's version", tag, v)
		}
	}
	report := docker(t, "run", "--rm", imgs["SERVER"], "version")
	if !strings.Contains(report, "\ncommit:   "+head) {
		t.Errorf("aperio-server version in %s = %q, want commit %s", imgs["SERVER"], report, head)
	}
	version := docker(t, "image", "inspect", "-f", `{{index .Config.Labels "org.opencontainers.image.version"}}`, imgs["SERVER"])
	if !strings.HasPrefix(report, "aperio-server "+version+"\n") {
		t.Errorf("aperio-server version in %s = %q, want version %s (the label)", imgs["SERVER"], report, version)
	}
}
