package admin

import (
	"cmp"
	"encoding/hex"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
)

// The API's wire types are declared in wire, which the API's Go client
// shares without linking the server; these aliases keep their admin names.
type (
	// Org is an organization as the API shows it.
	Org = apitype.Org
	// CreateOrgRequest is the body of POST /orgs.
	CreateOrgRequest = apitype.CreateOrgRequest
	// OrgHostnames is the answer to GET and PUT /orgs/{id}/hostnames.
	OrgHostnames = apitype.OrgHostnames
	// SetOrgHostnamesRequest is the body of PUT /orgs/{id}/hostnames.
	SetOrgHostnamesRequest = apitype.SetOrgHostnamesRequest
	// OrgPorts is the answer to GET and PUT /orgs/{id}/ports.
	OrgPorts = apitype.OrgPorts
	// SetOrgPortsRequest is the body of PUT /orgs/{id}/ports.
	SetOrgPortsRequest = apitype.SetOrgPortsRequest
	// Key is an admin key as listings show it: never its secret or hash.
	Key = apitype.Key
	// MintedKey is the answer to POST /admin-keys.
	MintedKey = apitype.MintedKey
	// CreateKeyRequest is the body of POST /admin-keys.
	CreateKeyRequest = apitype.CreateKeyRequest
	// Token is a client token as listings show it: never its secret or hash.
	Token = apitype.Token
	// MintedToken is the answer to POST /tokens.
	MintedToken = apitype.MintedToken
	// CreateTokenRequest is the body of POST /tokens.
	CreateTokenRequest = apitype.CreateTokenRequest
	// UpdateTokenRequest is the body of PATCH /tokens/{id}.
	UpdateTokenRequest = apitype.UpdateTokenRequest
	// RotateTokenRequest is the body of POST /tokens/{id}/rotate.
	RotateTokenRequest = apitype.RotateTokenRequest
	// UpdateOrgRequest is the body of PATCH /orgs/{id}.
	UpdateOrgRequest = apitype.UpdateOrgRequest
	// Maintenance is a hostname in maintenance mode.
	Maintenance = apitype.Maintenance
	// CreateShareRequest is the body of POST /share.
	CreateShareRequest = apitype.CreateShareRequest
	// ShareLink is the answer to POST /share.
	ShareLink = apitype.ShareLink
	// RotateShareKeyRequest is the body of POST /share/keys/rotate.
	RotateShareKeyRequest = apitype.RotateShareKeyRequest
	// ShareKey is the answer to POST /share/keys/rotate.
	ShareKey = apitype.ShareKey
	// RevokeOIDCSessionsRequest is the body of POST
	// /oidc/sessions/revoke.
	RevokeOIDCSessionsRequest = apitype.RevokeOIDCSessionsRequest
	// OIDCSessionsRevoked is the answer to POST /oidc/sessions/revoke.
	OIDCSessionsRevoked = apitype.OIDCSessionsRevoked
	// MaintenanceRequest is the optional body of PUT
	// /maintenance/{hostname}.
	MaintenanceRequest = apitype.MaintenanceRequest
	// ScalingRecord is a scaling record as GET /scaling shows it: how
	// autoscale.View encodes.
	ScalingRecord = apitype.ScalingRecord
	// ScalingRecordDetail is the answer to GET /scaling/{id}.
	ScalingRecordDetail = apitype.ScalingRecordDetail
	// Webhook is a webhook subscription as the API shows it.
	Webhook = apitype.Webhook
	// CreateScalingRequest is the body of POST /scaling.
	CreateScalingRequest = apitype.CreateScalingRequest
	// CreateWebhookRequest is the body of POST /webhooks.
	CreateWebhookRequest = apitype.CreateWebhookRequest
	// WebhookDelivery is one delivery of a webhook's log.
	WebhookDelivery = apitype.WebhookDelivery
	// AuditEntry is one line of the audit log.
	AuditEntry = apitype.AuditEntry
	// WhoAmI is the answer to GET /whoami.
	WhoAmI = apitype.WhoAmI
)

// The statuses of a token.
const (
	TokenActive  = apitype.TokenActive
	TokenRevoked = apitype.TokenRevoked
	TokenExpired = apitype.TokenExpired
)

func orgOf(o store.Org) Org {
	l := o.Limits
	return Org{ID: o.ID, Name: o.Name, CreatedAt: o.CreatedAt, OrgLimits: apitype.OrgLimits{
		MonthlyMaxBytes: l.MonthlyMaxBytes, MaxClients: l.MaxClients, MaxTokens: l.MaxTokens, MaxAdminKeys: l.MaxAdminKeys}}
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
		ExpiresAt: k.ExpiresAt,
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

		AllowCatchAll: t.AllowCatchAll,
		TokenLimits: apitype.TokenLimits{MaxRPS: t.Limits.MaxRPS, DailyMaxBytes: t.Limits.DailyMaxBytes,
			MaxConnections: t.Limits.MaxConnections, Paths: nonNil(t.Limits.Paths), ClientAllowedIPs: nonNil(t.Limits.ClientAllowedIPs),
			AllowTCPPorts: nonNil(t.Limits.AllowTCPPorts)},
		PreviousExpiresAt: t.PrevExpiresAt,
	}
}

func webhookOf(w store.Webhook) Webhook {
	return Webhook{
		ID:            w.ID,
		OrgID:         w.OrgID,
		URL:           w.URL,
		Events:        nonNil(w.Events),
		Authenticated: w.Secret != "",
		Format:        cmp.Or(w.Format, apitype.WebhookFormatGeneric),
		CreatedAt:     w.CreatedAt,
	}
}

func deliveryOf(d store.WebhookDelivery) WebhookDelivery {
	return WebhookDelivery{
		ID: d.ID, WebhookID: d.WebhookID, OrgID: d.OrgID, Event: d.Event, Status: d.Status,
		Attempts: d.Attempts, LastError: d.LastError, LastStatusCode: d.LastStatusCode,
		ResponseTimeMS: d.ResponseTime.Milliseconds(), Redeliverable: len(d.Body) > 0,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
}

func maintenanceOf(m store.Maintenance) Maintenance {
	return Maintenance{Hostname: m.Hostname, OrgID: m.OrgID, By: m.By, Since: m.Since, Reason: m.Reason, ExpiresAt: m.ExpiresAt}
}

func auditOf(e store.AuditEntry) AuditEntry {
	return AuditEntry{
		ID:       e.ID,
		At:       e.At,
		OrgID:    e.OrgID,
		Event:    e.Event,
		Actor:    e.Actor.String(),
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
