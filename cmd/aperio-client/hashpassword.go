package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/aperio-dev/aperio/internal/exitcode"
	"github.com/aperio-dev/aperio/internal/passhash"
)

// maxPassword bounds the password read: the server refuses longer ones.
const maxPassword = 1024

// passwordSource is where hash-password reads the password: a terminal
// (prompted, without echo) or anything else (its first line).
type passwordSource struct {
	in       io.Reader
	terminal func() (fd int, ok bool)
	readPass func(fd int) ([]byte, error)
}

func stdinSource() passwordSource {
	return passwordSource{
		in: os.Stdin,
		terminal: func() (int, bool) {
			fd := int(os.Stdin.Fd())
			return fd, term.IsTerminal(fd)
		},
		readPass: term.ReadPassword,
	}
}

func newHashPasswordCommand(src passwordSource, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "hash-password",
		Short: "Print an argon2id hash of a password, for a service's auth.basic.users",
		Long: "Reads the password from standard input (its first line), or prompts for it\n" +
			"without echo when standard input is a terminal, and prints its argon2id\n" +
			"hash (PHC string) for auth.basic.users. The password never goes in a file.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			pw, err := src.read(stderr)
			if err != nil {
				fmt.Fprintln(stderr, "aperio-client hash-password:", err)
				return exitcode.ErrUsage
			}
			h, err := passhash.Hash(pw)
			if err != nil {
				fmt.Fprintln(stderr, "aperio-client hash-password:", err)
				return exitcode.ErrFailure
			}
			fmt.Fprintln(stdout, h)
			return nil
		},
	}
}

// read returns the password: prompted twice on a terminal, else the first
// line of the input. An empty password, one longer than maxPassword or
// two prompts that differ are errors.
func (s passwordSource) read(prompt io.Writer) (string, error) {
	var pw string
	if fd, ok := s.terminal(); ok {
		fmt.Fprint(prompt, "Password: ")
		a, err := s.readPass(fd)
		fmt.Fprintln(prompt)
		if err != nil {
			return "", err
		}
		fmt.Fprint(prompt, "Again: ")
		b, err := s.readPass(fd)
		fmt.Fprintln(prompt)
		if err != nil {
			return "", err
		}
		if string(a) != string(b) {
			return "", errors.New("the passwords differ")
		}
		pw = string(a)
	} else {
		line, err := firstLine(s.in, maxPassword)
		if errors.Is(err, errLineTooLong) {
			return "", fmt.Errorf("the password is longer than %d bytes", maxPassword)
		}
		if err != nil {
			return "", err
		}
		pw = line
	}
	switch {
	case pw == "":
		return "", errors.New("empty password")
	case len(pw) > maxPassword:
		return "", fmt.Errorf("the password is longer than %d bytes", maxPassword)
	}
	return pw, nil
}
