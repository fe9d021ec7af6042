package config

import (
	"maps"
	"slices"

	"github.com/aperio-dev/aperio/internal/headerrule"
)

// HeaderRules are a service's response header rules (headers:), which the
// client announces and the server applies to the service's answers, its
// own rules winning on conflict. Applied remove, then set, then add.
type HeaderRules struct {
	// Set replaces a header's values with the one given.
	Set map[string]string `yaml:"set"`
	// Add appends a value.
	Add map[string]string `yaml:"add"`
	// Remove deletes a header.
	Remove []string `yaml:"remove"`
}

// headers checks the header rules of the service at prefix p: the names
// and values the server accepts (no hop-by-hop or framing header, no
// X-Aperio-*, no control character), at most headerrule.MaxService
// entries. The server checks them again.
func (v *checker) headers(p string, s Service) {
	h := s.Headers
	if h == nil {
		return
	}
	if n := len(h.Set) + len(h.Add) + len(h.Remove); n > headerrule.MaxService {
		v.add(p+"headers", "%d entries, at most %d", n, headerrule.MaxService)
		return
	}
	for _, kind := range []struct {
		name string
		m    map[string]string
	}{{"set", h.Set}, {"add", h.Add}} {
		for _, k := range slices.Sorted(maps.Keys(kind.m)) {
			if err := headerrule.Check(k, kind.m[k]); err != nil {
				v.add(p+"headers", "%s: %v", kind.name, err)
			}
		}
	}
	for _, k := range h.Remove {
		if err := headerrule.Check(k, ""); err != nil {
			v.add(p+"headers", "remove: %v", err)
		}
	}
}
