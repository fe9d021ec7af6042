package router

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// MaxFallbacks bounds fallbacks.
const MaxFallbacks = 1024

// Fallback is a redirect visitors get when no client can serve their
// hostname (an entry of fallbacks).
type Fallback struct {
	// Hostname is an exact hostname, a "*." wildcard, or "*" for every
	// hostname without a fallback of its own. An exact entry wins over a
	// wildcard, the longest wildcard over shorter ones.
	Hostname string
	// URL is where visitors go: an absolute http or https URL.
	URL string
	// PreservePath appends the request's path and query to URL's path.
	PreservePath bool
	// Permanent answers 301 instead of 302.
	Permanent bool
}

// Check reports what is wrong with f, or nil.
func (f Fallback) Check() error {
	var errs []error
	if f.Hostname != "*" {
		if err := hostname.Validate(f.Hostname); err != nil {
			errs = append(errs, err)
		}
	}
	u, err := url.Parse(f.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("url %q is not an absolute http or https URL", f.URL))
	} else if f.PreservePath && (u.RawQuery != "" || u.Fragment != "") {
		errs = append(errs, fmt.Errorf("url %q has a query or fragment: preserve_path appends the request's path and query to it", f.URL))
	}
	return errors.Join(errs...)
}

// checkFallbacks reports every problem of fs, joined: bad entries, too
// many, and two for one hostname pattern.
func checkFallbacks(fs []Fallback) error {
	var errs []error
	if len(fs) > MaxFallbacks {
		errs = append(errs, fmt.Errorf("router: %d fallbacks, more than %d", len(fs), MaxFallbacks))
	}
	seen := make(map[string]bool, len(fs))
	for i, f := range fs {
		if err := f.Check(); err != nil {
			errs = append(errs, fmt.Errorf("router: fallback %d: %w", i, err))
		}
		h := hostname.Normalize(f.Hostname)
		if seen[h] {
			errs = append(errs, fmt.Errorf("router: fallback %d: %s has another fallback", i, h))
		}
		seen[h] = true
	}
	return errors.Join(errs...)
}

// fallbackFor returns host's fallback in set, or nil.
func (rt *Router) fallbackFor(set *settings, host string) *Fallback {
	f, _ := set.fallbacks.lookup(host)
	return f
}

// target is where f sends a visitor asking for requestURI.
func (f *Fallback) target(requestURI string) string {
	if !f.PreservePath || requestURI == "" || requestURI == "/" {
		return f.URL
	}
	return strings.TrimSuffix(f.URL, "/") + requestURI
}

// status is f's redirect status.
func (f *Fallback) status() int {
	if f.Permanent {
		return http.StatusMovedPermanently
	}
	return http.StatusFound
}

// redirect answers r with f's redirect.
func (f *Fallback) redirect(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, f.target(r.URL.RequestURI()), f.status())
}
