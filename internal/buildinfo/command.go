package buildinfo

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// AddVersion gives root, the command of program, a version subcommand and
// makes its --version print the same report (Info.Text) to stdout.
func AddVersion(root *cobra.Command, program string, stdout io.Writer) {
	text := Read().Text(program)
	if root.Version == "" {
		root.Version = Version() // cobra adds --version only with one
	}
	// The version template is a text/template: a linked version holding
	// "{{" must print as written.
	root.SetVersionTemplate(strings.ReplaceAll(text, "{{", `{{"{{"}}`))
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go release and platform of this binary",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprint(stdout, text)
			return err
		},
	})
}
