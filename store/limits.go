package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/internal/portspec"
	"math"
	"slices"
	"time"
)

// Bounds of the limits the store accepts, so that an absurd value is
// refused rather than stored. The admin API checks the same bounds first
// and names the field.
const (
	// MaxTokenRPS is the highest max_rps a token may have.
	MaxTokenRPS = 1_000_000
	// MaxLimitBytes is the highest byte quota (daily or monthly): 1 PiB.
	MaxLimitBytes int64 = 1 << 50
	// MaxLimitCount is the highest count limit (connections, clients,
	// tokens, admin keys).
	MaxLimitCount = 1_000_000
	// MaxTokenPaths bounds the path prefixes of one token.
	MaxTokenPaths = 64
	// MaxTokenClientIPs bounds the CIDRs of one token's client_allowed_ips.
	MaxTokenClientIPs = 256
)

// Expiry warning bits of Token.ExpiryWarned.
const (
	// ExpiryWarn7d is set once the 7-day warning was sent.
	ExpiryWarn7d = 1
	// ExpiryWarn1d is set once the 1-day warning was sent.
	ExpiryWarn1d = 2
)

// TokenLimits are what a token's clients may use. The zero value limits
// nothing; every zero field is "no limit" (or "any").
type TokenLimits struct {
	// MaxRPS is the visitor requests per second the token's clients serve
	// together; 0 means no limit.
	MaxRPS float64
	// DailyMaxBytes is the visitor bytes (in and out) per UTC day through
	// the token's clients; 0 means no limit. The store keeps it; usage
	// accounting enforces it.
	DailyMaxBytes int64
	// MaxConnections is the tunnel sessions of the token at once; 0 means
	// no limit.
	MaxConnections int
	// Paths are the path prefixes the token may bind ("/api" allows
	// "/api" and "/api/v1", not "/apix"); empty means any path. Never nil
	// once stored.
	Paths []string
	// ClientAllowedIPs are the CIDRs the token's tunnels may connect
	// from; empty means anywhere. Never nil once stored. (AllowedIPs on
	// Token is the visitor fence.)
	ClientAllowedIPs []string
	// AllowTCPPorts are the public ports ("N" or "N-M") the token's
	// clients may expose (TCP and UDP), within the server's
	// tcp_port_range; empty means none. Never nil once stored.
	AllowTCPPorts []string
}

// clean returns l with its lists copied and never nil.
func (l TokenLimits) clean() TokenLimits {
	l.Paths = list(l.Paths)
	l.ClientAllowedIPs = list(l.ClientAllowedIPs)
	l.AllowTCPPorts = list(l.AllowTCPPorts)
	return l
}

// Validate reports every value out of bounds, naming its field.
func (l TokenLimits) Validate() error {
	var errs []error
	if math.IsNaN(l.MaxRPS) || l.MaxRPS < 0 || l.MaxRPS > MaxTokenRPS {
		errs = append(errs, fmt.Errorf("max_rps %v: want 0 (no limit) to %d", l.MaxRPS, MaxTokenRPS))
	}
	if l.DailyMaxBytes < 0 || l.DailyMaxBytes > MaxLimitBytes {
		errs = append(errs, fmt.Errorf("daily_max_bytes %d: want 0 (no limit) to %d", l.DailyMaxBytes, MaxLimitBytes))
	}
	if l.MaxConnections < 0 || l.MaxConnections > MaxLimitCount {
		errs = append(errs, fmt.Errorf("max_connections %d: want 0 (no limit) to %d", l.MaxConnections, MaxLimitCount))
	}
	if len(l.Paths) > MaxTokenPaths {
		errs = append(errs, fmt.Errorf("paths: %d entries, at most %d", len(l.Paths), MaxTokenPaths))
	}
	if len(l.ClientAllowedIPs) > MaxTokenClientIPs {
		errs = append(errs, fmt.Errorf("client_allowed_ips: %d entries, at most %d", len(l.ClientAllowedIPs), MaxTokenClientIPs))
	}
	if _, err := portspec.ParseList(l.AllowTCPPorts); err != nil {
		errs = append(errs, fmt.Errorf("allow_tcp_ports: %w", err))
	}
	return errors.Join(errs...)
}

// OrgLimits are an organization's caps. The zero value limits nothing;
// every zero field is "no limit".
type OrgLimits struct {
	// MonthlyMaxBytes is the visitor bytes per UTC month through the
	// organization's clients; 0 means no limit. The store keeps it; usage
	// accounting enforces it.
	MonthlyMaxBytes int64
	// MaxClients is the tunnel sessions of the organization's tokens at
	// once; 0 means no limit.
	MaxClients int
	// MaxTokens is the live tokens (neither revoked nor expired) the
	// organization may have; 0 means no limit. CreateToken enforces it.
	MaxTokens int
	// MaxAdminKeys is the unexpired admin keys the organization may
	// have; 0 means no limit. CreateAdminKey enforces it.
	MaxAdminKeys int
}

