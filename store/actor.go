package store

// Actor names who did what an audit entry records. Its spellings are
// public (the admin API's audit listing and its actor filter, webhooks'
// detail.actor), so every actor is built here and nowhere else.
type Actor string

// The actors that are not one token, key or user.
const (
	// MasterActor is the master token: an admin API call made with it, or
	// a tunnel client it authenticates.
	MasterActor Actor = "master"
	// ServerActor is the server acting on its own (a reload, an
	// expiring token, a certificate, a quota).
	ServerActor Actor = "server"
	// VisitorActor is a visitor refused by a hostname's access rules.
	VisitorActor Actor = "visitor"
	// AnonymousActor is an admin API caller no credential identifies (a
	// failed login).
	AnonymousActor Actor = "anonymous"
)

// TokenActor is the client token id: "token:ID".
func TokenActor(id string) Actor { return "token:" + Actor(id) }

// ClientActor is a tunnel client authenticated by the token tokenID:
// TokenActor(tokenID), or MasterActor when tokenID is empty (the master
// token has no ID).
func ClientActor(tokenID string) Actor {
	if tokenID == "" {
		return MasterActor
	}
	return TokenActor(tokenID)
}

// AdminKeyActor is the admin key id: "key:ID".
func AdminKeyActor(id string) Actor { return "key:" + Actor(id) }

// OIDCActor is an admin login session of the OpenID Connect user (the
// email or subject the session names): "oidc:USER".
func OIDCActor(user string) Actor { return "oidc:" + Actor(user) }

// String returns the actor as the audit log spells it.
func (a Actor) String() string { return string(a) }
