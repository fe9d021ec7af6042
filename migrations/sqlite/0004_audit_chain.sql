-- The audit log becomes a hash chain (issue #7): each entry carries its
-- position (seq, 1, 2, 3, … without gaps), the hash of the entry before it
-- (prev_hash) and its own hash; audit_chain_head holds the seq and hash of
-- the last chained entry. The hash itself is defined in store/audit.go and
-- docs/audit-and-explain.md.
--
-- Entries written before this migration have NULL chain columns: the store
-- chains them, oldest id first, the first time it opens the database after
-- the migration (a first-start backfill, in Go: SQLite has no SHA-256).
-- That is the only update the log ever accepts: setting the chain columns
-- of an entry that has none, leaving every other column as it was.

-- +goose Up
ALTER TABLE audit ADD COLUMN seq INTEGER;
ALTER TABLE audit ADD COLUMN prev_hash BLOB;
ALTER TABLE audit ADD COLUMN hash BLOB;

CREATE UNIQUE INDEX audit_seq ON audit (seq);

-- One row (id = 1). Appends run in the one writer transaction, so SQLite
-- needs no lock beyond it; the row lets --verify-audit notice entries
-- removed from the tail.
CREATE TABLE audit_chain_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash BLOB NOT NULL
) STRICT;

INSERT INTO audit_chain_head (id, seq, hash) VALUES (1, 0, zeroblob(32));

DROP TRIGGER audit_no_update;

-- +goose StatementBegin
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
WHEN OLD.hash IS NOT NULL OR NEW.hash IS NULL OR NEW.prev_hash IS NULL OR NEW.seq IS NULL
    OR NEW.id IS NOT OLD.id OR NEW.at IS NOT OLD.at OR NEW.org_id IS NOT OLD.org_id
    OR NEW.event IS NOT OLD.event OR NEW.actor IS NOT OLD.actor
    OR NEW.hostname IS NOT OLD.hostname OR NEW.detail IS NOT OLD.detail
BEGIN
    SELECT RAISE(ABORT, 'audit log is append-only');
END;
-- +goose StatementEnd

-- The head only moves forward and never goes away.
-- +goose StatementBegin
CREATE TRIGGER audit_chain_head_forward BEFORE UPDATE ON audit_chain_head
WHEN NEW.id IS NOT OLD.id OR NEW.seq <= OLD.seq
BEGIN
    SELECT RAISE(ABORT, 'audit chain head only moves forward');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER audit_chain_head_no_delete BEFORE DELETE ON audit_chain_head
BEGIN
    SELECT RAISE(ABORT, 'audit chain head only moves forward');
END;
-- +goose StatementEnd
