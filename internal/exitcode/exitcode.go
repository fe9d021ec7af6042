// Package exitcode owns how both binaries end: the exit codes of the
// contract (0 ok, 1 runtime or API failure, 2 usage or bad configuration)
// and the error that carries one out of a cobra command.
package exitcode

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// The exit codes.
const (
	Failure = 1
	Usage   = 2
)

// Error ends a command with Code; whatever had to be said was printed
// before it was returned.
type Error struct{ Code int }

func (e Error) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// ErrFailure and ErrUsage are the two ways a command fails.
var (
	ErrFailure = Error{Code: Failure}
	ErrUsage   = Error{Code: Usage}
)

// Execute runs cmd and returns the process's exit code: 0, the code of an
// Error, or Usage for any other error (cobra's own: an unknown flag, a
// missing argument), which it prints to stderr after name.
func Execute(cmd *cobra.Command, stderr io.Writer, name string) int {
	err := cmd.Execute()
	if err == nil {
		return 0
	}
	var e Error
	if errors.As(err, &e) {
		return e.Code
	}
	fmt.Fprintln(stderr, name+":", err)
	return Usage
}
