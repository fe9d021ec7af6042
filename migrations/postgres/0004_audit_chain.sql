-- The audit log becomes a hash chain (issue #7): each entry carries its
-- position (seq, 1, 2, 3, … without gaps), the hash of the entry before it
-- (prev_hash) and its own hash; audit_chain_head holds the seq and hash of
-- the last chained entry. The hash itself is defined in store/audit.go and
-- docs/audit-and-explain.md.
--
-- Entries written before this migration have NULL chain columns: the store
-- chains them, oldest id first, the first time it opens the database after
-- the migration (a first-start backfill, in Go, so that one implementation
-- of the hash serves both dialects). That is the only update the log ever
-- accepts: setting the chain columns of an entry that has none, leaving
-- every other column as it was.
--
-- Several servers append at once: each append locks the head row
-- (SELECT … FOR UPDATE) in the transaction that inserts the entry, so
-- appends are serialized and the chain stays linear.

-- +goose Up
ALTER TABLE audit
    ADD COLUMN seq bigint,
    ADD COLUMN prev_hash bytea,
    ADD COLUMN hash bytea;

CREATE UNIQUE INDEX audit_seq ON audit (seq);

CREATE TABLE audit_chain_head (
    id   integer PRIMARY KEY CHECK (id = 1),
    seq  bigint NOT NULL,
    hash bytea NOT NULL
);

INSERT INTO audit_chain_head (id, seq, hash) VALUES (1, 0, decode(repeat('00', 32), 'hex'));

DROP TRIGGER audit_no_update_delete ON audit;

-- +goose StatementBegin
CREATE FUNCTION audit_chain_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.hash IS NOT NULL OR NEW.hash IS NULL OR NEW.prev_hash IS NULL OR NEW.seq IS NULL
        OR (NEW.id, NEW.at, NEW.org_id, NEW.event, NEW.actor, NEW.hostname, NEW.detail)
            IS DISTINCT FROM (OLD.id, OLD.at, OLD.org_id, OLD.event, OLD.actor, OLD.hostname, OLD.detail) THEN
        RAISE EXCEPTION 'audit log is append-only';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_chain_once();

CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();

-- The head only moves forward and never goes away.
-- +goose StatementBegin
CREATE FUNCTION audit_chain_head_forward() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.id <> OLD.id OR NEW.seq <= OLD.seq THEN
        RAISE EXCEPTION 'audit chain head only moves forward';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_chain_head_forward BEFORE UPDATE OR DELETE ON audit_chain_head
    FOR EACH ROW EXECUTE FUNCTION audit_chain_head_forward();

CREATE TRIGGER audit_chain_head_no_truncate BEFORE TRUNCATE ON audit_chain_head
    FOR EACH STATEMENT EXECUTE FUNCTION audit_chain_head_forward();
