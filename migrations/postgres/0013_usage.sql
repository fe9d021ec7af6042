-- Usage accounting: visitor bytes (in and out) and requests through each
-- token's clients, per UTC day, token ('' for the master token),
-- organization and bind hostname. Servers add to a row (INSERT … ON
-- CONFLICT DO UPDATE SET bytes = usage.bytes + EXCLUDED.bytes), so several
-- servers sharing the database add up. No foreign key: usage outlives a
-- revoked token and the master token has no row in tokens.
--
-- The quota columns (tokens.daily_max_bytes, orgs.monthly_max_bytes; 0 =
-- none) come from 0012.
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE usage (
    day       date NOT NULL,
    token_id  text NOT NULL,
    org_id    text NOT NULL,
    hostname  text NOT NULL,
    bytes     bigint NOT NULL CHECK (bytes >= 0),
    requests  bigint NOT NULL CHECK (requests >= 0),
    PRIMARY KEY (day, token_id, org_id, hostname)
);

CREATE INDEX usage_org_day ON usage (org_id, day);
CREATE INDEX usage_token_day ON usage (token_id, day);

