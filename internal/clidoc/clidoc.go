// Package clidoc writes what the packages ship about a binary's command
// line, generated from its cobra command tree so that it cannot drift
// from --help: a man page (section 1, gzipped) and the bash, zsh and fish
// completion scripts. Both binaries get a hidden `__gendocs DIR` command
// (Add) that `make packages` runs.
package clidoc

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Command is the hidden command's name.
const Command = "__gendocs"

// Files are the paths, under the directory given to Write, of what it
// writes for program (the completion scripts named as each shell's
// vendor directory expects).
func Files(program string) []string {
	return []string{
		filepath.Join("man1", program+".1.gz"),
		filepath.Join("completions", "bash", program),
		filepath.Join("completions", "zsh", "_"+program),
		filepath.Join("completions", "fish", program+".fish"),
	}
}

// Section is a section of the man page beyond what the command tree
// says (the server's settings): a title and preformatted text.
type Section struct {
	Title, Text string
}

// Add gives root, the command of program, the hidden command that writes
// its documentation into a directory (Write). version is printed in the
// man page's footer; extra sections follow OPTIONS.
func Add(root *cobra.Command, program, version string, extra ...Section) {
	root.AddCommand(&cobra.Command{
		Use:    Command + " DIR",
		Short:  "Write the man page and shell completions into DIR (for packages)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return Write(root, program, version, args[0], extra...)
		},
	})
}

// Write writes Files(program) under dir, creating the directories.
func Write(root *cobra.Command, program, version, dir string, extra ...Section) error {
	var man bytes.Buffer
	if err := Man(&man, root, program, version, extra...); err != nil {
		return err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression) // no name, no time: reproducible
	if err != nil {
		return err
	}
	if _, err := zw.Write(man.Bytes()); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	var bash, zsh, fish bytes.Buffer
	if err := errors.Join(root.GenBashCompletionV2(&bash, true), root.GenZshCompletion(&zsh), root.GenFishCompletion(&fish, true)); err != nil {
		return err
	}
	for i, data := range [][]byte{gz.Bytes(), bash.Bytes(), zsh.Bytes(), fish.Bytes()} {
		path := filepath.Join(dir, Files(program)[i])
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Man writes program's man page in roff: NAME, SYNOPSIS, DESCRIPTION and
// OPTIONS from root, the extra sections, then a COMMANDS section with
// every visible subcommand, however deep, each with its own synopsis and
// options.
func Man(w io.Writer, root *cobra.Command, program, version string, extra ...Section) error {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var b strings.Builder
	fmt.Fprintf(&b, ".TH %s 1 \"\" %s \"User Commands\"\n", quote(strings.ToUpper(program)), quote(program+" "+version))
	b.WriteString(".SH NAME\n")
	b.WriteString(escape(program) + " \\- " + escape(root.Short) + "\n")
	b.WriteString(".SH SYNOPSIS\n")
	synopsis(&b, root)
	if text := strings.TrimSpace(root.Long); text != "" {
		b.WriteString(".SH DESCRIPTION\n")
		paragraphs(&b, text)
	}
	if opts := visibleFlags(root.NonInheritedFlags()); len(opts) > 0 {
		b.WriteString(".SH OPTIONS\n")
		options(&b, opts)
	}
	for _, sec := range extra {
		fmt.Fprintf(&b, ".SH %s\n.nf\n%s\n.fi\n", quote(strings.ToUpper(sec.Title)), escape(strings.TrimRight(sec.Text, "\n")))
	}
	var subs []*cobra.Command
	collect(root, &subs)
	if len(subs) > 0 {
		b.WriteString(".SH COMMANDS\n")
		for _, c := range subs {
			fmt.Fprintf(&b, ".SS %s\n", quote(c.CommandPath()))
			synopsis(&b, c)
			text := strings.TrimSpace(c.Long)
			if text == "" {
				text = c.Short
			}
			paragraphs(&b, text)
			if opts := visibleFlags(c.NonInheritedFlags()); len(opts) > 0 {
				options(&b, opts)
			}
		}
	}
	b.WriteString(".SH SEE ALSO\n")
	b.WriteString(escape(program+" --help, "+program+" version; the documentation in /usr/share/doc/"+program+" and https://github.com/aperio-dev/aperio/tree/main/docs") + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// collect appends c's visible subcommands, depth first in name order.
func collect(c *cobra.Command, out *[]*cobra.Command) {
	subs := c.Commands()
	sort.Slice(subs, func(i, j int) bool { return subs[i].Name() < subs[j].Name() })
	for _, s := range subs {
		if !s.IsAvailableCommand() { // hidden, deprecated, or help
			continue
		}
		*out = append(*out, s)
		collect(s, out)
	}
}

func synopsis(b *strings.Builder, c *cobra.Command) {
	b.WriteString(".PP\n")
	fmt.Fprintf(b, "\\fB%s\\fR", escape(c.CommandPath()))
	if use := strings.TrimSpace(strings.TrimPrefix(c.Use, c.Name())); use != "" {
		b.WriteString(" " + escape(use))
	}
	if c.HasAvailableFlags() {
		b.WriteString(" [flags]")
	}
	b.WriteString("\n")
}

// paragraphs writes text with its blank lines as paragraph breaks and its
// other line breaks kept.
func paragraphs(b *strings.Builder, text string) {
	for _, para := range strings.Split(text, "\n\n") {
		b.WriteString(".PP\n")
		for i, line := range strings.Split(strings.TrimSpace(para), "\n") {
			if i > 0 {
				b.WriteString(".br\n")
			}
			b.WriteString(escape(line) + "\n")
		}
	}
}

func visibleFlags(fs *pflag.FlagSet) []*pflag.Flag {
	var out []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			out = append(out, f)
		}
	})
	return out
}

func options(b *strings.Builder, flags []*pflag.Flag) {
	for _, f := range flags {
		b.WriteString(".TP\n")
		name := "\\-\\-" + escape(f.Name)
		if f.Shorthand != "" {
			name = "\\-" + escape(f.Shorthand) + ", " + name
		}
		varname, usage := pflag.UnquoteUsage(f)
		if varname != "" {
			name += " \\fI" + escape(varname) + "\\fR"
		}
		fmt.Fprintf(b, "\\fB%s\\fR\n", name)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && f.DefValue != "0" {
			usage += " (default " + f.DefValue + ")"
		}
		b.WriteString(escape(usage) + "\n")
	}
}

// escape makes s safe as roff text: a backslash prints as itself, and a
// line cannot start a request (a leading . or ').
func escape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			line = `\&` + line
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// quote is s as one roff macro argument.
func quote(s string) string {
	return `"` + strings.ReplaceAll(escape(s), `"`, `\(dq`) + `"`
}
