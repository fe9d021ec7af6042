package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxWebhookSecret bounds a webhook secret read from stdin or a file, in
// bytes: the server refuses longer ones.
const maxWebhookSecret = 1024

// errLineTooLong is a first line longer than firstLine's bound.
var errLineTooLong = errors.New("line too long")

// firstLine returns the first line of r without its line ending, reading
// at most max+2 bytes: errLineTooLong when the line is longer than max.
func firstLine(r io.Reader, max int) (string, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, int64(max)+2), max+2)
	line, err := br.ReadString('\n')
	if err != nil && err != io.EOF {
		return "", err
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if len(line) > max {
		return "", errLineTooLong
	}
	return line, nil
}

// readSecret returns the webhook secret of the first line of r (stdin or
// a file, named by from), refusing an empty or overlong one: a secret
// given this way stays out of the process list and the shell history.
func readSecret(r io.Reader, from string) (string, error) {
	s, err := firstLine(r, maxWebhookSecret)
	switch {
	case errors.Is(err, errLineTooLong):
		return "", fmt.Errorf("the secret in %s is longer than %d bytes", from, maxWebhookSecret)
	case err != nil:
		return "", fmt.Errorf("read the secret from %s: %w", from, err)
	case s == "":
		return "", fmt.Errorf("no secret in %s (its first line is empty)", from)
	}
	return s, nil
}

// readSecretFile returns the secret in the first line of the file at path,
// which must be a regular file.
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--secret-file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--secret-file %s: not a regular file", path)
	}
	return readSecret(f, path)
}

// flagSecret returns the secret --secret-stdin or --secret-file gives,
// or current (what --secret set, or "") when neither is used.
func flagSecret(in io.Reader, fromStdin bool, file, current string) (string, error) {
	switch {
	case fromStdin:
		return readSecret(in, "standard input")
	case file != "":
		return readSecretFile(file)
	}
	return current, nil
}
