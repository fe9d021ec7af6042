-- Token limits, token rotation, organization limits and admin key expiry
-- (issue #20).
--
-- tokens: max_rps (requests per second through the token's clients, 0 =
-- no limit), daily_max_bytes (visitor bytes per UTC day, 0 = no limit;
-- enforced by usage accounting), max_connections (tunnel sessions at
-- once, 0 = no limit), paths (JSON list of path prefixes the token may
-- bind, empty = any), client_allowed_ips (JSON list of CIDRs the token's
-- tunnels may connect from, empty = anywhere). generation counts the
-- rotations of the secret; prev_hash is the SHA-256 of the secret before
-- the last rotation, valid until prev_expires_at (the grace). expiry_warned
-- is a bit set of the expiry warnings sent (1: 7 days, 2: 1 day), so that
-- each is sent once across every server.
--
-- orgs: monthly_max_bytes (0 = no limit; enforced by usage accounting),
-- max_clients, max_tokens, max_admin_keys (0 = no limit).
--
-- admin_keys: expires_at, NULL for never.

-- +goose Up
ALTER TABLE tokens ADD COLUMN max_rps REAL NOT NULL DEFAULT 0 CHECK (max_rps >= 0);
ALTER TABLE tokens ADD COLUMN daily_max_bytes INTEGER NOT NULL DEFAULT 0 CHECK (daily_max_bytes >= 0);
ALTER TABLE tokens ADD COLUMN max_connections INTEGER NOT NULL DEFAULT 0 CHECK (max_connections >= 0);
ALTER TABLE tokens ADD COLUMN paths TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN client_allowed_ips TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN prev_hash BLOB;
ALTER TABLE tokens ADD COLUMN prev_expires_at TEXT;
ALTER TABLE tokens ADD COLUMN expiry_warned INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tokens_prev_hash ON tokens (prev_hash);

ALTER TABLE orgs ADD COLUMN monthly_max_bytes INTEGER NOT NULL DEFAULT 0 CHECK (monthly_max_bytes >= 0);
ALTER TABLE orgs ADD COLUMN max_clients INTEGER NOT NULL DEFAULT 0 CHECK (max_clients >= 0);
ALTER TABLE orgs ADD COLUMN max_tokens INTEGER NOT NULL DEFAULT 0 CHECK (max_tokens >= 0);
ALTER TABLE orgs ADD COLUMN max_admin_keys INTEGER NOT NULL DEFAULT 0 CHECK (max_admin_keys >= 0);

ALTER TABLE admin_keys ADD COLUMN expires_at TEXT;
