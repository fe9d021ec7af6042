package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/store"
)

// TestIdentityAllowTCPPorts: a token's allow_tcp_ports reach its sessions'
// identity as ranges; the master token may use every port of the range;
// a stored list that does not parse refuses the token rather than
// granting a guess.
func TestIdentityAllowTCPPorts(t *testing.T) {
	t.Parallel()
	tok := store.Token{ID: "tok_1", OrgID: "org_1", Name: "ssh", Limits: store.TokenLimits{AllowTCPPorts: []string{"2222", "20000-20010"}}}
	id, err := identityOf(tok, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []portspec.Range{{Lo: 2222, Hi: 2222}, {Lo: 20000, Hi: 20010}}; !slices.Equal(id.AllowTCPPorts, want) || id.AnyTCPPort {
		t.Errorf("identity ports = %v any=%v, want %v and not any", id.AllowTCPPorts, id.AnyTCPPort, want)
	}
	if id, _ := identityOf(store.Token{ID: "tok_2"}, false); len(id.AllowTCPPorts) != 0 || id.AnyTCPPort {
		t.Errorf("a token without ports got %v any=%v, want none", id.AllowTCPPorts, id.AnyTCPPort)
	}
	tok.Limits.AllowTCPPorts = []string{"99999"}
	if _, err := identityOf(tok, false); err == nil || !strings.Contains(err.Error(), "allow_tcp_ports") {
		t.Errorf("a hand-edited bad list = %v, want the token refused naming allow_tcp_ports", err)
	}
	a := &tokenAuth{master: []byte("master-secret"), defaultOrg: "org_default", now: time.Now}
	m, err := a.Authenticate(t.Context(), "master-secret")
	if err != nil || !m.AnyTCPPort || m.TokenID != "" {
		t.Errorf("master identity = %+v, %v; want AnyTCPPort", m, err)
	}
}
