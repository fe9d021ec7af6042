package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServiceFiles: the launchd daemon and the Windows service script run
// this binary with flags it has (--config, and --check-config before the
// service is created), and the plist is well-formed XML whose program is
// aperio-client with --config.
func TestServiceFiles(t *testing.T) {
	root := filepath.Join("..", "..", "deploy", "client")
	plist, err := os.ReadFile(filepath.Join(root, "launchd", "dev.aperio.client.plist"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Dict struct {
			Keys   []string `xml:"key"`
			Arrays []struct {
				Strings []string `xml:"string"`
			} `xml:"array"`
		} `xml:"dict"`
	}
	if err := xml.Unmarshal(plist, &doc); err != nil {
		t.Fatalf("plist: %v", err)
	}
	if len(doc.Dict.Arrays) != 1 || len(doc.Dict.Arrays[0].Strings) != 3 ||
		filepath.Base(doc.Dict.Arrays[0].Strings[0]) != "aperio-client" || doc.Dict.Arrays[0].Strings[1] != "--config" {
		t.Errorf("plist ProgramArguments = %+v, want aperio-client --config FILE", doc.Dict.Arrays)
	}
	for _, k := range []string{"Label", "ProgramArguments", "KeepAlive", "ExitTimeOut"} {
		if !strings.Contains(strings.Join(doc.Dict.Keys, " "), k) {
			t.Errorf("plist has no %s", k)
		}
	}
	ps1, err := os.ReadFile(filepath.Join(root, "windows", "install-service.ps1"))
	if err != nil {
		t.Fatal(err)
	}
	flags := newRootCommand(nil, nil).Flags()
	for _, f := range []string{"config", "check-config"} {
		if flags.Lookup(f) == nil {
			t.Errorf("aperio-client has no --%s, which the service files use", f)
		}
		if !strings.Contains(string(plist)+string(ps1), "--"+f) {
			t.Errorf("the service files do not use --%s", f)
		}
	}
}
