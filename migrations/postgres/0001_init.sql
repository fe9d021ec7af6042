-- The first schema: organizations, client tokens, admin keys, maintenance
-- mode and the audit log.
--
-- PostgreSQL conventions (the store's postgres.go relies on them): times are
-- timestamptz (microsecond precision, like the SQLite text form); lists are
-- text[]; seq orders rows created in the same microsecond.

-- +goose Up
CREATE TABLE orgs (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    name       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

CREATE TABLE tokens (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          text NOT NULL UNIQUE,
    org_id      text NOT NULL REFERENCES orgs (id),
    name        text NOT NULL,
    prefix      text NOT NULL,
    hash        bytea NOT NULL UNIQUE,
    hostnames   text[] NOT NULL DEFAULT '{}',
    allowed_ips text[] NOT NULL DEFAULT '{}',
    expires_at  timestamptz,
    revoked_at  timestamptz,
    created_at  timestamptz NOT NULL,
    created_by  text NOT NULL
);

CREATE INDEX tokens_org_id ON tokens (org_id);

CREATE TABLE admin_keys (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    org_id     text NOT NULL REFERENCES orgs (id),
    name       text NOT NULL,
    role       text NOT NULL,
    prefix     text NOT NULL,
    hash       bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    created_by text NOT NULL
);

CREATE INDEX admin_keys_org_id ON admin_keys (org_id);

CREATE TABLE maintenance (
    hostname text PRIMARY KEY,
    org_id   text NOT NULL REFERENCES orgs (id),
    set_by   text NOT NULL,
    since    timestamptz NOT NULL
);

-- org_id is '' for events outside any organization (the master token, a
-- failed login), so it has no foreign key.
CREATE TABLE audit (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL,
    org_id   text NOT NULL,
    event    text NOT NULL,
    actor    text NOT NULL,
    hostname text NOT NULL,
    detail   text NOT NULL
);

CREATE INDEX audit_at ON audit (at, id);
CREATE INDEX audit_org_id_at ON audit (org_id, at, id);

-- The audit log is append-only for every session, not only the store's:
-- UPDATE, DELETE and TRUNCATE all raise.
-- +goose StatementBegin
CREATE FUNCTION audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit log is append-only';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_no_update_delete BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();

CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
