package clidoc

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// tree is a small command tree with hostile text where a user's words
// would go: a leading dot (a roff request) and a backslash.
func tree() *cobra.Command {
	root := &cobra.Command{Use: "prog [TARGET]", Short: "Do the thing", Long: "First line.\n.rm everything\n\nSecond paragraph with C:\\path.", RunE: func(*cobra.Command, []string) error { return nil }}
	root.Flags().String("config", "", "configuration file")
	root.Flags().Int("port", 8080, "the `PORT` to use")
	root.Flags().Bool("secret-switch", false, "hidden one")
	root.Flags().MarkHidden("secret-switch")
	api := &cobra.Command{Use: "api", Short: "The admin API"}
	create := &cobra.Command{Use: "create NAME", Short: "Create one", RunE: func(*cobra.Command, []string) error { return nil }}
	create.Flags().Bool("json", false, "print JSON")
	api.AddCommand(create)
	root.AddCommand(api, &cobra.Command{Use: "internal", Hidden: true, Run: func(*cobra.Command, []string) {}})
	Add(root, "prog", "v1.2.3")
	return root
}

// TestMan: the page holds the name, synopsis, description, every visible
// flag with its value and default, every visible subcommand however deep,
// the extra sections, and nothing hidden; the user's words cannot issue
// roff requests.
func TestMan(t *testing.T) {
	var b bytes.Buffer
	if err := Man(&b, tree(), "prog", "v1.2.3", Section{Title: "Settings", Text: "port  int  the port"}); err != nil {
		t.Fatal(err)
	}
	man := b.String()
	for _, want := range []string{
		`.TH "PROG" 1 "" "prog v1.2.3" "User Commands"`,
		"prog \\- Do the thing",
		"\\fBprog\\fR [TARGET] [flags]",
		"\\fB\\-\\-config \\fIstring\\fR\\fR",
		"\\fB\\-\\-port \\fIPORT\\fR\\fR\nthe PORT to use (default 8080)",
		".SH \"SETTINGS\"\n.nf\nport  int  the port\n.fi",
		".SS \"prog api create\"",
		"\\fBprog api create\\fR NAME [flags]",
		"\\fB\\-\\-json\\fR\nprint JSON",
		".SS \"prog completion bash\"",
		"\\&.rm everything",
		"C:\\epath.",
	} {
		if !strings.Contains(man, want) {
			t.Errorf("man page lacks %q:\n%s", want, man)
		}
	}
	for _, bad := range []string{"secret-switch", "prog internal", Command, "\n.rm"} {
		if strings.Contains(man, bad) {
			t.Errorf("man page holds %q", bad)
		}
	}
	if _, err := exec.LookPath("groff"); err == nil {
		cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
		cmd.Stdin = strings.NewReader(man)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("groff -ww: %v\n%s", err, out)
		}
	}
}

// TestWrite: the hidden command writes the gzipped page and the three
// completion scripts where Files says, the same bytes every time.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	root := tree()
	root.SetArgs([]string{Command, dir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	first := map[string][]byte{}
	for _, f := range Files("prog") {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(data) == 0 {
			t.Fatalf("%s: %v (%d bytes)", f, err, len(data))
		}
		first[f] = data
	}
	zr, err := gzip.NewReader(bytes.NewReader(first[Files("prog")[0]]))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(zr)
	if !strings.HasPrefix(string(page), ".TH \"PROG\"") || !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("man page %.40q, gzip time %v name %q; want the page, no time, no name", page, zr.ModTime, zr.Name)
	}
	for f, want := range map[string]string{Files("prog")[1]: "__start_prog", Files("prog")[2]: "#compdef prog", Files("prog")[3]: "complete -c prog"} {
		if !bytes.Contains(first[f], []byte(want)) {
			t.Errorf("%s lacks %q", f, want)
		}
	}
	again := t.TempDir()
	if err := Write(tree(), "prog", "v1.2.3", again); err != nil {
		t.Fatal(err)
	}
	for _, f := range Files("prog") {
		if data, _ := os.ReadFile(filepath.Join(again, f)); !bytes.Equal(data, first[f]) {
			t.Errorf("%s differs between two writes", f)
		}
	}
}
