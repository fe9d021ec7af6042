// Package store owns Aperio's persistent state: organizations and the
// hostname patterns each owns, client tokens (as hashes), admin keys (as
// hashes), maintenance mode, autoscaling records, webhook subscriptions
// and their bounded delivery log, signing keys (sealed by the caller), the append-only, hash-chained audit
// log, and the change feed that tells every server sharing the database
// when a token is revoked, a key deleted, maintenance toggled, an
// organization's hostnames replaced, a signing key added or a scaling
// record declared, called, disarmed or deleted.
//
// One API, two engines with identical behaviour: SQLite (the default, one
// file in the data directory, owned by one server) and PostgreSQL (shared by
// several servers). Every query is written once, in queries.go, over
// database/sql; what differs between the engines is in one table,
// dialect.go, and opening each is in sqlite.go and postgres.go. The schema
// lives in the migrations package and is applied by Open. A single
// conformance suite, and an equivalence test of the two engines, prove
// they agree.
//
// Every method is safe for concurrent use. Times go in and come out in UTC,
// truncated to the microsecond, on both backends. Errors wrap ErrNotFound,
// ErrConflict or ErrUnavailable where a caller may branch on them.
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// Sentinel errors. Callers test for them with errors.Is; the store wraps
// them with the operation and, where there is one, the driver's error.
var (
	// ErrNotFound means the record does not exist, or exists in another
	// organization than the one the call is scoped to.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict means the write would break a uniqueness rule: an org
	// name or a token or key hash already taken, or a hostname already in
	// maintenance for another organization.
	ErrConflict = errors.New("store: conflict")
	// ErrLimit means the write would take an organization past one of its
	// caps (OrgLimits: MaxTokens, MaxAdminKeys). Callers answer 409.
	ErrLimit = errors.New("store: organization limit reached")
	// ErrUnavailable means the database cannot be reached (refused or lost
	// connection, server shutting down, SQLite file locked or unreadable) or
	// the DB is closed. Callers answer 503. The store recovers on its own
	// when the database comes back; nothing needs reopening.
	ErrUnavailable = errors.New("store: database unavailable")
)

// errClosed is returned by every call made after Close.
var errClosed = fmt.Errorf("%w: closed", ErrUnavailable)

// Backend names, as Backend reports them.
const (
	BackendSQLite   = "sqlite"
	BackendPostgres = "postgres"
)

// DBFile is the name of the SQLite database file inside Config.DataDir.
const DBFile = "aperio.db"

// Config says which database to open. The zero value is invalid: set
// DataDir or DatabaseURL.
type Config struct {
	// DataDir is the directory of the SQLite database (DBFile inside it),
	// created with mode 0700 if missing. Used only when DatabaseURL is
	// empty.
	DataDir string
	// DatabaseURL selects PostgreSQL when set: a pgx connection string
	// ("postgres://user@host:5432/db?sslmode=disable" or key=value form).
	// Empty means SQLite in DataDir. A connect_timeout in it wins over the
	// store's default of 5 s.
	DatabaseURL string
	// Logger receives lifecycle events (opened, migrated, change listener
	// lost and restored, a slow subscriber). Nil discards them.
	Logger *slog.Logger
	// Now is the clock for the times the store assigns (CreatedAt, audit
	// At, maintenance Since, scaling UpdatedAt). Nil means time.Now for
	// those, and the database's own clock (DB.Clock) for the scaling
	// decisions every server shares: leases, a call's time, its cooldown,
	// backoff and penalty, and the calls-per-minute budget. When set, it
	// replaces that clock too (tests move it).
	Now func() time.Time
	// ReadOnly opens an existing store for reading only, as an integrity
	// check must: no migrations, no backfill, no change listener, and
	// every write fails (SQLite opens the file with mode=ro, PostgreSQL
	// sessions default to read-only transactions). A SQLite file that
	// does not exist is an error rather than created. False, the default,
	// opens the store for a server.
	ReadOnly bool

	// dialectForTest, when set, edits the engine's dialect once the store
	// is open (see WithDialectDriftForTest in export_test.go).
	dialectForTest func(*dialect)
}

