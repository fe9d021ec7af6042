package admin

import (
	"encoding/hex"
	"time"

	"github.com/aperio-dev/aperio/store"
)

// Org is an organization as the API shows it.
type Org struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateOrgRequest is the body of POST /orgs.
type CreateOrgRequest struct {
	// Name must be unique across the server.
	Name string `json:"name"`
}

// Key is an admin key as listings show it: never its secret or hash.
type Key struct {
	ID     string `json:"id"`
	OrgID  string `json:"org_id"`
	Name   string `json:"name"`
	Role   string `json:"role"`
	Prefix string `json:"prefix"`
	// CreatedBy is the actor that created the key: "master" or "key:<id>".
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
}

// MintedKey is the answer to POST /admin-keys: the new key and, this once,
// its secret.
type MintedKey struct {
	Key
	// Secret is the apk_ key to send as a bearer credential. The server
	// keeps only its hash: it is shown here and never again.
	Secret string `json:"key"`
}

// CreateKeyRequest is the body of POST /admin-keys.
type CreateKeyRequest struct {
	Name string `json:"name"`
	// Role is RoleViewer, RoleOperator or RoleAdmin.
	Role string `json:"role"`
	// OrgID is the organization of the new key. Only the master token may
	// set it; empty means the caller's organization, or DefaultOrg for the
	// master token.
	OrgID string `json:"org_id,omitempty"`
}

// The statuses of a token.
const (
	TokenActive  = "active"
	TokenRevoked = "revoked"
	TokenExpired = "expired"
)

// Token is a client token as listings show it: never its secret or hash.
type Token struct {
	ID         string     `json:"id"`
	OrgID      string     `json:"org_id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	Hostnames  []string   `json:"hostnames"`
	AllowedIPs []string   `json:"allowed_ips"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	// Status is TokenActive, TokenRevoked or TokenExpired, as of the
	// answer.
	Status string `json:"status"`
}

// MintedToken is the answer to POST /tokens: the new token and, this
// once, its secret.
type MintedToken struct {
	Token
	// Secret is the apr_ token a client connects with. The server keeps
	// only its hash: it is shown here and never again.
	Secret string `json:"token"`
}

// CreateTokenRequest is the body of POST /tokens.
type CreateTokenRequest struct {
	Name string `json:"name"`
	// Hostnames are the hostnames the token may bind, exact or "*."
	// wildcards. At least one.
	Hostnames []string `json:"hostnames"`
	// AllowedIPs are the CIDRs (or bare addresses) of the visitors allowed
	// on the routes the token publishes. Empty means any visitor.
	AllowedIPs []string `json:"allowed_ips,omitempty"`
	// ExpiresAt is when the token stops working; nil means never. It must
	// be in the future.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
}

// Maintenance is a hostname in maintenance mode.
type Maintenance struct {
	Hostname string `json:"hostname"`
	OrgID    string `json:"org_id"`
	// By is the actor that turned maintenance on.
	By    string    `json:"by"`
	Since time.Time `json:"since"`
}

// MaintenanceRequest is the optional body of PUT /maintenance/{hostname}.
type MaintenanceRequest struct {
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
}

// ScalingRecord is a scaling record as GET /scaling shows it: one bind's
// scaling declaration, its live pool on the server that answered, its
// breaker and its last hook call. It mirrors the JSON the server writes
// (autoscale.View) field for field, so that re-encoding it gives the same
// keys and values. It never holds the hook's secret, only whether one is
// set.
type ScalingRecord struct {
	ID       string `json:"id"`
	Hostname string `json:"hostname"`
	// Path is the prefix bind, "" for none.
	Path  string `json:"path"`
	OrgID string `json:"org_id"`
	// URL is the provider's hook URL.
	URL string `json:"url"`
	// Authenticated says the declaration carries a secret.
	Authenticated bool `json:"authenticated"`
	// Min and Max bound the instances the server asks for; Max 0 means
	// cold starts only.
	Min int `json:"min"`
	Max int `json:"max"`
	// ColdStart, Window and Cooldown are durations in Go syntax ("45s",
	// "1m0s"), as time.ParseDuration reads them.
	ColdStart string `json:"cold_start"`
	// TargetUtilization is the scale-out threshold, in (0,1].
	TargetUtilization float64 `json:"target_utilization"`
	Window            string  `json:"window"`
	Cooldown          string  `json:"cooldown"`
	// Instances counts the client processes serving the bind, Capacity
	// sums their effective max_concurrent, and Inflight counts their
	// requests in flight, as the answering server sees them.
	Instances int `json:"instances"`
	Capacity  int `json:"capacity"`
	Inflight  int `json:"inflight"`
	// Utilization is Inflight/Capacity; nil when Capacity is 0 and
	// utilization cannot be measured.
	Utilization *float64 `json:"utilization"`
	// Disarmed says the breaker tripped after repeated failed calls: the
	// hook is not called until a client re-arms the record.
	Disarmed bool `json:"disarmed"`
	// Conflict says two live clients declare different blocks for the
	// bind; the newest declaration is the one shown and used.
	Conflict            bool `json:"conflict"`
	ConsecutiveFailures int  `json:"consecutive_failures"`
	// LastCallAt is when the hook was last called; nil means never.
	LastCallAt *time.Time `json:"last_call_at"`
	// LastReason is the last call's reason: "cold_start", "scale_out" or
	// "scale_in"; "" when there was none.
	LastReason string `json:"last_reason"`
	// LastStatus is the last call's HTTP status; 0 when the call got no
	// response, or there was none.
	LastStatus int `json:"last_status"`
	// UpdatedAt is when a client last declared the record.
	UpdatedAt time.Time `json:"updated_at"`
}

