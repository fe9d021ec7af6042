package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// backend is one dialect. Each implementation holds all of its SQL, maps
// its driver's errors onto ErrNotFound, ErrConflict and ErrUnavailable, and
// announces the changes it commits (SQLite to the hub after commit,
// PostgreSQL with NOTIFY inside the transaction). DB validates input and
// assigns IDs and times before calling it, so a backend only stores and
// loads.
type backend interface {
	name() string
	ping(ctx context.Context) error
	// close stops any goroutine the backend owns, then closes connections.
	close() error

	ensureOrg(ctx context.Context, o Org) (Org, error)
	insertOrg(ctx context.Context, o Org) error
	org(ctx context.Context, id string) (Org, error)
	listOrgs(ctx context.Context) ([]Org, error)

	setOrgLimits(ctx context.Context, id string, l OrgLimits) (Org, error)

	// insertToken inserts t after counting, under a lock on its
	// organization, the live tokens (not revoked, not expired at now)
	// against the organization's MaxTokens (ErrLimit beyond it).
	insertToken(ctx context.Context, t Token, now time.Time) error
	// updateToken writes e over the token's editable fields (ErrConflict
	// when it is revoked), clearing expiry_warned when the expiry changed.
	updateToken(ctx context.Context, orgID, id string, e TokenEdit) (Token, error)
	// rotateToken moves hash to prev_hash (valid until graceEnds), stores
	// the new hash and prefix and bumps generation (ErrConflict when it
	// is revoked).
	rotateToken(ctx context.Context, orgID, id string, hash []byte, prefix string, graceEnds time.Time) (Token, error)
	tokensExpiring(ctx context.Context, now, by time.Time) ([]Token, error)
	// claimExpiryWarning sets bit in expiry_warned when it is clear and
	// the expiry is still expiresAt, reporting whether it did.
	claimExpiryWarning(ctx context.Context, id string, expiresAt time.Time, bit int) (bool, error)
	tokenByHash(ctx context.Context, hash []byte) (Token, error)
	token(ctx context.Context, orgID, id string) (Token, error)
	listTokens(ctx context.Context, orgID string) ([]Token, error)
	revokeToken(ctx context.Context, orgID, id string, at time.Time) (Token, error)

	// insertAdminKey inserts k after counting the organization's
	// unexpired keys against its MaxAdminKeys, as insertToken does.
	insertAdminKey(ctx context.Context, k AdminKey, now time.Time) error
	adminKeyByHash(ctx context.Context, hash []byte) (AdminKey, error)
	listAdminKeys(ctx context.Context, orgID string) ([]AdminKey, error)
	adminKey(ctx context.Context, orgID, id string) (AdminKey, error)
	// deleteAdminKey deletes the key and its sessions in one transaction.
	deleteAdminKey(ctx context.Context, orgID, id string) error

	// insertAdminSession inserts s and deletes the oldest sessions of its
	// key (or of the master token) beyond keep, in one transaction.
	insertAdminSession(ctx context.Context, s AdminSession, keep int) error
	adminSessionByHash(ctx context.Context, hash []byte) (AdminSession, error)
	deleteAdminSession(ctx context.Context, hash []byte) error
	deleteExpiredAdminSessions(ctx context.Context, now time.Time) (int64, error)

	setMaintenance(ctx context.Context, m Maintenance) error
	clearMaintenance(ctx context.Context, orgID, hostname string) error
	listMaintenance(ctx context.Context) ([]Maintenance, error)

	// declareScaling stores fresh (a complete new record) when its bind
	// has none, or else the mergeScaling of the stored record and fresh,
	// under a lock on the bind.
	declareScaling(ctx context.Context, fresh ScalingRecord, armer string, rearm bool) (ScalingRecord, bool, error)
	scalingRecord(ctx context.Context, orgID, id string) (ScalingRecord, error)
	scalingRecordByBind(ctx context.Context, orgID, hostname, path string) (ScalingRecord, error)
	listScalingRecords(ctx context.Context, orgID string) ([]ScalingRecord, error)
	// recordScalingCall stores c on the record and deletes c.Holder's
	// lease of it, in one transaction.
	recordScalingCall(ctx context.Context, id string, c ScalingCall) (ScalingRecord, error)
	// acquireScalingLease reads the record and its lease under a lock on
	// the record, decides with leaseVerdict, and stores the lease when it
	// is taken.
	acquireScalingLease(ctx context.Context, want ScalingLease) (ScalingLease, ScalingRecord, bool, error)
	deleteScalingRecord(ctx context.Context, orgID, id string) error
	// releaseScalingArmer and deleteStaleScalingRecords announce their
	// changes in record ID order and return the deleted records' IDs in
	// that order, never nil.
	releaseScalingArmer(ctx context.Context, armer string) ([]string, error)
	deleteStaleScalingRecords(ctx context.Context, cutoff time.Time) ([]string, error)

	// The automatic TLS storage: acmeDelete deletes key and the keys
	// under key + "/"; acmeLock takes or extends the lock when it is
	// free, expired or owner's, and reports whether owner holds it.
	acmePut(ctx context.Context, key string, value []byte, at time.Time) error
	acmeGet(ctx context.Context, key string) ([]byte, error)
	acmeDelete(ctx context.Context, key string) (int64, error)
	acmeList(ctx context.Context, prefix string) ([]ACMEItem, error)
	acmeLock(ctx context.Context, name, owner string, now, until time.Time) (bool, error)
	acmeUnlock(ctx context.Context, name, owner string) error

	insertWebhook(ctx context.Context, w Webhook) error
	listWebhooks(ctx context.Context, orgID string) ([]Webhook, error)
	deleteWebhook(ctx context.Context, orgID, id string) error
	// webhooksFor returns orgID's webhooks whose events hold event,
	// oldest first.
	webhooksFor(ctx context.Context, orgID, event string) ([]Webhook, error)

	// recordWebhookDelivery updates the stored delivery d.ID of
	// d.WebhookID (not its body or created_at), or else inserts d and
	// deletes the subscription's deliveries beyond the keep newest, in
	// one transaction, and returns the row as stored.
	recordWebhookDelivery(ctx context.Context, d WebhookDelivery, keep int) (WebhookDelivery, error)
	listWebhookDeliveries(ctx context.Context, orgID, webhookID string, limit int) ([]WebhookDelivery, error)
	webhookDelivery(ctx context.Context, orgID, webhookID, id string) (WebhookDelivery, error)

	// setOrgHostnames replaces orgID's patterns (validated, sorted) after
	// checking them with firstOverlap against every stored pattern, both
	// under a lock that serializes replacements.
	setOrgHostnames(ctx context.Context, orgID string, patterns []string) error
	listOrgHostnames(ctx context.Context, orgID string) ([]OrgHostname, error)
	// setOrgPorts replaces orgID's port ranges (validated, merged,
	// sorted) after checking them with firstPortOverlap against every
	// stored range, both under a lock that serializes replacements.
	setOrgPorts(ctx context.Context, orgID string, rs []portspec.Range) error
	listOrgPorts(ctx context.Context, orgID string) ([]OrgPorts, error)

	// appendAudit inserts e (its At already stamped) as the next link of
	// the chain, with the chain head locked for the transaction, and
	// returns it with ID, Seq, PrevHash and Hash set.
	appendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error)
	// backfillAudit chains the entries that have no chain columns and an
	// ID up to the one migration 0006 recorded (written before migration
	// 0004), oldest ID first, after the head, spends that record in the
	// same transaction, and returns how many it chained. Once the record
	// is spent it chains nothing.
	backfillAudit(ctx context.Context) (int64, error)
	// readAuditChain calls fn with every chained entry in Seq order until
	// fn returns false, then returns the head and the oldest unchained
	// entry, all read from one snapshot.
	readAuditChain(ctx context.Context, fn func(AuditEntry) bool) (auditChain, error)
	listAudit(ctx context.Context, q AuditQuery, alias string) ([]AuditEntry, error)

	// addSigningKey inserts k after checking, under a lock that
	// serializes writers of the series, that k.Generation is one more
	// than its highest (ErrConflict otherwise); it removes the
	// generations below k.Generation-1 and, with revokeAt set, marks
	// k.Generation-1 revoked then, all in one transaction.
	addSigningKey(ctx context.Context, k SigningKey, revokeAt *time.Time) error
	// signingKeys returns every key of purpose, by org_id then generation
	// descending.
	signingKeys(ctx context.Context, purpose string) ([]SigningKey, error)

	// addUsage increments the rows of ds (days at midnight UTC) in one
	// transaction.
	addUsage(ctx context.Context, ds []UsageDelta) error
	// usageTotals sums bytes per token on day and per org for
	// from <= day < to.
	usageTotals(ctx context.Context, day, from, to time.Time, tokens, orgs []string) (map[string]int64, map[string]int64, error)
	// queryUsage returns the rows q selects, newest day first, at most
	// limit.
	queryUsage(ctx context.Context, q UsageQuery, limit int) ([]UsageRow, error)

	// execForTest runs raw SQL, bypassing the store's API.
	execForTest(ctx context.Context, query string) error
}

// migrationLockID is the PostgreSQL advisory lock taken around migrations
// (pg_try_advisory_lock), distinct from goose's default so that another
// goose user of the same database does not wait on Aperio or the reverse.
const migrationLockID int64 = 0x61706572696f // "aperio"

// migrate applies the pending migrations of fsys to db. With a non-nil
// locker the whole run holds it, so concurrent servers take turns and each
// migration is applied once.
func migrate(ctx context.Context, log *slog.Logger, dialect goose.Dialect, db *sql.DB, fsys fs.FS, locker lock.SessionLocker) error {
	opts := []goose.ProviderOption{goose.WithLogger(goose.NopLogger())}
	if locker != nil {
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	version, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	log.Info("store migrated", logkey.Version, version, logkey.Applied, len(res))
	return nil
}