// Validate reports every problem with cfg without touching the disk or
// the network: neither DataDir nor DatabaseURL set, or a DatabaseURL that
// does not parse. Open calls it.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.DataDir == "" && cfg.DatabaseURL == "" {
		errs = append(errs, errors.New("store: no data dir and no database url: set one"))
	}
	if cfg.DatabaseURL != "" {
		if _, err := parsePostgresURL(cfg.DatabaseURL); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero fields that have a default.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// DB is an open store. It is safe for concurrent use by any number of
// goroutines. Close it when done: Close stops the change listener and every
// subscription and closes the connections.
type DB struct {
	b   *backend
	hub *hub
	log *slog.Logger
	now func() time.Time

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Open opens the store cfg names, applies pending migrations (unless
// cfg.ReadOnly, which does none of what follows) and returns it ready for
// use. For SQLite it creates DataDir if needed. For PostgreSQL it takes an
// advisory lock around the migrations, so servers starting at once against
// one database apply each migration exactly once, and it starts the change
// listener before returning. An unreachable PostgreSQL gives an
// error wrapping ErrUnavailable. Open blocks until done or ctx ends.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	injected := cfg.Now
	cfg = cfg.withDefaults()
	db := &DB{
		hub: newHub(cfg.Logger),
		log: cfg.Logger,
		now: cfg.Now,
	}
	var err error
	if cfg.DatabaseURL == "" {
		db.b, err = openSQLite(ctx, cfg, db.hub)
	} else {
		db.b, err = openPostgres(ctx, cfg, db.hub)
	}
	if err != nil {
		db.hub.close()
		return nil, err
	}
	db.b.now = injected
	if cfg.dialectForTest != nil {
		d := *db.b.d
		cfg.dialectForTest(&d)
		db.b.d = &d
	}
	if cfg.ReadOnly {
		return db, nil
	}
	// Entries from before the audit chain (migration 0004) are chained
	// here, on the first open after migration 0006 recorded them; that
	// open spends the record in the same transaction, so later opens chain
	// nothing, whatever was inserted around the store meanwhile.
	n, err := db.b.backfillAudit(ctx)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("store: chain audit entries: %w", err), db.Close())
	}
	if n > 0 {
		db.log.Info("audit entries chained", logkey.Chained, n)
	}
	return db, nil
}

// Close stops the change listener, closes every subscription channel, waits
// for the store's goroutines to exit and closes the database connections.
// Calls in flight may fail with ErrUnavailable; later calls always do. Close
// is idempotent: later calls return the first call's result.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		db.closed.Store(true)
		db.closeErr = db.b.close() // stops the listener first: nothing publishes after this
		db.hub.close()
	})
	return db.closeErr
}

// Backend reports which backend db uses: BackendSQLite or BackendPostgres.
func (db *DB) Backend() string { return db.b.name() }

// Ping checks that the database answers. The error wraps ErrUnavailable
// when it does not.
func (db *DB) Ping(ctx context.Context) error {
	if db.closed.Load() {
		return errClosed
	}
	if err := db.b.ping(ctx); err != nil {
		return db.fail("ping", err)
	}
	return nil
}

// DroppedChanges counts changes that subscribers were too slow to take,
// since Open. Each overflow is replaced by one ChangeResync; export the
// count as a metric.
func (db *DB) DroppedChanges() uint64 { return db.hub.dropped.Load() }

// fail wraps err with the operation. A failure caused by a concurrent Close
// reads as errClosed rather than as the driver's own "closed" error.
func (db *DB) fail(op string, err error) error {
	if db.closed.Load() && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) {
		err = errClosed
	}
	return opError(op, err)
}

// opError wraps err with the operation op, naming the store once: a
// sentinel's text already does.
func opError(op string, err error) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

