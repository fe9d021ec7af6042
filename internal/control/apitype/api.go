package apitype

import "time"

// Prefix is the path under which the server serves the admin API, relative
// to its base URL.
const Prefix = "/aperio/api"

// CSRFHeader carries a login session's CSRF token (WhoAmI.CSRF) on every
// state-changing request of that session: the admin API refuses one
// without it.
const CSRFHeader = "X-Aperio-CSRF"

// The roles of admin keys, as the API and the store spell them. Each role
// may do what the roles before it may.
const (
	// RoleViewer reads every listing of its organization.
	RoleViewer = "viewer"
	// RoleOperator also turns maintenance on and off and disarms scaling
	// records.
	RoleOperator = "operator"
	// RoleAdmin also mints and revokes tokens, creates and deletes
	// admin keys and webhooks, and creates scaling records (outbound URLs
	// with secrets).
	RoleAdmin = "admin"
)

// Master names the master token wherever the server shows who acted: the
// actor of audit entries and of CreatedBy fields, the armer in a scaling
// record's ArmedBy, and the name of a tunnel that authenticated with it.
// Admin keys and client tokens are named by their IDs instead.
const Master = "master"

// Roles returns the roles of admin keys, least privileged first.
func Roles() []string { return []string{RoleViewer, RoleOperator, RoleAdmin} }

// The events a webhook subscription may name, which are also the audit
// log's names for them. Every one is emitted through package events (one
// function appends the audit entry and hands the event to webhook
// delivery); a test in package events keeps this list and the emitters
// in step.
const (
	// EventClientConnected is a client's tunnel session attached.
	EventClientConnected = "client_connected"
	// EventClientDisconnected is a client's tunnel session detached.
	EventClientDisconnected = "client_disconnected"
	// EventClientRefused is a client refused at its handshake (a bad,
	// revoked or expired token, a limit reached).
	EventClientRefused = "client_refused"
	// EventInstanceRetired is a client that retired of its own accord
	// (idle_timeout): its drain announced it; a provider removes the
	// process (idle_action wait) or it exits.
	EventInstanceRetired = "instance_retired"
	// EventTokenCreated is a client token minted through the API. Audit
	// entries written before the rename read "token_minted"; an audit
	// query for token_created matches them too.
	EventTokenCreated = "token_created"
	// EventTokenRevoked is a client token revoked through the API.
	EventTokenRevoked = "token_revoked"
	// EventTokenRotated is a client token's secret replaced through the
	// API.
	EventTokenRotated = "token_rotated"
	// EventTokenExpiring is a token's expiry drawing near (7 days, then 1
	// day before), sent once across servers.
	EventTokenExpiring = "token_expiring"
	// EventQuotaExceeded is a token or organization refused for having
	// used up a byte quota.
	EventQuotaExceeded = "quota_exceeded"
	// EventMaintenanceOn is maintenance turned on (or set again) for a
	// hostname through the API.
	EventMaintenanceOn = "maintenance_on"
	// EventMaintenanceOff is maintenance turned off through the API.
	EventMaintenanceOff = "maintenance_off"
	// EventScalingRequested is a scaling call the provider accepted (2xx).
	EventScalingRequested = "scaling_requested"
	// EventScalingFailed is a scaling call that failed: a non-2xx answer, a
	// timeout, a fence refusal or a transport error.
	EventScalingFailed = "scaling_failed"
	// EventScalingDisarmed is the breaker tripping after repeated failed
	// calls.
	EventScalingDisarmed = "scaling_disarmed"
	// EventAuthDenied is a visitor refused by a service's access control;
	// sampled, at most one per organization and hostname in each
	// interval, the rest counted in the next one.
	EventAuthDenied = "auth_denied"
	// EventConfigReloaded is the server's configuration reloaded.
	EventConfigReloaded = "config_reloaded"
)

// WebhookEvents returns the events a webhook subscription may name, in the
// server's fixed order.
func WebhookEvents() []string {
	return []string{
		EventClientConnected, EventClientDisconnected, EventClientRefused, EventInstanceRetired,
		EventTokenCreated, EventTokenRevoked, EventTokenRotated, EventTokenExpiring,
		EventQuotaExceeded, EventMaintenanceOn, EventMaintenanceOff,
		EventScalingRequested, EventScalingFailed, EventScalingDisarmed,
		EventAuthDenied, EventConfigReloaded,
	}
}

