-- Autoscaling records: one per organization, hostname and path prefix,
-- created or refreshed by each client that announces a scaling: block, and
-- kept after the client exits so that a request can cold start it.
--
-- Conventions as in 0001, plus: durations are INTEGER milliseconds (the
-- *_ms columns); booleans are INTEGER 0 or 1; armed_by is a JSON array of
-- the token IDs that announced the record, in the order they first did,
-- without duplicates, never empty (a record whose last armer is released is
-- deleted, not kept empty). seq orders records refreshed in the same
-- microsecond.

-- +goose Up
CREATE TABLE scaling_records (
    seq                  INTEGER PRIMARY KEY AUTOINCREMENT,
    id                   TEXT NOT NULL UNIQUE,
    org_id               TEXT NOT NULL REFERENCES orgs (id),
    hostname             TEXT NOT NULL,
    path                 TEXT NOT NULL,
    url                  TEXT NOT NULL,
    secret               TEXT NOT NULL,
    min_instances        INTEGER NOT NULL,
    max_instances        INTEGER NOT NULL,
    cold_start_ms        INTEGER NOT NULL,
    window_ms            INTEGER NOT NULL,
    cooldown_ms          INTEGER NOT NULL,
    target_utilization   REAL NOT NULL,
    armed_by             TEXT NOT NULL CHECK (json_array_length(armed_by) > 0),
    conflict             INTEGER NOT NULL CHECK (conflict IN (0, 1)),
    disarmed             INTEGER NOT NULL CHECK (disarmed IN (0, 1)),
    consecutive_failures INTEGER NOT NULL,
    last_call_at         TEXT,
    last_reason          TEXT NOT NULL,
    last_status          INTEGER NOT NULL,
    created_at           TEXT NOT NULL,
    updated_at           TEXT NOT NULL,
    UNIQUE (org_id, hostname, path)
) STRICT;

-- Listing (newest refresh first) and the TTL sweep both walk updated_at.
CREATE INDEX scaling_records_updated_at ON scaling_records (updated_at, seq);
