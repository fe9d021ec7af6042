// Package oidc owns the browser login of Aperio's visitor access control:
// the OpenID Connect authorization code flow with PKCE against one
// provider the operator configures, the sealed session cookie it leaves on
// the visited hostname, the per-service allow rules (emails, email
// domains, groups) checked on every request, and logout. It is server
// only: every call it makes to the provider goes through the
// *http.Client its caller gives, never http.DefaultClient.
//
// The design (one callback per visited hostname, what each cookie holds,
// which status answers which failure) is in docs/access-control-oidc.md.
package oidc
