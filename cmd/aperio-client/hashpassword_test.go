package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/exitcode"
	"github.com/aperio-dev/aperio/internal/passhash"
)

func pipeSource(in string) passwordSource {
	return passwordSource{in: strings.NewReader(in), terminal: func() (int, bool) { return 0, false }}
}

// TestHashPassword checks that the printed hash verifies the password
// read from standard input, and that bad input exits 2 with a message.
func TestHashPassword(t *testing.T) {
	var out, errb bytes.Buffer
	cmd := newHashPasswordCommand(pipeSource("correct horse\nignored\n"), &out, &errb)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("hash-password = %v (%s)", err, errb.String())
	}
	h := strings.TrimSpace(out.String())
	if !strings.HasPrefix(h, "$argon2id$") || passhash.Verify(h, "correct horse") != nil || passhash.Verify(h, "correct horse\n") == nil {
		t.Fatalf("printed %q: want an argon2id hash of the first line", h)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "\n", "empty password"},
		{"nothing", "", "empty password"},
		{"too long", strings.Repeat("x", maxPassword+1), "longer than 1024"},
		{"too long line", strings.Repeat("x", maxPassword+1) + "\n", "longer than 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			cmd := newHashPasswordCommand(pipeSource(tc.in), &out, &errb)
			cmd.SetArgs(nil)
			err := cmd.Execute()
			var e exitcode.Error
			if !errors.As(err, &e) || e.Code != exitcode.Usage || !strings.Contains(errb.String(), tc.want) || out.Len() != 0 {
				t.Fatalf("hash-password(%.20q) = %v, stderr %q, stdout %q; want exit 2 naming %q", tc.in, err, errb.String(), out.String(), tc.want)
			}
		})
	}
}

// TestHashPasswordTerminal checks the prompt path: asked twice without
// echo, refused when the two differ.
func TestHashPasswordTerminal(t *testing.T) {
	answers := func(a ...string) passwordSource {
		return passwordSource{
			terminal: func() (int, bool) { return 7, true },
			readPass: func(fd int) ([]byte, error) {
				if fd != 7 {
					t.Fatalf("readPass(%d), want the terminal's fd 7", fd)
				}
				s := a[0]
				a = a[1:]
				return []byte(s), nil
			},
		}
	}
	var out, errb bytes.Buffer
	cmd := newHashPasswordCommand(answers("pw-one", "pw-one"), &out, &errb)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil || passhash.Verify(strings.TrimSpace(out.String()), "pw-one") != nil {
		t.Fatalf("hash-password on a terminal = %v, printed %q", err, out.String())
	}
	if !strings.Contains(errb.String(), "Password: ") || !strings.Contains(errb.String(), "Again: ") {
		t.Fatalf("prompts = %q, want Password and Again on stderr", errb.String())
	}
	out.Reset()
	errb.Reset()
	cmd = newHashPasswordCommand(answers("pw-one", "pw-two"), &out, &errb)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err == nil || !strings.Contains(errb.String(), "the passwords differ") {
		t.Fatalf("differing passwords = %v, stderr %q; want refused", err, errb.String())
	}
}
