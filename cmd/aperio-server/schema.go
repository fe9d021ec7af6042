package main

import (
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aperio-dev/aperio/cmd/aperio-server/serverconfig"
)

// addSettingsHelp gives cmd --print-schema (print the JSON Schema of
// aperio-server.yaml and exit, before anything is loaded) and ends the
// root's --help with every setting, grouped. Call it once cmd.RunE is set.
func addSettingsHelp(cmd *cobra.Command, stdout io.Writer) {
	var on bool
	cmd.Flags().BoolVar(&on, "print-schema", false, "print the JSON Schema (draft 2020-12) of aperio-server.yaml and exit")
	next := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if !on {
			return next(c, args)
		}
		b, err := serverconfig.Schema()
		if err == nil {
			_, err = stdout.Write(b)
		}
		return err
	}
	// The help template is a text/template: the list prints as written.
	settings := strings.ReplaceAll(serverconfig.HelpText(), "{{", `{{"{{"}}`)
	cmd.SetHelpTemplate(cmd.HelpTemplate() + "{{if not .HasParent}}\n" + settings + "{{end}}")
}