// stamp returns t as the store keeps times: UTC, truncated to the
// microsecond (PostgreSQL's precision; SQLite keeps the same digits).
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// stampPtr is stamp for optional times.
func stampPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	s := stamp(*t)
	return &s
}

// newID returns a random identifier with a kind prefix ("tok_…"), 128 bits
// of entropy.
func newID(kind string) string {
	return kind + "_" + strings.ToLower(rand.Text())
}

// list returns a copy of l, never nil, so that JSON renders an empty list
// as [] and callers may not alias the store's copy.
func list(l []string) []string {
	if l == nil {
		return []string{}
	}
	return slices.Clone(l)
}

// Org is an organization: every token, admin key, maintenance record and
// audit entry belongs to one.
type Org struct {
	// ID is assigned by the store ("org_…").
	ID string
	// Name is unique across the store.
	Name string
	// CreatedAt is assigned by the store.
	CreatedAt time.Time
	// Limits are the organization's caps; the zero value limits nothing.
	// Set them with SetOrgLimits.
	Limits OrgLimits
}

// EnsureOrg returns the organization called name, creating it first if
// there is none. It is idempotent and safe against concurrent callers on
// every server sharing the database; the server calls it for "default" at
// startup.
func (db *DB) EnsureOrg(ctx context.Context, name string) (Org, error) {
	if db.closed.Load() {
		return Org{}, errClosed
	}
	if name == "" {
		return Org{}, errors.New("store: ensure org: empty name")
	}
	o, err := db.b.ensureOrg(ctx, Org{ID: newID("org"), Name: name, CreatedAt: stamp(db.now())})
	if err != nil {
		return Org{}, db.fail(fmt.Sprintf("ensure org %q", name), err)
	}
	return o, nil
}

// CreateOrg creates an organization. The error wraps ErrConflict when the
// name is taken.
func (db *DB) CreateOrg(ctx context.Context, name string) (Org, error) {
	if db.closed.Load() {
		return Org{}, errClosed
	}
	if name == "" {
		return Org{}, errors.New("store: create org: empty name")
	}
	o := Org{ID: newID("org"), Name: name, CreatedAt: stamp(db.now())}
	if err := db.b.insertOrg(ctx, o); err != nil {
		return Org{}, db.fail(fmt.Sprintf("create org %q", name), err)
	}
	return o, nil
}

// Org returns the organization with the given ID, or an error wrapping
// ErrNotFound.
func (db *DB) Org(ctx context.Context, id string) (Org, error) {
	if db.closed.Load() {
		return Org{}, errClosed
	}
	o, err := db.b.org(ctx, id)
	if err != nil {
		return Org{}, db.fail("org "+id, err)
	}
	return o, nil
}

// ListOrgs returns every organization, newest first.
func (db *DB) ListOrgs(ctx context.Context) ([]Org, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	orgs, err := db.b.listOrgs(ctx)
	if err != nil {
		return nil, db.fail("list orgs", err)
	}
	return orgs, nil
}

