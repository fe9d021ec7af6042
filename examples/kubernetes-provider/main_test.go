package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseOptions(t *testing.T) {
	files := map[string]string{
		"/run/secret":           "from-file\n",
		serviceAccountNamespace: "team-a\n",
	}
	readFile := func(path string) ([]byte, error) {
		if s, ok := files[path]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	noSA := func(path string) ([]byte, error) {
		if path == serviceAccountNamespace {
			return nil, fs.ErrNotExist
		}
		return readFile(path)
	}
	for _, tc := range []struct {
		name          string
		args          []string
		env           map[string]string
		readFile      func(string) ([]byte, error)
		wantErr       string
		wantSecret    string
		wantNamespace string
	}{
		{name: "secret from env, namespace from the service account", env: map[string]string{"PROVIDER_SECRET": "abc"},
			readFile: readFile, wantSecret: "abc", wantNamespace: "team-a"},
		{name: "secret from file", env: map[string]string{"PROVIDER_SECRET_FILE": "/run/secret"},
			readFile: readFile, wantSecret: "from-file", wantNamespace: "team-a"},
		{name: "env namespace wins over the service account", env: map[string]string{"PROVIDER_SECRET": "abc", "PROVIDER_NAMESPACE": "team-b"},
			readFile: readFile, wantSecret: "abc", wantNamespace: "team-b"},
		{name: "flag namespace wins", args: []string{"--namespace", "team-c"}, env: map[string]string{"PROVIDER_SECRET": "abc", "PROVIDER_NAMESPACE": "team-b"},
			readFile: readFile, wantSecret: "abc", wantNamespace: "team-c"},
		{name: "default namespace outside a cluster", env: map[string]string{"PROVIDER_SECRET": "abc"},
			readFile: noSA, wantSecret: "abc", wantNamespace: "default"},
		{name: "no secret", readFile: readFile, wantErr: "PROVIDER_SECRET"},
		{name: "missing secret file", env: map[string]string{"PROVIDER_SECRET_FILE": "/nope"}, readFile: readFile, wantErr: "PROVIDER_SECRET_FILE"},
		{name: "bad namespace", args: []string{"--namespace", "Team_A"}, env: map[string]string{"PROVIDER_SECRET": "abc"},
			readFile: readFile, wantErr: "namespace"},
		{name: "bad selector", args: []string{"--selector", "a in (("}, env: map[string]string{"PROVIDER_SECRET": "abc"},
			readFile: readFile, wantErr: "--selector"},
		{name: "max replicas 0", args: []string{"--max-replicas", "0"}, env: map[string]string{"PROVIDER_SECRET": "abc"},
			readFile: readFile, wantErr: "--max-replicas"},
		{name: "negative timeout", args: []string{"--api-timeout", "-1s"}, env: map[string]string{"PROVIDER_SECRET": "abc"},
			readFile: readFile, wantErr: "--api-timeout"},
		{name: "stray argument", args: []string{"extra"}, env: map[string]string{"PROVIDER_SECRET": "abc"},
			readFile: readFile, wantErr: "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions(tc.args, func(k string) string { return tc.env[k] }, tc.readFile, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseOptions = %v, want an error about %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			if o.Config.Secret != tc.wantSecret || o.Config.Namespace != tc.wantNamespace {
				t.Errorf("secret %q, namespace %q; want %q, %q", o.Config.Secret, o.Config.Namespace, tc.wantSecret, tc.wantNamespace)
			}
			if o.Config.APITimeout != 8*time.Second || o.Config.MaxReplicas != 100 || o.Listen != ":9000" {
				t.Errorf("defaults: api timeout %v, max replicas %d, listen %q", o.Config.APITimeout, o.Config.MaxReplicas, o.Listen)
			}
		})
	}
}

func TestReadFileLimited(t *testing.T) {
	dir := t.TempDir()
	small, big := filepath.Join(dir, "small"), filepath.Join(dir, "big")
	if err := os.WriteFile(small, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, maxSecretFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := readFileLimited(small); err != nil || string(b) != "tok\n" {
		t.Errorf("readFileLimited(small) = %q, %v", b, err)
	}
	if _, err := readFileLimited(big); err == nil {
		t.Error("readFileLimited read a secret file above the bound")
	}
	if _, err := readFileLimited(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readFileLimited(missing) = %v, want fs.ErrNotExist", err)
	}
}

func TestServerIsBounded(t *testing.T) {
	s := newServer(nil)
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Errorf("server %+v leaves a phase unbounded", s)
	}
}

func TestParseWebhookSecret(t *testing.T) {
	files := map[string]string{
		"/run/wh":    testWebhookSecret + "\n",
		"/run/empty": "\n",
	}
	readFile := func(path string) ([]byte, error) {
		if s, ok := files[path]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "none: the events route is off", env: map[string]string{}, want: ""},
		{name: "from env", env: map[string]string{"PROVIDER_WEBHOOK_SECRET": "whsec_QUJD"}, want: "whsec_QUJD"},
		{name: "from file", env: map[string]string{"PROVIDER_WEBHOOK_SECRET_FILE": "/run/wh"}, want: testWebhookSecret},
		{name: "env wins", env: map[string]string{"PROVIDER_WEBHOOK_SECRET": "plain", "PROVIDER_WEBHOOK_SECRET_FILE": "/run/wh"}, want: "plain"},
		{name: "missing file", env: map[string]string{"PROVIDER_WEBHOOK_SECRET_FILE": "/nope"}, wantErr: "PROVIDER_WEBHOOK_SECRET_FILE"},
		{name: "empty file", env: map[string]string{"PROVIDER_WEBHOOK_SECRET_FILE": "/run/empty"}, wantErr: "empty"},
		{name: "bad whsec", env: map[string]string{"PROVIDER_WEBHOOK_SECRET": "whsec_!!"}, wantErr: "webhook secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["PROVIDER_SECRET"] = "abc"
			tc.env["PROVIDER_NAMESPACE"] = "team-a"
			o, err := parseOptions(nil, func(k string) string { return tc.env[k] }, readFile, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseOptions = %v, want an error about %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			if o.Config.WebhookSecret != tc.want {
				t.Errorf("webhook secret %q, want %q", o.Config.WebhookSecret, tc.want)
			}
		})
	}
}
