-- The first schema: organizations, client tokens, admin keys, maintenance
-- mode and the audit log.
--
-- SQLite conventions (the store's sqlite.go relies on them): times are TEXT
-- in UTC with exactly six fractional digits ("2006-01-02T15:04:05.000000Z"),
-- so they sort as text and round-trip with microsecond precision like
-- PostgreSQL's timestamptz; lists are JSON arrays of strings; seq orders rows
-- created in the same microsecond.

-- +goose Up
CREATE TABLE orgs (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    name       TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
) STRICT;

CREATE TABLE tokens (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    org_id      TEXT NOT NULL REFERENCES orgs (id),
    name        TEXT NOT NULL,
    prefix      TEXT NOT NULL,
    hash        BLOB NOT NULL UNIQUE,
    hostnames   TEXT NOT NULL DEFAULT '[]',
    allowed_ips TEXT NOT NULL DEFAULT '[]',
    expires_at  TEXT,
    revoked_at  TEXT,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL
) STRICT;

CREATE INDEX tokens_org_id ON tokens (org_id);

CREATE TABLE admin_keys (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    org_id     TEXT NOT NULL REFERENCES orgs (id),
    name       TEXT NOT NULL,
    role       TEXT NOT NULL,
    prefix     TEXT NOT NULL,
    hash       BLOB NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL
) STRICT;

CREATE INDEX admin_keys_org_id ON admin_keys (org_id);

CREATE TABLE maintenance (
    hostname TEXT PRIMARY KEY,
    org_id   TEXT NOT NULL REFERENCES orgs (id),
    set_by   TEXT NOT NULL,
    since    TEXT NOT NULL
) STRICT;

-- org_id is '' for events outside any organization (the master token, a
-- failed login), so it has no foreign key.
CREATE TABLE audit (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       TEXT NOT NULL,
    org_id   TEXT NOT NULL,
    event    TEXT NOT NULL,
    actor    TEXT NOT NULL,
    hostname TEXT NOT NULL,
    detail   TEXT NOT NULL
) STRICT;

CREATE INDEX audit_at ON audit (at, id);
CREATE INDEX audit_org_id_at ON audit (org_id, at, id);

-- The audit log is append-only for every connection, not only the store's.
-- +goose StatementBegin
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN
    SELECT RAISE(ABORT, 'audit log is append-only');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN
    SELECT RAISE(ABORT, 'audit log is append-only');
END;
-- +goose StatementEnd
