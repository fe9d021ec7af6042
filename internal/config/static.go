package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultIndex is the index file of a serve: directory.
const DefaultIndex = "index.html"

// staticSettings are the service keys of a serve: service, in
// --print-config order.
func staticSettings() []setting[Service] {
	type S = Service
	return []setting[S]{
		stringSetting("serve", "directory the client serves itself, instead of a target", func(c *S) *string { return &c.Serve }),
		boolSetting("spa", "answer a missing extensionless path with the index (single-page apps)", func(c *S) *bool { return &c.SPA }),
		stringSetting("index", "file served for a directory (default index.html)", func(c *S) *string { return &c.Index }),
		boolSetting("directory_listing", "list a directory that has no index (default: 404)", func(c *S) *bool { return &c.DirectoryListing }),
		boolSetting("tls_passthrough", "receive this service's TLS connections unterminated, routed by SNI", func(c *S) *bool { return &c.TLSPassthrough }),
	}
}

// isStaticKey reports whether norm is a key of staticSettings.
func isStaticKey(norm string) bool {
	for _, s := range staticSettings() {
		if s.norm == norm {
			return true
		}
	}
	return false
}

// resolveServe makes s.Serve absolute: relative to the directory of the
// file that set it, or to the working directory when a flag or the
// environment did.
func resolveServe(s *Service, src Source) {
	if s.Serve == "" || filepath.IsAbs(s.Serve) {
		return
	}
	if src.Kind == SourceFile && src.Name != "" {
		s.Serve = filepath.Join(filepath.Dir(src.Name), s.Serve)
	}
	if abs, err := filepath.Abs(s.Serve); err == nil {
		s.Serve = abs
	}
}

// static checks the serve: and tls_passthrough settings of the service
// at prefix p.
func (v *checker) static(p string, s Service) {
	if s.Serve == "" {
		for _, k := range []struct {
			key string
			set bool
		}{{"spa", s.SPA}, {"index", s.Index != ""}, {"directory_listing", s.DirectoryListing}} {
			if k.set {
				v.add(p+k.key, "applies to a serve: service only")
			}
		}
	} else {
		if s.Target != "" {
			v.add(p+"serve", "cannot be combined with target: a service either serves a directory or forwards to a target")
		}
		if s.Index != "" && (strings.ContainsAny(s.Index, `/\`) || s.Index == "." || s.Index == ".." || len(s.Index) > 255 || strings.ContainsFunc(s.Index, func(r rune) bool { return r < ' ' || r == 0x7f })) {
			v.add(p+"index", "%q is not a file name", s.Index)
		}
		if s.AllowConnect {
			v.add(p+"allow_connect", "cannot be combined with serve")
		}
		if s.WaitForBackend {
			v.add(p+"wait_for_backend", "cannot be combined with serve: a directory has no backend to wait for")
		}
	}
	if !s.TLSPassthrough {
		return
	}
	switch {
	case s.Serve != "":
		v.add(p+"tls_passthrough", "cannot be combined with serve")
	case strings.HasPrefix(s.Target, TargetUnix+":"):
		v.add(p+"tls_passthrough", "needs a TCP target (host:port), not a unix socket")
	}
	if s.Path != "" {
		v.add(p+"tls_passthrough", "cannot be combined with path: the server routes passed-through connections by hostname alone")
	}
	if s.Auth != nil {
		v.add(p+"tls_passthrough", "cannot be combined with auth: the server sees no request to check credentials on")
	}
	if s.Headers != nil {
		v.add(p+"tls_passthrough", "cannot be combined with headers: the server sees no response")
	}
	if s.Resilience {
		v.add(p+"tls_passthrough", "cannot be combined with resilience: the server sees no response to cache")
	}
}

// checkServeDirs reports each serve: directory that is missing or not a
// directory.
func checkServeDirs(c Client, v *checker) {
	for i, s := range c.Services {
		if s.Serve == "" {
			continue
		}
		fi, err := os.Stat(s.Serve)
		switch {
		case err != nil:
			v.add(fmt.Sprintf("services[%d].serve", i), "%s: %v", s.Serve, unwrapPathError(err))
		case !fi.IsDir():
			v.add(fmt.Sprintf("services[%d].serve", i), "%s is not a directory", s.Serve)
		}
	}
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// Probed reports whether the client probes the service's health: a
// serve: directory or a passed-through TLS service is never probed
// (there is no HTTP endpoint of the backend's to ask), any other service
// when its health asks for it.
func (s Service) Probed() bool {
	return s.Serve == "" && !s.TLSPassthrough && s.Health.Probes()
}

// ServeIndex is the index file of a serve: service.
func (s Service) ServeIndex() string {
	if s.Index == "" {
		return DefaultIndex
	}
	return s.Index
}