// The formats a webhook subscription's bodies may take.
const (
	// WebhookFormatGeneric is the JSON envelope (event, at, org_id,
	// hostname, path, detail): the default.
	WebhookFormatGeneric = "generic"
	// WebhookFormatSlack is a Slack incoming webhook's {"text": …} with a
	// one-line summary.
	WebhookFormatSlack = "slack"
	// WebhookFormatDiscord is a Discord webhook's {"content": …} with the
	// same summary, mentions disabled.
	WebhookFormatDiscord = "discord"
)

// WebhookFormats returns the formats a webhook subscription may take,
// the default first.
func WebhookFormats() []string {
	return []string{WebhookFormatGeneric, WebhookFormatSlack, WebhookFormatDiscord}
}

// EventPing is the event of a test delivery (POST /webhooks/{id}/test):
// sent to one subscription whatever events it lists, never emitted
// otherwise.
const EventPing = "ping"

// Org is an organization as the API shows it.
type Org struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	OrgLimits
}

// OrgLimits are an organization's caps; 0 in any field means no limit.
type OrgLimits struct {
	// MonthlyMaxBytes is the visitor bytes per UTC month through the
	// organization's clients (enforced by usage accounting).
	MonthlyMaxBytes int64 `json:"monthly_max_bytes"`
	// MaxClients is the tunnel sessions of the organization's tokens at
	// once, per server; the next handshake is refused.
	MaxClients int `json:"max_clients"`
	// MaxTokens is the live tokens the organization may have; minting
	// one more answers 409.
	MaxTokens int `json:"max_tokens"`
	// MaxAdminKeys is the unexpired admin keys the organization may
	// have; creating one more answers 409.
	MaxAdminKeys int `json:"max_admin_keys"`
}

// UpdateOrgRequest is the body of PATCH /orgs/{id} (master token only):
// each field present replaces the organization's; absent ones stay.
type UpdateOrgRequest struct {
	MonthlyMaxBytes *int64 `json:"monthly_max_bytes,omitempty"`
	MaxClients      *int   `json:"max_clients,omitempty"`
	MaxTokens       *int   `json:"max_tokens,omitempty"`
	MaxAdminKeys    *int   `json:"max_admin_keys,omitempty"`
}

// CreateOrgRequest is the body of POST /orgs.
type CreateOrgRequest struct {
	// Name must be unique across the server.
	Name string `json:"name"`
}

// OrgHostnames is the set of hostname patterns an organization owns:
// the answer to GET and PUT /orgs/{id}/hostnames.
type OrgHostnames struct {
	OrgID string `json:"org_id"`
	// Patterns are exact names ("a.example") and wildcards
	// ("*.a.example"), lowercase, sorted; empty when it owns none.
	Patterns []string `json:"patterns"`
}

// SetOrgHostnamesRequest is the body of PUT /orgs/{id}/hostnames.
type SetOrgHostnamesRequest struct {
	// Patterns replace the organization's set: exact names and "*."
	// wildcards, none overlapping another organization's; empty (or
	// absent) means it owns none.
	Patterns []string `json:"patterns"`
}

// OrgPorts is the set of public port ranges an organization owns: the
// answer to GET and PUT /orgs/{id}/ports.
type OrgPorts struct {
	OrgID string `json:"org_id"`
	// Ports are "N" or "N-M", sorted, overlapping and adjacent ranges
	// merged; empty when it owns none.
	Ports []string `json:"ports"`
}

