-- The audit chain is sealed: the one-shot backfill of entries written
-- before the chain (migration 0004) can no longer chain rows inserted
-- around the store later, and every new entry must arrive chained.
--
-- audit_backfill holds through_id, the highest audit id the store may
-- still chain after the fact. It is set here once: to the newest unchained
-- entry when no entry has been chained yet (a database coming from before
-- 0004), and to 0 otherwise (a store that ran since 0004 chained every
-- entry it ever wrote, so an unchained row can only have been inserted
-- around it). The store chains entries with id <= through_id in one
-- transaction and sets through_id to 0 in the same transaction; it can
-- never rise again, so later opens chain nothing.

-- +goose Up
CREATE TABLE audit_backfill (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    through_id INTEGER NOT NULL
) STRICT;

INSERT INTO audit_backfill (id, through_id)
SELECT 1, CASE WHEN (SELECT seq FROM audit_chain_head WHERE id = 1) = 0
    THEN coalesce((SELECT max(id) FROM audit WHERE hash IS NULL), 0) ELSE 0 END;

-- +goose StatementBegin
CREATE TRIGGER audit_backfill_once BEFORE UPDATE ON audit_backfill
WHEN NEW.id IS NOT OLD.id OR NEW.through_id <> 0
BEGIN
    SELECT RAISE(ABORT, 'audit backfill runs once');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER audit_backfill_no_delete BEFORE DELETE ON audit_backfill
BEGIN
    SELECT RAISE(ABORT, 'audit backfill runs once');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER audit_chained_insert BEFORE INSERT ON audit
WHEN NEW.seq IS NULL OR NEW.prev_hash IS NULL OR NEW.hash IS NULL
BEGIN
    SELECT RAISE(ABORT, 'audit entries must be chained: append through the store');
END;
-- +goose StatementEnd

-- Chain columns may be set only on an entry the backfill still owns.
DROP TRIGGER audit_no_update;

-- +goose StatementBegin
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
WHEN OLD.hash IS NOT NULL OR NEW.hash IS NULL OR NEW.prev_hash IS NULL OR NEW.seq IS NULL
    OR OLD.id > (SELECT through_id FROM audit_backfill WHERE id = 1)
    OR NEW.id IS NOT OLD.id OR NEW.at IS NOT OLD.at OR NEW.org_id IS NOT OLD.org_id
    OR NEW.event IS NOT OLD.event OR NEW.actor IS NOT OLD.actor
    OR NEW.hostname IS NOT OLD.hostname OR NEW.detail IS NOT OLD.detail
BEGIN
    SELECT RAISE(ABORT, 'audit log is append-only');
END;
-- +goose StatementEnd