// Token is a client token: what it may publish and whether it still may.
// The secret itself is never stored.
type Token struct {
	// ID is assigned by the store ("tok_…").
	ID string
	// OrgID is the owning organization; it must exist.
	OrgID string
	// Name is free text for people.
	Name string
	// Prefix is the first characters of the secret, for display.
	Prefix string
	// Hash is the SHA-256 of the secret, computed by the caller. Unique.
	Hash []byte
	// Hostnames are the hostnames the token may bind, exact or wildcard,
	// as the caller normalized them. Never nil once stored; empty means
	// none.
	Hostnames []string
	// AllowedIPs are CIDRs of the visitors allowed on routes the token
	// publishes. Never nil once stored; empty means no restriction (the
	// caller decides).
	AllowedIPs []string
	// ExpiresAt is when the token stops working; nil means never. The
	// store records it; the caller enforces it.
	ExpiresAt *time.Time
	// RevokedAt is when the token was revoked; nil means it is not.
	RevokedAt *time.Time
	// CreatedAt is assigned by the store.
	CreatedAt time.Time
	// CreatedBy names the actor that minted the token (free text).
	CreatedBy string
	// AllowCatchAll lets the token's clients announce a service with no
	// hostname, which serves the hostnames nobody else binds (when the
	// server allows catch-alls at all). False, the zero value and the
	// value of every token minted before the field, refuses them.
	AllowCatchAll bool
	// Limits are what the token's clients may use; the zero value limits
	// nothing.
	Limits TokenLimits
	// Generation counts the rotations of the secret: 0 for a token never
	// rotated. Assigned by the store.
	Generation int64
	// PrevHash is the SHA-256 of the secret before the last rotation,
	// valid until PrevExpiresAt (the grace); nil when there is none.
	// Assigned by RotateToken.
	PrevHash []byte
	// PrevExpiresAt is when PrevHash stops working; nil when there is no
	// previous secret.
	PrevExpiresAt *time.Time
	// ExpiryWarned is the set of expiry warnings already sent (bits of
	// ExpiryWarn7d and ExpiryWarn1d); assigned by the store, cleared when
	// the expiry changes.
	ExpiryWarned int
}

// CreateToken stores t with a new ID and CreatedAt and returns it as stored
// (times in UTC to the microsecond, lists copied and never nil). ID,
// CreatedAt, RevokedAt and the rotation fields in t are ignored; limits
// that fail TokenLimits.Validate are an error. The error wraps ErrConflict
// when the hash is taken, ErrNotFound when the organization does not
// exist, and ErrLimit when the organization already has its MaxTokens live
// tokens (neither revoked nor expired): the count and the insert are one
// transaction under a lock on the organization, so servers sharing the
// database never exceed the cap together.
func (db *DB) CreateToken(ctx context.Context, t Token) (Token, error) {
	if db.closed.Load() {
		return Token{}, errClosed
	}
	if err := checkOwned("token", t.OrgID, t.Hash); err != nil {
		return Token{}, err
	}
	t.ID = newID("tok")
	t.Hash = slices.Clone(t.Hash)
	t.Hostnames = list(t.Hostnames)
	t.AllowedIPs = list(t.AllowedIPs)
	t.Limits = t.Limits.clean()
	if err := t.Limits.Validate(); err != nil {
		return Token{}, fmt.Errorf("store: create token: %w", err)
	}
	t.ExpiresAt = stampPtr(t.ExpiresAt)
	t.RevokedAt = nil
	t.Generation, t.PrevHash, t.PrevExpiresAt, t.ExpiryWarned = 0, nil, nil, 0
	t.CreatedAt = stamp(db.now())
	if err := db.b.insertToken(ctx, t, db.now()); err != nil {
		return Token{}, db.fail(fmt.Sprintf("create token in org %s", t.OrgID), err)
	}
	return t, nil
}

// TokenByHash returns the token whose secret hashes to hash, or whose
// previous secret (PrevHash, during a rotation's grace or after it) does,
// revoked and expired ones included (the caller decides what they may do:
// compare hash with PrevHash and PrevExpiresAt), or an error wrapping
// ErrNotFound.
func (db *DB) TokenByHash(ctx context.Context, hash []byte) (Token, error) {
	if db.closed.Load() {
		return Token{}, errClosed
	}
	t, err := db.b.tokenByHash(ctx, hash)
	if err != nil {
		return Token{}, db.fail("token by hash", err)
	}
	return t, nil
}

// Token returns the token with the given ID in organization orgID (""
// means any organization), or an error wrapping ErrNotFound.
func (db *DB) Token(ctx context.Context, orgID, id string) (Token, error) {
	if db.closed.Load() {
		return Token{}, errClosed
	}
	t, err := db.b.token(ctx, orgID, id)
	if err != nil {
		return Token{}, db.fail("token "+id, err)
	}
	return t, nil
}