// SetOrgPortsRequest is the body of PUT /orgs/{id}/ports.
type SetOrgPortsRequest struct {
	// Ports replace the organization's set: "N" or "N-M" (at most 64),
	// none overlapping another organization's; empty (or absent) means
	// it owns none.
	Ports []string `json:"ports"`
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
	// ExpiresAt is when the key stops working; absent: never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
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
	// set it; empty means the caller's organization, or the organization
	// named "default" for the master token.
	OrgID string `json:"org_id,omitempty"`
	// ExpiresIn is how long the key works, a duration ("90d", "12h");
	// ExpiresAt is when it stops. At most one; neither means never.
	ExpiresIn string     `json:"expires_in,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
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
	// AllowCatchAll is set when the token's clients may serve catch-all
	// services (no hostname), on servers with require_hostname_bind off.
	AllowCatchAll bool `json:"allow_catch_all"`
	TokenLimits
	// PreviousExpiresAt is when the secret before the last rotation
	// stops working; absent when the token was never rotated.
	PreviousExpiresAt *time.Time `json:"previous_expires_at,omitempty"`
}

// TokenLimits are what a token's clients may use; 0 (or empty) in any
// field means no limit. Master-token traffic is never limited.
type TokenLimits struct {
	// MaxRPS is the visitor requests per second the token's clients
	// serve together (429 token-rate beyond).
	MaxRPS float64 `json:"max_rps"`
	// DailyMaxBytes is the visitor bytes per UTC day through the token's
	// clients (429 token-quota beyond; enforced by usage accounting).
	DailyMaxBytes int64 `json:"daily_max_bytes"`
	// MaxConnections is the token's tunnel sessions at once, per server;
	// the next handshake is refused.
	MaxConnections int `json:"max_connections"`
	// Paths are the path prefixes the token may bind ("/api" allows
	// "/api" and "/api/v1"); empty means any.
	Paths []string `json:"paths"`
	// ClientAllowedIPs are the CIDRs the token's tunnels may connect
	// from; empty means anywhere. (AllowedIPs is the visitor fence.)
	ClientAllowedIPs []string `json:"client_allowed_ips"`
	// AllowTCPPorts are the public ports ("N" or "N-M") the token's
	// clients may expose over TCP and UDP, within the server's
	// tcp_port_range; empty means none.
	AllowTCPPorts []string `json:"allow_tcp_ports"`
}

// UpdateTokenRequest is the body of PATCH /tokens/{id}: each field
// present replaces the token's; absent ones stay. ExpiresAt "" clears the
// expiry. Changes reach connected clients within a heartbeat.
type UpdateTokenRequest struct {
	Name             *string   `json:"name,omitempty"`
	Hostnames        *[]string `json:"hostnames,omitempty"`
	AllowedIPs       *[]string `json:"allowed_ips,omitempty"`
	ExpiresAt        *string   `json:"expires_at,omitempty"`
	AllowCatchAll    *bool     `json:"allow_catch_all,omitempty"`
	MaxRPS           *float64  `json:"max_rps,omitempty"`
	DailyMaxBytes    *int64    `json:"daily_max_bytes,omitempty"`
	MaxConnections   *int      `json:"max_connections,omitempty"`
	Paths            *[]string `json:"paths,omitempty"`
	ClientAllowedIPs *[]string `json:"client_allowed_ips,omitempty"`
	AllowTCPPorts    *[]string `json:"allow_tcp_ports,omitempty"`
}

// RotateTokenRequest is the body of POST /tokens/{id}/rotate; the answer
// is a MintedToken with the new secret.
type RotateTokenRequest struct {
	// Grace is how long the current secret keeps working, a duration
	// ("1h", "2d"); "" or "0" ends it at once. At most 30 days. Clients
	// connected with it are told, and closed when it ends.
	Grace string `json:"grace,omitempty"`
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
	// wildcards. At least one, unless AllowCatchAll.
	Hostnames []string `json:"hostnames"`
	// AllowCatchAll lets the token's clients announce services with no
	// hostname, which serve the hostnames nobody else binds (on servers
	// with require_hostname_bind off). Default false.
	AllowCatchAll bool `json:"allow_catch_all,omitempty"`
	// AllowedIPs are the CIDRs (or bare addresses) of the visitors allowed
	// on the routes the token publishes. Empty means any visitor.
	AllowedIPs []string `json:"allowed_ips,omitempty"`
	// ExpiresAt is when the token stops working; nil means never. It must
	// be in the future.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
	// The limits, as in TokenLimits; zero values limit nothing.
	MaxRPS           float64  `json:"max_rps,omitempty"`
	DailyMaxBytes    int64    `json:"daily_max_bytes,omitempty"`
	MaxConnections   int      `json:"max_connections,omitempty"`
	Paths            []string `json:"paths,omitempty"`
	ClientAllowedIPs []string `json:"client_allowed_ips,omitempty"`
	AllowTCPPorts    []string `json:"allow_tcp_ports,omitempty"`
}

// Maintenance is a hostname in maintenance mode.
type Maintenance struct {
	Hostname string `json:"hostname"`
	OrgID    string `json:"org_id"`
	// By is the actor that turned maintenance on.
	By    string    `json:"by"`
	Since time.Time `json:"since"`
	// Reason is what visitors are told; "" for none.
	Reason string `json:"reason,omitempty"`
	// ExpiresAt is when maintenance ends by itself; absent: when it is
	// turned off.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CreateShareRequest is the body of POST /share.
type CreateShareRequest struct {
	// Hostname is the exact hostname the link opens; the caller's
	// organization must own it.
	Hostname string `json:"hostname"`
	// Path is the path prefix the link opens (whole segments); "" is "/".
	Path string `json:"path,omitempty"`
	// TTL is how long the link works, a Go duration ("1h", "90m"), above
	// 0 and at most 720h.
	TTL string `json:"ttl"`
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
}

// ShareLink is the answer to POST /share: the URL to hand out. Its token
// is not stored anywhere: it cannot be listed or shown again.
type ShareLink struct {
	URL       string    `json:"url"`
	Hostname  string    `json:"hostname"`
	Path      string    `json:"path"`
	ExpiresAt time.Time `json:"expires_at"`
}

// RotateShareKeyRequest is the body of POST /share/keys/rotate.
type RotateShareKeyRequest struct {
	// RevokePrevious refuses, from the next request on and on every
	// server, every link (and cookie) signed by the key being replaced.
	// False keeps them valid until the next rotation.
	RevokePrevious bool `json:"revoke_previous"`
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
}

// ShareKey is the answer to POST /share/keys/rotate: the organization's
// new current share key. Its secret is never shown.
type ShareKey struct {
	// ID is the key's id, which the links it signs carry.
	ID    string `json:"id"`
	OrgID string `json:"org_id"`
	// Generation numbers the organization's keys from 1.
	Generation int64 `json:"generation"`
	// RevokedPrevious says whether the key it replaced was revoked.
	RevokedPrevious bool      `json:"revoked_previous"`
	CreatedAt       time.Time `json:"created_at"`
}

// RevokeOIDCSessionsRequest is the body of POST /oidc/sessions/revoke:
// which sessions of the services' OpenID Connect login on one hostname
// end now. Exactly one of Email, Subject and All.
type RevokeOIDCSessionsRequest struct {
	// Hostname is the exact hostname the sessions were issued on.
	Hostname string `json:"hostname"`
	// Email ends every session of the user with this email (compared
	// lowercased).
	Email string `json:"email,omitempty"`
	// Subject ends every session of the user with this provider subject.
	Subject string `json:"subject,omitempty"`
	// All ends every session of the hostname.
	All bool `json:"all,omitempty"`
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
}

// OIDCSessionsRevoked is the answer to POST /oidc/sessions/revoke: the
// sessions issued at or before RevokedAt on Hostname (of the user, or
// all) are refused from now on, on every server.
type OIDCSessionsRevoked struct {
	Hostname  string    `json:"hostname"`
	Email     string    `json:"email,omitempty"`
	Subject   string    `json:"subject,omitempty"`
	All       bool      `json:"all"`
	RevokedAt time.Time `json:"revoked_at"`
}

// MaintenanceRequest is the optional body of PUT /maintenance/{hostname}.
type MaintenanceRequest struct {
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
	// Reason is what visitors are told: at most 500 bytes of printable
	// text; "" for none.
	Reason string `json:"reason,omitempty"`
	// TTLSeconds ends maintenance by itself after this many seconds, at
	// most 30 days (2592000); 0 means when it is turned off.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// ScalingRecord is a scaling record as GET /scaling shows it: one bind's
// scaling declaration, its live pool on the server that answered, its
// breaker and its last hook call. The server encodes its records
// (autoscale.View) as a ScalingRecord, so that decoding and encoding one
// again gives the server's bytes. It never holds the hook's secret, only
// whether one is set.
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
	// Min and Max bound the instances the server asks for, in every call;
	// a block declared without max has Max = Min, at least 1.
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
	// LastError says why the last call failed (a refusal by the outbound
	// policy, a timeout, a transport error, the status the provider
	// answered); "" after a success or before any call. It is kept in the
	// store, so it survives a restart and every server shows it.
	LastError string `json:"last_error"`
	// NextCallAt is when the record may be called again, by any server:
	// the cooldown after the last call, or the backoff after a failed
	// one; nil when it may be called now.
	NextCallAt *time.Time `json:"next_call_at"`
	// Refused says why the answering server refused the latest
	// declaration a connected client sent for the bind (an invalid block,
	// a hook URL the outbound policy refuses); "" when it did not. The
	// record keeps its older block; a bind that has no record is listed
	// with an empty ID, disarmed.
	Refused string `json:"refused,omitempty"`
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
	Authenticated bool `json:"authenticated"`
	// Format is how the bodies are written: one of WebhookFormats.
	Format    string    `json:"format"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateScalingRequest is the body of POST /scaling: a scaling block
// declared by an operator for a bind no client may have announced yet, so
// that its first visitor cold starts it. The fields are the client's
// scaling block (docs/autoscaling.md), with the same defaults: an omitted
// (or zero) field takes the default a client's declaration gets.
type CreateScalingRequest struct {
	// Hostname is the bind's hostname (or "*." pattern): one the caller's
	// organization may bind.
	Hostname string `json:"hostname"`
	// Path is the bind's path prefix; "" means the whole hostname.
	Path string `json:"path,omitempty"`
	// URL is the provider's hook, permitted by the outbound policy.
	URL string `json:"url"`
	// Secret is sent as "Authorization: Bearer"; "" sends none. It is
	// never shown again.
	Secret string `json:"secret,omitempty"`
	// Min and Max bound the capacity asked for; Max 0 means
	// max(1, Min).
	Min int `json:"min,omitempty"`
	Max int `json:"max,omitempty"`
	// ColdStart, Window and Cooldown are Go durations ("45s", "1m30s");
	// "" means the default.
	ColdStart string `json:"cold_start,omitempty"`
	// TargetUtilization is in (0,1]; 0 means the default.
	TargetUtilization float64 `json:"target_utilization,omitempty"`
	Window            string  `json:"window,omitempty"`
	Cooldown          string  `json:"cooldown,omitempty"`
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
}

// CreateWebhookRequest is the body of POST /webhooks.
type CreateWebhookRequest struct {
	// URL receives the deliveries: absolute, https unless the server
	// allows http, and permitted by the server's outbound policy.
	URL string `json:"url"`
	// Events are the event names to deliver; at least one, each one of
	// WebhookEvents.
	Events []string `json:"events"`
	// Secret keys the X-Aperio-Signature of each delivery; empty sends
	// deliveries unsigned. It is never shown again.
	Secret string `json:"secret,omitempty"`
	// OrgID is as in CreateKeyRequest.
	OrgID string `json:"org_id,omitempty"`
	// Format is how the bodies are written, one of WebhookFormats;
	// empty means WebhookFormatGeneric. Every format is signed alike.
	Format string `json:"format,omitempty"`
}

// WebhookDelivery is one delivery of an event to a webhook subscription,
// from its delivery log (GET /webhooks/{id}/deliveries) or as POST
// /webhooks/{id}/test and …/redeliver answer it. The body sent is not
// shown.
type WebhookDelivery struct {
	// ID is the delivery's webhook-id: the same for every attempt and
	// for a redelivery, so that receivers can drop repeats.
	ID        string `json:"id"`
	WebhookID string `json:"webhook_id"`
	OrgID     string `json:"org_id"`
	// Event is the event type, EventPing for a test delivery.
	Event string `json:"event"`
	// Status is pending (still being retried), delivered (a 2xx),
	// failed (given up) or dropped (the outbound policy refused it).
	Status string `json:"status"`
	// Attempts counts the attempts, redeliveries included.
	Attempts int `json:"attempts"`
	// LastError is the last attempt's error, at most 500 bytes; empty
	// after a success.
	LastError string `json:"last_error,omitempty"`
	// LastStatusCode is the last attempt's HTTP status; 0 without an
	// answer.
	LastStatusCode int `json:"last_status_code"`
	// ResponseTimeMS is how long the last attempt took, in milliseconds.
	ResponseTimeMS int64 `json:"response_time_ms"`
	// Redeliverable says the log kept the body, so that it can be sent
	// again (bodies over 64 KiB are not kept).
	Redeliverable bool      `json:"redeliverable"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// OrgID is the organization concerned; "" for events outside any (a
	// failed login), which only the master token sees.
	OrgID string `json:"org_id"`
	// Event is one of the Event constants of package admin.
	Event string `json:"event"`
	// Actor is "master", "key:<id>", "oidc:<email>" (a login session),
	// "anonymous" for a failed login, "token:<id>" (a tunnel client),
	// "server", "visitor" or "autoscale"; store.Actor spells them.
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

// UsageRow is one row of GET /usage: the visitor bytes (in and out
// together) and requests of one token, organization and bind hostname on
// one UTC day, summed over every server sharing the store.
type UsageRow struct {
	// Day is the UTC date, YYYY-MM-DD.
	Day string `json:"day"`
	// TokenID is the token whose clients served; "" for the master
	// token's.
	TokenID string `json:"token_id"`
	OrgID   string `json:"org_id"`
	// Hostname is the bind's hostname pattern (a wildcard bind's, not
	// each name a visitor asked for).
	Hostname string `json:"hostname"`
	Requests int64  `json:"requests"`
	// Bytes is the visitor bytes both ways: request bodies and what an
	// upgraded stream carried in, response bodies and what it carried
	// out. It is what daily_max_bytes and monthly_max_bytes count.
	Bytes int64 `json:"bytes"`
}

// MaxUsageDays bounds the days one GET /usage spans (from..to).
const MaxUsageDays = 366

// PortInfo is one public TCP or UDP port as GET /ports shows it.
type PortInfo struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	// OrgID is the organization whose clients hold the port.
	OrgID string `json:"org_id"`
	// OwnerOrgID is the organization that owns the port's number (PUT
	// /orgs/{id}/ports); "" while none does (the default organization's
	// clients then hold it first come).
	OwnerOrgID string `json:"owner_org_id"`
	// Names are the expose entries serving it, one per client session;
	// Sessions the IDs of those sessions (the clients' IDs).
	Names    []string `json:"names"`
	Sessions []string `json:"sessions"`
	// Open counts the visitor connections (tcp) or flows (udp) open now.
	Open int64 `json:"open"`
	// BytesIn and BytesOut are the visitors' bytes since the port opened.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Refused counts visitor connections or flows refused (limits,
	// allowed_ips), Dropped the datagrams dropped.
	Refused int64 `json:"refused"`
	Dropped int64 `json:"dropped"`
}

// PortExplanation is GET /ports/explain's answer: what the server would
// do now with a visitor's connection to a public port.
type PortExplanation struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	// IP is the visitor asked about; "" when none was given.
	IP string `json:"ip"`
	// Open is whether a client of the caller's organization (any, for
	// the master token) holds the port.
	Open bool `json:"open"`
	// Names are the entries serving it; Admitting those whose
	// allowed_ips (and their tokens') admit IP, all of them without IP.
	Names     []string `json:"names"`
	Admitting []string `json:"admitting"`
	// Verdict says what would happen, in a few words.
	Verdict string `json:"verdict"`
}

// ClientInfo is one connected client as GET /clients shows it: one entry per
// client connection and service.
type ClientInfo struct {
	// ID identifies the connection.
	ID string `json:"id"`
	// Name is the client's name setting.
	Name string `json:"name"`
	// Service is the service's handle (the client's services[].name), ""
	// when it has none.
	Service string `json:"service"`
	// Version is the release the client announced (its `version`), ""
	// for a client that predates the field.
	Version string `json:"version"`
	// OrgID is the organization of the token the client connected with.
	// Keys see only the clients of their own organization; the master
	// token sees all. Clients with no organization are visible to the
	// master token only.
	OrgID string `json:"org_id"`
	// Hostnames are the hostnames the service is bound to.
	Hostnames []string `json:"hostnames"`
	// Path is the prefix bind, "" for none.
	Path string `json:"path"`
	// Access names the parts of the visitor access control the service
	// announced (Access* words, in that order); empty when it announced
	// none and the server's default_access decides.
	Access []string `json:"access"`
	// Priority is the tier: 0 primary, above 0 standby.
	Priority int `json:"priority"`
	// MaxConcurrent is the effective concurrency limit; 0 means none.
	MaxConcurrent int `json:"max_concurrent"`
	// Concurrency is the client's limiter of the service as it last
	// announced it; nil when it announces no limit or predates limiters.
	Concurrency *Concurrency `json:"concurrency"`
	// Inflight counts the requests being served now.
	Inflight int `json:"inflight"`
	// Healthy reports the last health state the client announced.
	Healthy bool `json:"healthy"`
	// Draining is set once the client stopped taking new requests.
	Draining bool `json:"draining"`
	// Disabled is set while an operator disabled the client (POST
	// /clients/{id}/disable): it takes no new requests, its tunnel stays
	// up.
	Disabled bool `json:"disabled"`
	// RefusedBinds lists the binds of the client's announcement the
	// server refused (hostname and path, or "(catch-all)"), which the
	// rest of its binds serve without; empty when none.
	RefusedBinds []string `json:"refused_binds"`
	// ConnectedAt is when the connection was established.
	ConnectedAt time.Time `json:"connected_at"`
	// RemoteAddr is the client's address as the server sees it.
	RemoteAddr string `json:"remote_addr"`
	// Weight is the service's weight under weighted round-robin (1..1000).
	Weight int `json:"weight"`
	// EjectedUntil is when the service's outlier ejection ends; nil while
	// it is in rotation.
	EjectedUntil *time.Time `json:"ejected_until"`
}

// The words of ClientInfo.Access, one per part of a service's announced
// access control, in this order.
const (
	// AccessPublic: open even under default_access deny.
	AccessPublic = "public"
	// AccessAllowedIPs and AccessDeniedIPs: visitor address lists.
	AccessAllowedIPs = "allowed_ips"
	AccessDeniedIPs  = "denied_ips"
	// The login methods.
	AccessBasic   = "basic"
	AccessBearer  = "bearer"
	AccessJWT     = "jwt"
	AccessForward = "forward"
	AccessOIDC    = "oidc"
)

// AccessWords returns every word of ClientInfo.Access, in order.
func AccessWords() []string {
	return []string{AccessPublic, AccessAllowedIPs, AccessDeniedIPs, AccessBasic, AccessBearer, AccessJWT, AccessForward, AccessOIDC}
}

// Concurrency is a service's concurrency limiter in GET /clients: its mode
// (fixed, aimd or load-signal), the current limit and its bounds.
type Concurrency struct {
	Mode    string `json:"mode"`
	Desired int    `json:"desired"`
	Min     int    `json:"min"`
	Max     int    `json:"max"`
	Fixed   bool   `json:"fixed"`
}

// WhoAmI is the answer to GET /whoami: who the API takes the caller for.
type WhoAmI struct {
	// Actor is how audit entries name the caller: "master", "key:<id>" or
	// "oidc:<email>".
	Actor string `json:"actor"`
	// OrgID is the organization the caller acts in: the default
	// organization's for the master token ("" while it does not exist).
	OrgID string `json:"org_id"`
	// Role is "master", "viewer", "operator" or "admin".
	Role string `json:"role"`
	// CSRF is the token every state-changing request of a login session
	// must send in the X-Aperio-CSRF header; "" for a bearer credential,
	// which needs none.
	CSRF string `json:"csrf"`
}