// Webhook is a webhook subscription as the API shows it: never its
// secret, only whether one is set.
type Webhook struct {
	ID    string `json:"id"`
	OrgID string `json:"org_id"`
	// URL receives the deliveries.
	URL string `json:"url"`
	// Events are the event names delivered, such as "scaling_failed".
	Events []string `json:"events"`
	// Authenticated says deliveries are signed (a secret is set).
	Authenticated bool      `json:"authenticated"`
	CreatedAt     time.Time `json:"created_at"`
}

// CreateWebhookRequest is the body of POST /webhooks.
type CreateWebhookRequest struct {
	// URL receives the deliveries: absolute, https unless the server
	// allows http, and permitted by the server's outbound policy.
	URL string `json:"url"`
	// Events are the event names to deliver; at least one, each one of
	// autoscale.EventTypes.
	Events []string `json:"events"`
	// Secret keys the X-Aperio-Signature of each delivery; empty sends
	// deliveries unsigned. It is never shown again.
	Secret string `json:"secret,omitempty"`
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
}

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// OrgID is the organization concerned; "" for events outside any (a
	// failed login), which only the master token sees.
	OrgID string `json:"org_id"`
	// Event is one of the Event constants.
	Event string `json:"event"`
	// Actor is "master", "key:<id>", or "anonymous" for a failed login.
	Actor    string `json:"actor"`
	Hostname string `json:"hostname"`
	Detail   string `json:"detail"`
	// Seq is the entry's place in the audit hash chain (1, 2, 3, … across
	// every organization, so a key sees gaps where other organizations'
	// entries are).
	Seq int64 `json:"seq"`
	// PrevHash and Hash link the entry into the chain, in lowercase hex:
	// Hash is SHA-256 over PrevHash and the entry's fields (see
	// docs/audit-and-explain.md); aperio-server --verify-audit checks it.
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
}

func orgOf(o store.Org) Org {
	return Org{ID: o.ID, Name: o.Name, CreatedAt: o.CreatedAt}
}

func keyOf(k store.AdminKey) Key {
	return Key{
		ID:        k.ID,
		OrgID:     k.OrgID,
		Name:      k.Name,
		Role:      k.Role,
		Prefix:    k.Prefix,
		CreatedBy: k.CreatedBy,
		CreatedAt: k.CreatedAt,
	}
}

// tokenOf shows t with its status at now.
func tokenOf(t store.Token, now time.Time) Token {
	status := TokenActive
	switch {
	case t.RevokedAt != nil:
		status = TokenRevoked
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		status = TokenExpired
	}
	return Token{
		ID:         t.ID,
		OrgID:      t.OrgID,
		Name:       t.Name,
		Prefix:     t.Prefix,
		Hostnames:  nonNil(t.Hostnames),
		AllowedIPs: nonNil(t.AllowedIPs),
		ExpiresAt:  t.ExpiresAt,
		RevokedAt:  t.RevokedAt,
		CreatedBy:  t.CreatedBy,
		CreatedAt:  t.CreatedAt,
		Status:     status,
	}
}

func webhookOf(w store.Webhook) Webhook {
	return Webhook{
		ID:            w.ID,
		OrgID:         w.OrgID,
		URL:           w.URL,
		Events:        nonNil(w.Events),
		Authenticated: w.Secret != "",
		CreatedAt:     w.CreatedAt,
	}
}

func maintenanceOf(m store.Maintenance) Maintenance {
	return Maintenance{Hostname: m.Hostname, OrgID: m.OrgID, By: m.By, Since: m.Since}
}

func auditOf(e store.AuditEntry) AuditEntry {
	return AuditEntry{
		ID:       e.ID,
		At:       e.At,
		OrgID:    e.OrgID,
		Event:    e.Event,
		Actor:    e.Actor,
		Hostname: e.Hostname,
		Detail:   e.Detail,
		Seq:      e.Seq,
		PrevHash: hex.EncodeToString(e.PrevHash),
		Hash:     hex.EncodeToString(e.Hash),
	}
}

// nonNil returns l, or an empty list for nil, so that JSON shows [].
func nonNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

// mapList converts every element of in, and answers [] rather than null
// for none.
func mapList[S, T any](in []S, f func(S) T) []T {
	out := make([]T, 0, len(in))
	for _, s := range in {
		out = append(out, f(s))
	}
	return out
}
