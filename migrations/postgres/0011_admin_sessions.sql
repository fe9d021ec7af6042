-- Admin login sessions: a browser that logged in with an admin key or the
-- master token (POST /aperio/admin/session) holds a random secret in a
-- cookie; the row is keyed by the secret's SHA-256 (id), never the secret.
-- key_id is the admin key the session acts as, '' for the master token
-- (master true); org_id is the key's organization at login ('' for the
-- master token), kept for listings: each request re-reads the key, so its
-- current role and organization apply. csrf is the token every
-- state-changing request of the session must carry. A session ends at
-- expires_at whatever the browser keeps, at logout (deleted), or when its
-- key is deleted (deleted in the same transaction). seq orders a key's
-- sessions by creation, to evict the oldest beyond the per-key bound.
-- remote_addr is the address the login came from, '' if unknown.
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE admin_sessions (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          bytea NOT NULL UNIQUE,
    key_id      text NOT NULL,
    master      boolean NOT NULL,
    org_id      text NOT NULL,
    csrf        text NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    remote_addr text NOT NULL DEFAULT ''
);

CREATE INDEX admin_sessions_key_id ON admin_sessions (key_id, seq);
CREATE INDEX admin_sessions_expires_at ON admin_sessions (expires_at);
