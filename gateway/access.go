package gateway

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/aperio-dev/aperio/access"
	"github.com/aperio-dev/aperio/router"
)

// IdentityIssuer is the iss of the identity tokens the server signs for
// backends (identity_jwt).
const IdentityIssuer = "aperio"

// accessConfig returns the router's side of visitor access control:
// default_access, an identity signer whose key is generated at start, and
// the outbound client of the jwt and forward methods, under the same
// fence as scaling hooks and webhooks (never http.DefaultClient).
func (g *Gateway) accessConfig() (router.AccessConfig, error) {
	posture, err := g.cfg.posture()
	if err != nil {
		return router.AccessConfig{}, err
	}
	signer, err := access.NewSigner(access.SignerConfig{Issuer: IdentityIssuer})
	if err != nil {
		return router.AccessConfig{}, fmt.Errorf("gateway: identity signer: %w", err)
	}
	g.signer = signer
	return router.AccessConfig{Default: posture, Identity: signer, Client: g.fence.HTTPClient()}, nil
}

// serveJWKS answers GET and HEAD of access.JWKSPath with the identity
// signer's public key set, on every hostname and without auth.
func (g *Gateway) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body := g.signer.JWKS()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}
