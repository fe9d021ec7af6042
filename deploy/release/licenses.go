package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// LicensesFile is the name of the dependency-license report in every
// archive and package: the license of each module the binaries link.
const LicensesFile = "LICENSE-THIRD-PARTY.txt"

// maxLicenseFile bounds one license or notice file read from a module; a
// larger one is a sign of a wrong file, not a license.
const maxLicenseFile = 512 << 10

// listTimeout bounds go list; it reads the module cache only.
const listTimeout = 5 * time.Minute

// linkedModule is one module a build links, with its license files.
type linkedModule struct {
	Path, Version string
	Dir           string
	Files         []licenseFile // LICENSE*, LICENCE*, COPYING*, NOTICE*, in name order
}

type licenseFile struct {
	Name string
	Kind string // an SPDX identifier, or "see text"
	Text []byte
}

// goListPackage is the part of `go list -json` output read here.
type goListPackage struct {
	Standard bool
	Module   *struct {
		Path    string
		Version string
		Main    bool
		Dir     string
		Replace *struct {
			Path    string
			Version string
			Dir     string
		}
	}
}

// linkedModules lists the modules the binaries (cmd/NAME) link for goos
// and goarch, the main module and the standard library aside, sorted by
// path, each with its license files from the module cache. A module with
// no license file is an error: a release must not ship code whose terms
// it cannot state.
func (p Plan) linkedModules(goos, goarch string) ([]linkedModule, error) {
	args := []string{"list", "-deps", "-json=Standard,Module"}
	for _, b := range p.Binaries {
		args = append(args, "./cmd/"+b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Go, args...)
	cmd.Dir = p.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=")
	cmd.Env = append(cmd.Env, p.Env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps: %w\n%s", err, stderr.String())
	}
	seen := map[string]linkedModule{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var pkg goListPackage
		if err := dec.Decode(&pkg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		m := pkg.Module
		if pkg.Standard || m == nil || m.Main {
			continue
		}
		lm := linkedModule{Path: m.Path, Version: m.Version, Dir: m.Dir}
		if r := m.Replace; r != nil {
			lm.Version, lm.Dir = r.Path+" "+r.Version, r.Dir
		}
		seen[m.Path] = lm
	}
	var mods []linkedModule
	for _, path := range slices.Sorted(mapKeys(seen)) {
		m := seen[path]
		if m.Dir == "" {
			return nil, fmt.Errorf("module %s %s is not in the module cache (go mod download)", m.Path, m.Version)
		}
		files, err := licenseFiles(m.Dir)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", m.Path, err)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("module %s %s has no LICENSE, LICENCE or COPYING file in %s", m.Path, m.Version, m.Dir)
		}
		m.Files = files
		mods = append(mods, m)
	}
	return mods, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// licenseFiles reads the license and notice files at the top of dir.
func licenseFiles(dir string) ([]licenseFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []licenseFile
	hasLicense := false
	for _, e := range entries {
		name := e.Name()
		upper := strings.ToUpper(name)
		isLicense := strings.HasPrefix(upper, "LICENSE") || strings.HasPrefix(upper, "LICENCE") || strings.HasPrefix(upper, "COPYING")
		if !e.Type().IsRegular() || !(isLicense || strings.HasPrefix(upper, "NOTICE")) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		text, err := io.ReadAll(io.LimitReader(f, maxLicenseFile+1))
		f.Close()
		if err != nil {
			return nil, err
		}
		if len(text) > maxLicenseFile {
			return nil, fmt.Errorf("%s is over %d bytes", name, maxLicenseFile)
		}
		hasLicense = hasLicense || isLicense
		out = append(out, licenseFile{Name: name, Kind: classifyLicense(text), Text: text})
	}
	if !hasLicense {
		return nil, nil
	}
	return out, nil
}

// classifyLicense names the common licenses by phrases their texts carry;
// anything else is reported as "see text" (the text is in the report
// either way).
func classifyLicense(text []byte) string {
	s := strings.Join(strings.Fields(string(text)), " ")
	has := func(phrases ...string) bool {
		for _, p := range phrases {
			if !strings.Contains(s, p) {
				return false
			}
		}
		return true
	}
	switch {
	case has("Apache License", "Version 2.0"):
		return "Apache-2.0"
	case has("Mozilla Public License", "2.0"):
		return "MPL-2.0"
	case has("Permission is hereby granted, free of charge"):
		return "MIT"
	case has("Permission to use, copy, modify, and/or distribute this software for any purpose"),
		has("Permission to use, copy, modify, and distribute this software for any purpose"):
		return "ISC"
	case has("Redistribution and use in source and binary forms", "Neither the name"),
		has("Redistribution and use in source and binary forms", "names of its contributors"):
		return "BSD-3-Clause"
	case has("Redistribution and use in source and binary forms"):
		return "BSD-2-Clause"
	case has("This is free and unencumbered software released into the public domain"):
		return "Unlicense"
	case has("CC0 1.0 Universal"):
		return "CC0-1.0"
	case has("public domain"):
		return "public domain"
	}
	return "see text"
}

// licenseReport is LICENSE-THIRD-PARTY.txt for one platform: a summary
// table, then every module's license and notice texts verbatim, then the
// Go standard library's license (the runtime is linked into every binary).
func (p Plan) licenseReport(goos, goarch string) ([]byte, error) {
	mods, err := p.linkedModules(goos, goarch)
	if err != nil {
		return nil, err
	}
	goroot, err := p.goEnv("GOROOT")
	if err != nil {
		return nil, err
	}
	std, err := licenseFiles(goroot)
	if err != nil || len(std) == 0 {
		return nil, fmt.Errorf("the Go standard library's LICENSE in %s: %v", goroot, err)
	}
	goVersion, err := p.goEnv("GOVERSION")
	if err != nil {
		return nil, err
	}
	mods = append(mods, linkedModule{Path: "Go standard library and runtime", Version: goVersion, Files: std})

	var b bytes.Buffer
	fmt.Fprintf(&b, "Licenses of the code linked into %s for %s/%s\n\n", strings.Join(p.Binaries, " and "), goos, goarch)
	fmt.Fprintf(&b, "Aperio itself is under the Apache License 2.0 (LICENSE). The binaries also\n")
	fmt.Fprintf(&b, "link the modules below; each one's license and notice files follow, verbatim.\n\n")
	for _, m := range mods {
		var kinds []string
		for _, f := range m.Files {
			if !strings.HasPrefix(strings.ToUpper(f.Name), "NOTICE") && !slices.Contains(kinds, f.Kind) {
				kinds = append(kinds, f.Kind)
			}
		}
		fmt.Fprintf(&b, "  %-50s %-40s %s\n", m.Path, m.Version, strings.Join(kinds, ", "))
	}
	for _, m := range mods {
		for _, f := range m.Files {
			fmt.Fprintf(&b, "\n%s\n%s %s: %s (%s)\n%s\n\n", strings.Repeat("=", 78), m.Path, m.Version, f.Name, f.Kind, strings.Repeat("=", 78))
			b.Write(bytes.TrimRight(f.Text, "\n"))
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), nil
}

func (p Plan) goEnv(name string) (string, error) {
	cmd := exec.Command(p.Go, "env", name)
	cmd.Dir = p.Root
	cmd.Env = append(os.Environ(), p.Env...)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("go env %s is empty", name)
	}
	return v, nil
}
