package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/aperio-dev/aperio/internal/config"
)

// addPrintSchema gives cmd --print-schema: print the JSON Schema of the
// configuration file and exit, before anything is loaded. Call it once
// cmd.RunE is set.
func addPrintSchema(cmd *cobra.Command, stdout io.Writer) {
	var on bool
	cmd.Flags().BoolVar(&on, "print-schema", false, "print the JSON Schema (draft 2020-12) of aperio.yaml and exit")
	next := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if !on {
			return next(c, args)
		}
		b, err := config.ClientSchema()
		if err == nil {
			_, err = stdout.Write(b)
		}
		return err
	}
}