// Validate reports every value out of bounds, naming its field.
func (l OrgLimits) Validate() error {
	var errs []error
	if l.MonthlyMaxBytes < 0 || l.MonthlyMaxBytes > MaxLimitBytes {
		errs = append(errs, fmt.Errorf("monthly_max_bytes %d: want 0 (no limit) to %d", l.MonthlyMaxBytes, MaxLimitBytes))
	}
	for _, f := range [...]struct {
		name string
		v    int
	}{{"max_clients", l.MaxClients}, {"max_tokens", l.MaxTokens}, {"max_admin_keys", l.MaxAdminKeys}} {
		if f.v < 0 || f.v > MaxLimitCount {
			errs = append(errs, fmt.Errorf("%s %d: want 0 (no limit) to %d", f.name, f.v, MaxLimitCount))
		}
	}
	return errors.Join(errs...)
}

// SetOrgLimits replaces the limits of organization id and returns it,
// publishing ChangeOrgLimits. The error wraps ErrNotFound when there is no
// such organization; limits that fail Validate are an error.
func (db *DB) SetOrgLimits(ctx context.Context, id string, l OrgLimits) (Org, error) {
	if db.closed.Load() {
		return Org{}, errClosed
	}
	if err := l.Validate(); err != nil {
		return Org{}, fmt.Errorf("store: set org limits: %w", err)
	}
	o, err := db.b.setOrgLimits(ctx, id, l)
	if err != nil {
		return Org{}, db.fail("set limits of org "+id, err)
	}
	return o, nil
}

// TokenEdit is what UpdateToken changes: every field of a token that may
// be edited in place. The caller reads the token, changes what it wants
// and passes every field.
type TokenEdit struct {
	Name          string
	Hostnames     []string
	AllowedIPs    []string
	ExpiresAt     *time.Time
	AllowCatchAll bool
	Limits        TokenLimits
}

// EditOf returns t's editable fields, for UpdateToken.
func EditOf(t Token) TokenEdit {
	return TokenEdit{Name: t.Name, Hostnames: slices.Clone(t.Hostnames), AllowedIPs: slices.Clone(t.AllowedIPs),
		ExpiresAt: t.ExpiresAt, AllowCatchAll: t.AllowCatchAll, Limits: t.Limits.clean()}
}

// UpdateToken replaces the editable fields of token id in organization
// orgID ("" means any) with e and returns the token as stored, publishing
// ChangeTokenUpdated. A changed expiry clears ExpiryWarned, so that the
// new one is warned about in its turn. The error wraps ErrNotFound when no
// such token is in orgID and ErrConflict when it is revoked; limits that
// fail TokenLimits.Validate are an error.
func (db *DB) UpdateToken(ctx context.Context, orgID, id string, e TokenEdit) (Token, error) {
	if db.closed.Load() {
		return Token{}, errClosed
	}
	e.Hostnames = list(e.Hostnames)
	e.AllowedIPs = list(e.AllowedIPs)
	e.Limits = e.Limits.clean()
	e.ExpiresAt = stampPtr(e.ExpiresAt)
	if err := e.Limits.Validate(); err != nil {
		return Token{}, fmt.Errorf("store: update token %s: %w", id, err)
	}
	t, err := db.b.updateToken(ctx, orgID, id, e)
	if err != nil {
		return Token{}, db.fail("update token "+id, err)
	}
	return t, nil
}

// RotateToken gives token id in organization orgID ("" means any) a new
// secret: hash (its SHA-256) and prefix replace the current ones, which
// become PrevHash, valid until graceEnds (a grace in the past ends it at
// once); Generation goes up by one and ChangeTokenUpdated is published. A
// secret from before the previous one stops working. The error wraps
// ErrNotFound when no such token is in orgID, ErrConflict when it is
// revoked or hash is taken.
func (db *DB) RotateToken(ctx context.Context, orgID, id string, hash []byte, prefix string, graceEnds time.Time) (Token, error) {
	if db.closed.Load() {
		return Token{}, errClosed
	}
	if err := checkOwned("token secret", "-", hash); err != nil {
		return Token{}, err
	}
	t, err := db.b.rotateToken(ctx, orgID, id, slices.Clone(hash), prefix, stamp(graceEnds))
	if err != nil {
		return Token{}, db.fail("rotate token "+id, err)
	}
	return t, nil
}

// TokensExpiringBy returns the tokens, of every organization, that are not
// revoked and expire after now and at or before by, soonest first: those
// an expiry warning may concern.
func (db *DB) TokensExpiringBy(ctx context.Context, now, by time.Time) ([]Token, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	ts, err := db.b.tokensExpiring(ctx, stamp(now), stamp(by))
	if err != nil {
		return nil, db.fail("list expiring tokens", err)
	}
	return ts, nil
}

// ClaimExpiryWarning marks warning bit (ExpiryWarn7d or ExpiryWarn1d) sent
// for token id at its current expiry and reports whether this call set it:
// of every server sharing the database that calls it for one token and
// bit, exactly one gets true, so the warning goes out once.
func (db *DB) ClaimExpiryWarning(ctx context.Context, id string, expiresAt time.Time, bit int) (bool, error) {
	if db.closed.Load() {
		return false, errClosed
	}
	if bit != ExpiryWarn7d && bit != ExpiryWarn1d {
		return false, fmt.Errorf("store: claim expiry warning: bit %d", bit)
	}
	ok, err := db.b.claimExpiryWarning(ctx, id, stamp(expiresAt), bit)
	if err != nil {
		return false, db.fail("claim expiry warning of token "+id, err)
	}
	return ok, nil
}