// ListTokens returns the tokens of organization orgID ("" means all),
// newest first, revoked and expired ones included.
func (db *DB) ListTokens(ctx context.Context, orgID string) ([]Token, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	ts, err := db.b.listTokens(ctx, orgID)
	if err != nil {
		return nil, db.fail("list tokens", err)
	}
	return ts, nil
}

// RevokeToken marks the token revoked at time at and returns it. Revoking
// is done once: revoking a revoked token changes nothing and returns it
// with its first RevokedAt. The first revoke publishes ChangeTokenRevoked.
// The error wraps ErrNotFound when no such token is in orgID ("" means any
// organization).
func (db *DB) RevokeToken(ctx context.Context, orgID, id string, at time.Time) (Token, error) {
	if db.closed.Load() {
		return Token{}, errClosed
	}
	t, err := db.b.revokeToken(ctx, orgID, id, stamp(at))
	if err != nil {
		return Token{}, db.fail("revoke token "+id, err)
	}
	return t, nil
}

// AdminKey is a key for the admin API. The secret itself is never stored.
type AdminKey struct {
	// ID is assigned by the store ("key_…").
	ID string
	// OrgID is the owning organization; it must exist.
	OrgID string
	// Name is free text for people.
	Name string
	// Role is what the key may do ("viewer", "operator", "admin"); the
	// store keeps it as given and the admin API enforces it.
	Role string
	// Prefix is the first characters of the secret, for display.
	Prefix string
	// Hash is the SHA-256 of the secret, computed by the caller. Unique.
	Hash []byte
	// CreatedAt is assigned by the store.
	CreatedAt time.Time
	// CreatedBy names the actor that created the key (free text).
	CreatedBy string
	// ExpiresAt is when the key stops working; nil means never. The
	// store records it; the caller enforces it.
	ExpiresAt *time.Time
}

// CreateAdminKey stores k with a new ID and CreatedAt and returns it as
// stored. The error wraps ErrConflict when the hash is taken, ErrNotFound
// when the organization does not exist, and ErrLimit when the organization
// already has its MaxAdminKeys unexpired keys (counted and inserted in one
// transaction, as CreateToken does).
func (db *DB) CreateAdminKey(ctx context.Context, k AdminKey) (AdminKey, error) {
	if db.closed.Load() {
		return AdminKey{}, errClosed
	}
	if err := checkOwned("admin key", k.OrgID, k.Hash); err != nil {
		return AdminKey{}, err
	}
	if k.Role == "" {
		return AdminKey{}, errors.New("store: create admin key: empty role")
	}
	k.ID = newID("key")
	k.Hash = slices.Clone(k.Hash)
	k.ExpiresAt = stampPtr(k.ExpiresAt)
	k.CreatedAt = stamp(db.now())
	if err := db.b.insertAdminKey(ctx, k, db.now()); err != nil {
		return AdminKey{}, db.fail(fmt.Sprintf("create admin key in org %s", k.OrgID), err)
	}
	return k, nil
}

// AdminKeyByHash returns the admin key whose secret hashes to hash, or an
// error wrapping ErrNotFound.
func (db *DB) AdminKeyByHash(ctx context.Context, hash []byte) (AdminKey, error) {
	if db.closed.Load() {
		return AdminKey{}, errClosed
	}
	k, err := db.b.adminKeyByHash(ctx, hash)
	if err != nil {
		return AdminKey{}, db.fail("admin key by hash", err)
	}
	return k, nil
}

// ListAdminKeys returns the admin keys of organization orgID ("" means
// all), newest first.
func (db *DB) ListAdminKeys(ctx context.Context, orgID string) ([]AdminKey, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	ks, err := db.b.listAdminKeys(ctx, orgID)
	if err != nil {
		return nil, db.fail("list admin keys", err)
	}
	return ks, nil
}

