package config

import (
	"strings"
	"testing"
)

func TestLoadClientHeaders(t *testing.T) {
	base := "server:\n  url: https://tunnel.example.com\n  token: apr_1\nservices:\n  - target: 3000\n    hostname: app.example.com\n"
	in := clientCase{file: base + "    headers: {set: {Cache-Control: no-store}, remove: [Server]}\n"}
	got, _, err := LoadClient(in.options())
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	h := got.Services[0].Headers
	if h == nil || h.Set["Cache-Control"] != "no-store" || len(h.Remove) != 1 || h.Remove[0] != "Server" {
		t.Errorf("services[0].headers = %+v", h)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"    headers: {set: {Connection: close}}\n", "services[0].headers (aperio.yaml:7): set: Connection is a hop-by-hop or framing header"},
		{"    headers: {add: {X-Aperio-User: root}}\n", "X-Aperio-* headers are aperio's own"},
		{"    headers: {set: {X-A: \"a\\r\\nSet-Cookie: b\"}}\n", "value holds a control character"},
		{"    headers: {remove: [\"bad name\"]}\n", "is not a header name"},
		{"    headers: {sett: {X-A: b}}\n", `unknown key "sett"`},
		{"    headers: {remove: [" + strings.TrimSuffix(strings.Repeat("X-A, ", 65), ", ") + "]}\n", "65 entries, at most 64"},
	} {
		_, _, err := LoadClient(clientCase{file: base + tt.yaml}.options())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("LoadClient(%q) = %v, want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}
