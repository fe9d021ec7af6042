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
-- transaction, holding the chain head's lock, and sets through_id to 0 in
-- the same transaction; it can never rise again, so later opens, on any
-- server, chain nothing.

-- +goose Up
CREATE TABLE audit_backfill (
    id         integer PRIMARY KEY CHECK (id = 1),
    through_id bigint NOT NULL
);

INSERT INTO audit_backfill (id, through_id)
SELECT 1, CASE WHEN (SELECT seq FROM audit_chain_head WHERE id = 1) = 0
    THEN coalesce((SELECT max(id) FROM audit WHERE hash IS NULL), 0) ELSE 0 END;

-- +goose StatementBegin
CREATE FUNCTION audit_backfill_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.id <> OLD.id OR NEW.through_id <> 0 THEN
        RAISE EXCEPTION 'audit backfill runs once';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_backfill_once BEFORE UPDATE OR DELETE ON audit_backfill
    FOR EACH ROW EXECUTE FUNCTION audit_backfill_once();

CREATE TRIGGER audit_backfill_no_truncate BEFORE TRUNCATE ON audit_backfill
    FOR EACH STATEMENT EXECUTE FUNCTION audit_backfill_once();

-- +goose StatementBegin
CREATE FUNCTION audit_chained_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.seq IS NULL OR NEW.prev_hash IS NULL OR NEW.hash IS NULL THEN
        RAISE EXCEPTION 'audit entries must be chained: append through the store';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_chained_insert BEFORE INSERT ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_chained_insert();

-- Chain columns may be set only on an entry the backfill still owns.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION audit_chain_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.hash IS NOT NULL OR NEW.hash IS NULL OR NEW.prev_hash IS NULL OR NEW.seq IS NULL
        OR OLD.id > (SELECT through_id FROM audit_backfill WHERE id = 1)
        OR (NEW.id, NEW.at, NEW.org_id, NEW.event, NEW.actor, NEW.hostname, NEW.detail)
            IS DISTINCT FROM (OLD.id, OLD.at, OLD.org_id, OLD.event, OLD.actor, OLD.hostname, OLD.detail) THEN
        RAISE EXCEPTION 'audit log is append-only';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