// DeleteAdminKey deletes the admin key and publishes ChangeAdminKeyDeleted.
// The error wraps ErrNotFound when no such key is in orgID ("" means any
// organization).
func (db *DB) DeleteAdminKey(ctx context.Context, orgID, id string) error {
	if db.closed.Load() {
		return errClosed
	}
	if err := db.b.deleteAdminKey(ctx, orgID, id); err != nil {
		return db.fail("delete admin key "+id, err)
	}
	return nil
}

// Maintenance is a hostname in maintenance mode: visitors get 503.
type Maintenance struct {
	// Hostname is the key: one record per hostname, as the caller
	// normalized it.
	Hostname string
	// OrgID is the owning organization; it must exist.
	OrgID string
	// By names the actor that turned maintenance on (free text).
	By string
	// Since is when maintenance began; zero means now.
	Since time.Time
	// Reason is shown to visitors; "" for none. The caller bounds it.
	Reason string
	// ExpiresAt is when maintenance ends by itself; nil means when it is
	// cleared. A record past its end stays until it is cleared or set
	// again: the servers reading it apply the end themselves.
	ExpiresAt *time.Time
}

// SetMaintenance puts m.Hostname in maintenance, or updates By, Since,
// Reason and ExpiresAt when it already is (an upsert by hostname: idempotent), and publishes
// ChangeMaintenanceSet. The error wraps ErrConflict when the hostname is in
// maintenance for another organization and ErrNotFound when m.OrgID does
// not exist.
func (db *DB) SetMaintenance(ctx context.Context, m Maintenance) error {
	if db.closed.Load() {
		return errClosed
	}
	if m.Hostname == "" || m.OrgID == "" {
		return errors.New("store: set maintenance: empty hostname or org")
	}
	if m.Since.IsZero() {
		m.Since = db.now()
	}
	m.Since = stamp(m.Since)
	if m.ExpiresAt != nil {
		e := stamp(*m.ExpiresAt)
		m.ExpiresAt = &e
	}
	if err := db.b.setMaintenance(ctx, m); err != nil {
		return db.fail("set maintenance "+m.Hostname, err)
	}
	return nil
}

// ClearMaintenance takes hostname out of maintenance and publishes
// ChangeMaintenanceCleared. The error wraps ErrNotFound when hostname is not
// in maintenance for orgID ("" means any organization).
func (db *DB) ClearMaintenance(ctx context.Context, orgID, hostname string) error {
	if db.closed.Load() {
		return errClosed
	}
	if err := db.b.clearMaintenance(ctx, orgID, hostname); err != nil {
		return db.fail("clear maintenance "+hostname, err)
	}
	return nil
}

// ListMaintenance returns every hostname in maintenance, across all
// organizations, the most recently set first.
func (db *DB) ListMaintenance(ctx context.Context) ([]Maintenance, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	ms, err := db.b.listMaintenance(ctx)
	if err != nil {
		return nil, db.fail("list maintenance", err)
	}
	return ms, nil
}

// AuditEntry is one line of the audit log. Entries are never changed or
// removed: the store has no method for it and the database refuses it (a
// trigger on the table). Each entry is a link of a hash chain (see
// AuditHash) that VerifyAudit checks, so that a change made around the
// triggers shows.
type AuditEntry struct {
	// ID is assigned by the store, increasing.
	ID int64
	// Seq is the entry's place in the hash chain, assigned by the store:
	// 1 for the first entry, then one more for each entry without gaps,
	// in the order appends commit (across every server on the database).
	Seq int64
	// PrevHash is the Hash of entry Seq-1 (32 zero bytes for Seq 1),
	// assigned by the store.
	PrevHash []byte
	// Hash is AuditHash(PrevHash, entry), assigned by the store.
	Hash []byte
	// At is when it happened; zero means now.
	At time.Time
	// OrgID is the organization concerned; "" for events outside any
	// (the master token, a failed login).
	OrgID string
	// Event names what happened ("token_minted", "login_failed", …).
	Event string
	// Actor names who did it (see Actor: "master", "key:ID", "token:ID",
	// …).
	Actor Actor
	// Hostname is the hostname concerned, if any.
	Hostname string
	// Detail is free text.
	Detail string
}

