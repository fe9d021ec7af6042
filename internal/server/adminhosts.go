package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/dashboard"
	"github.com/aperio-dev/aperio/internal/hostname"
)

// MaxAdminHosts bounds admin_hosts.
const MaxAdminHosts = 100

// AdminHostsDefault says, for people, what an empty admin_hosts means.
const AdminHostsDefault = "IP addresses, localhost and *.localhost"

// adminHosts is where the operators' pages answer (admin_hosts): exact
// hostnames, "*." wildcards and IP addresses; the zero value is the
// default (any IP address, localhost, *.localhost). Immutable.
type adminHosts struct {
	set      bool
	patterns []string
	addrs    []netip.Addr
}

// newAdminHosts parses admin_hosts: every entry an exact hostname, a "*."
// wildcard or an IP address, at most MaxAdminHosts.
func newAdminHosts(list []string) (adminHosts, error) {
	if len(list) > MaxAdminHosts {
		return adminHosts{}, fmt.Errorf("%d entries, at most %d", len(list), MaxAdminHosts)
	}
	a := adminHosts{set: len(list) > 0}
	var errs []error
	for _, e := range list {
		if ip, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
			a.addrs = append(a.addrs, ip.Unmap())
			continue
		}
		n := strings.ToLower(strings.TrimSuffix(e, "."))
		if err := hostname.Validate(n); err != nil {
			errs = append(errs, fmt.Errorf("%q is neither a hostname, a *. wildcard nor an IP address", e))
			continue
		}
		a.patterns = append(a.patterns, n)
	}
	return a, errors.Join(errs...)
}

// CheckAdminHosts reports the problems of an admin_hosts list, each
// naming its entry, without the key's name.
func CheckAdminHosts(list []string) error {
	_, err := newAdminHosts(list)
	return err
}

// allows reports whether host, a request's Host header, is one of the
// admin hosts.
func (a adminHosts) allows(host string) bool {
	host = hostname.Normalize(host)
	ip, ipErr := netip.ParseAddr(strings.Trim(host, "[]"))
	if !a.set {
		return ipErr == nil || host == "localhost" || strings.HasSuffix(host, ".localhost")
	}
	if ipErr == nil {
		ip = ip.Unmap()
		for _, x := range a.addrs {
			if x == ip {
				return true
			}
		}
		return false
	}
	for _, p := range a.patterns {
		if hostname.Match(p, host) {
			return true
		}
	}
	return false
}

// adminPath reports whether p, a path under /aperio/, is one of the
// operators' pages that answer only on admin_hosts: the dashboard, the
// admin API and the admin login. The admin login's callback shares
// /aperio/auth/callback with the services' logins and is told apart by
// its cookie (Handler). /aperio/metrics is not one: it has its own token
// and stays on every hostname, like the tunnel, the health endpoints, the
// JWKS and the visitors' logins.
func adminPath(p string) bool {
	return dashboard.Owns(p) || p == admin.Prefix || strings.HasPrefix(p, admin.Prefix+"/") || strings.HasPrefix(p, adminLoginPrefix)
}

// refuseAdminHost answers 404 to a request for an admin path on a
// hostname outside admin_hosts, naming the setting.
func refuseAdminHost(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotFound, map[string]string{
		"error": "no such endpoint on this hostname: the dashboard and the admin API answer only on the hostnames of admin_hosts (default: " + AdminHostsDefault + ")",
	})
}
