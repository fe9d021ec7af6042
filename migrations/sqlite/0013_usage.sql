-- Usage accounting: visitor bytes (in and out) and requests through each
-- token's clients, per UTC day (YYYY-MM-DD), token ('' for the master
-- token), organization and bind hostname. Servers add to a row (an
-- upsert that increments), so several servers sharing a database add up.
-- No foreign key: usage outlives a revoked token and the master token has
-- no row in tokens.
--
-- The quota columns (tokens.daily_max_bytes, orgs.monthly_max_bytes; 0 =
-- none) come from 0012.
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE usage (
    day       TEXT NOT NULL,
    token_id  TEXT NOT NULL,
    org_id    TEXT NOT NULL,
    hostname  TEXT NOT NULL,
    bytes     INTEGER NOT NULL CHECK (bytes >= 0),
    requests  INTEGER NOT NULL CHECK (requests >= 0),
    PRIMARY KEY (day, token_id, org_id, hostname)
) STRICT;

CREATE INDEX usage_org_day ON usage (org_id, day);
CREATE INDEX usage_token_day ON usage (token_id, day);