// Audit list limits: ListAudit's default and ceiling.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

// AppendAudit appends e to the audit log and returns it as stored: with
// its ID, At (now when e.At is zero), chain fields (Seq, PrevHash, Hash;
// any set in e are ignored), control characters in Actor, Hostname and
// Detail escaped and Detail cut to MaxAuditDetailBytes. Appends are serialized across every server sharing the
// database, so the chain stays linear.
func (db *DB) AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	if db.closed.Load() {
		return AuditEntry{}, errClosed
	}
	if e.Event == "" {
		return AuditEntry{}, errors.New("store: append audit: empty event")
	}
	if e.At.IsZero() {
		e.At = db.now()
	}
	e.At = stamp(e.At)
	e = cleanAudit(e)
	got, err := db.b.appendAudit(ctx, e)
	if err != nil {
		return AuditEntry{}, db.fail("append audit "+e.Event, err)
	}
	return got, nil
}

// ListAudit returns the newest entries of organization orgID ("" means
// all), newest first: at most limit, where limit <= 0 means
// DefaultAuditLimit and anything above MaxAuditLimit means MaxAuditLimit.
func (db *DB) ListAudit(ctx context.Context, orgID string, limit int) ([]AuditEntry, error) {
	return db.QueryAudit(ctx, AuditQuery{OrgID: orgID, Limit: limit})
}

// AuditQuery selects audit entries for QueryAudit. Every field is a filter
// that its zero value turns off; set ones must all hold.
type AuditQuery struct {
	// OrgID is the organization; "" means every one.
	OrgID string
	// Event, Actor and Hostname match exactly, except that an event
	// renamed since entries were stored also matches its old name
	// ("token_created" matches "token_minted", its name before #20).
	Event, Actor, Hostname string
	// Since and Until bound At: Since <= At < Until.
	Since, Until time.Time
	// Limit bounds the entries returned: <= 0 means DefaultAuditLimit,
	// anything above MaxAuditLimit means MaxAuditLimit.
	Limit int
}

// MaxAuditQueryField bounds the length in bytes of each of AuditQuery's
// text filters: a longer one is refused before the database sees it.
const MaxAuditQueryField = 512

// QueryAudit returns the newest entries q selects, newest first, at most
// q.Limit (bounded as ListAudit's limit). A text filter longer than
// MaxAuditQueryField is an error.
func (db *DB) QueryAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	for _, f := range [...]string{q.OrgID, q.Event, q.Actor, q.Hostname} {
		if len(f) > MaxAuditQueryField {
			return nil, fmt.Errorf("store: audit filter of %d bytes, at most %d", len(f), MaxAuditQueryField)
		}
	}
	if q.Limit <= 0 {
		q.Limit = DefaultAuditLimit
	}
	q.Limit = min(q.Limit, MaxAuditLimit)
	es, err := db.b.listAudit(ctx, q, auditAlias(q.Event))
	if err != nil {
		return nil, db.fail("list audit", err)
	}
	return es, nil
}

// auditRenames maps an audit event's current name to the name entries
// stored before its rename carry. The store owns this history: the audit
// log is append-only and hash-chained, so renamed events are matched,
// never rewritten.
var auditRenames = map[string]string{
	"token_created": "token_minted", // renamed in #20
}

// auditAlias returns the name that entries stored before event was
// renamed carry, or event itself.
func auditAlias(event string) string {
	if old, ok := auditRenames[event]; ok {
		return old
	}
	return event
}

// checkOwned validates what every secret-backed record needs.
func checkOwned(what, orgID string, hash []byte) error {
	var errs []error
	if orgID == "" {
		errs = append(errs, fmt.Errorf("store: create %s: empty org", what))
	}
	if len(hash) != sha256.Size {
		errs = append(errs, fmt.Errorf("store: create %s: hash is %d bytes, want %d (SHA-256)", what, len(hash), sha256.Size))
	}
	return errors.Join(errs...)
}
