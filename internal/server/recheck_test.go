package server_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/store"
)

// TestRecheckTokensDisconnectsRevoked: a token revoked where the server
// could not see it (another handle on the store, whose changes this
// server's feed does not carry) keeps its sessions until the re-check,
// which ends every session of that token and only those.
func TestRecheckTokensDisconnectsRevoked(t *testing.T) {
	t.Parallel()
	h := newScalingHarness(t)
	revoked := h.token(t, h.orgB, "b.example.net")
	kept := h.token(t, h.orgB, "*.b.example.net")
	h.client(t, revoked, "b.example.net")
	h.client(t, revoked, "b.example.net")
	k := h.client(t, kept, "x.b.example.net")
	waitClients(t, h.visitor, h.srv, 3)

	other, err := store.Open(t.Context(), store.Config{DataDir: h.dataDir})
	if err != nil {
		t.Fatalf("store.Open(second handle) = %v", err)
	}
	t.Cleanup(func() {
		if err := other.Close(); err != nil {
			t.Errorf("close second handle: %v", err)
		}
	})
	sum := sha256.Sum256([]byte(revoked))
	tok, err := other.TokenByHash(t.Context(), sum[:])
	if err != nil {
		t.Fatalf("TokenByHash() = %v", err)
	}
	if _, err := other.RevokeToken(t.Context(), "", tok.ID, time.Now()); err != nil {
		t.Fatalf("RevokeToken() = %v", err)
	}
	if got := health(t, h.visitor, h.srv).ConnectedClients; got != 3 {
		t.Fatalf("connected clients after a revocation the server did not see = %d, want 3", got)
	}
	h.srv.gw.RecheckTokensForTest(t.Context())
	waitClients(t, h.visitor, h.srv, 1)
	if n := k.notices.tunnelDowns(); n != 0 || !k.c.Connected() {
		t.Errorf("the client of the kept token went down %d times (connected %v), want 0 (true)", n, k.c.Connected())
	}
}
