package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// configValues is a values.config holding the structured keys that have
// no environment spelling (routes' rate limits, maintenance windows,
// headers) and a value written to break out of its YAML scalar (quotes,
// a colon, a comment mark, braces: control characters the server refuses
// in a header value, which the test's --check-config shows).
const configValues = `config:
  log_format: json
  scaling: true
  ip_limit_max: 500
  rate_limits:
    - {name: api, key: ip, rate: 10, burst: 20}
  maintenance_windows:
    - {hostname: app.example.com, weekdays: [sat], start: "22:00", end: "02:30"}
  headers:
    - {host: app.example.com, response: {set: {X-Note: "x\": y # }\\n- name: APERIO_SERVER_TOKEN"}}}
`

// TestChartConfigFile: values.config becomes the server's configuration
// file: a ConfigMap holding it as written, mounted read-only where
// APERIO_SERVER_CONFIG points, with a checksum that rolls the pods when
// it changes; and the file it renders passes the server's own
// --check-config.
func TestChartConfigFile(t *testing.T) {
	r := mustRender(t, configValues)
	d, c := checkChart(t, r, "")
	cm := one[*corev1.ConfigMap](t, r.objs)
	if cm.Name != "aperio-config" {
		t.Errorf("ConfigMap %q, want aperio-config", cm.Name)
	}
	file := cm.Data["aperio-server.yaml"]
	var got, want map[string]any
	if err := yaml.Unmarshal([]byte(file), &got); err != nil {
		t.Fatalf("aperio-server.yaml: %v\n%s", err, file)
	}
	if err := yaml.Unmarshal([]byte(configValues), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want["config"]) {
		t.Errorf("aperio-server.yaml =\n%s\nwant values.config as written", file)
	}
	if e, ok := envOf(c, "APERIO_SERVER_CONFIG"); !ok || e.Value != "/etc/aperio/aperio-server.yaml" {
		t.Errorf("APERIO_SERVER_CONFIG = %+v, want /etc/aperio/aperio-server.yaml", e)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == "config" && m.MountPath == "/etc/aperio" && m.ReadOnly {
			mounted = true
		}
	}
	vol := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			vol = true
		}
	}
	if !mounted || !vol {
		t.Errorf("config volume from %s mounted read-only at /etc/aperio: mount %v, volume %v", cm.Name, mounted, vol)
	}
	sum := d.Spec.Template.Annotations["checksum/config"]
	d2, _ := checkChart(t, mustRender(t, strings.Replace(configValues, "ip_limit_max: 500", "ip_limit_max: 600", 1)), "")
	if sum == "" || d2.Spec.Template.Annotations["checksum/config"] == sum {
		t.Errorf("checksum/config %q, after a change %q: want a checksum that changes with the file", sum, d2.Spec.Template.Annotations["checksum/config"])
	}

	// No config: no ConfigMap, no mount, no variable.
	r = mustRender(t, "")
	_, c = checkChart(t, r, "")
	for _, o := range r.objs {
		if _, ok := o.(*corev1.ConfigMap); ok {
			t.Errorf("a ConfigMap without values.config")
		}
	}
	if _, ok := envOf(c, "APERIO_SERVER_CONFIG"); ok {
		t.Errorf("APERIO_SERVER_CONFIG set without values.config")
	}

	// The server itself accepts the file.
	path := filepath.Join(t.TempDir(), "aperio-server.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./cmd/aperio-server", "--check-config", "--config", path)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "APERIO_SERVER_TOKEN=0123456789abcdef0123456789abcdef", "APERIO_DATA_DIR="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "configuration OK") {
		t.Errorf("aperio-server --check-config on the rendered file: %v\n%s\n%s", err, out, file)
	}
}

// TestChartImage: the server image defaults to aperio-server tagged with
// the chart's appVersion (what `make images IMAGE_PREFIX=...` tags for a
// release), and image.repository and image.tag name a pushed one.
func TestChartImage(t *testing.T) {
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil || meta.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %q, %v", meta.AppVersion, err)
	}
	for _, tt := range []struct{ values, want string }{
		{"", "aperio-server:" + meta.AppVersion},
		{"image: {repository: registry.example.com/team/aperio-server, tag: 1.2.3-dev.4-gabc}\n", "registry.example.com/team/aperio-server:1.2.3-dev.4-gabc"},
	} {
		_, c := checkChart(t, mustRender(t, tt.values), "")
		if c.Image != tt.want {
			t.Errorf("values %q: image %q, want %q", tt.values, c.Image, tt.want)
		}
	}
}
