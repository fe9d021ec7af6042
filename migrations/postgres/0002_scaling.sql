-- Autoscaling records: one per organization, hostname and path prefix,
-- created or refreshed by each client that announces a scaling: block, and
-- kept after the client exits so that a request can cold start it.
--
-- Conventions as in 0001, plus: durations are bigint milliseconds (the *_ms
-- columns); integers are bigint, the range of SQLite's INTEGER, so that both
-- backends accept the same values; armed_by is a text[] of the token IDs
-- that announced the record, in the order they first did, without
-- duplicates, never empty (a record whose last armer is released is
-- deleted, not kept empty). seq orders records refreshed in the same
-- microsecond.

-- +goose Up
CREATE TABLE scaling_records (
    seq                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id                   text NOT NULL UNIQUE,
    org_id               text NOT NULL REFERENCES orgs (id),
    hostname             text NOT NULL,
    path                 text NOT NULL,
    url                  text NOT NULL,
    secret               text NOT NULL,
    min_instances        bigint NOT NULL,
    max_instances        bigint NOT NULL,
    cold_start_ms        bigint NOT NULL,
    window_ms            bigint NOT NULL,
    cooldown_ms          bigint NOT NULL,
    target_utilization   double precision NOT NULL,
    armed_by             text[] NOT NULL CHECK (cardinality(armed_by) > 0),
    conflict             boolean NOT NULL,
    disarmed             boolean NOT NULL,
    consecutive_failures bigint NOT NULL,
    last_call_at         timestamptz,
    last_reason          text NOT NULL,
    last_status          bigint NOT NULL,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    UNIQUE (org_id, hostname, path)
);

-- Listing (newest refresh first) and the TTL sweep both walk updated_at.
CREATE INDEX scaling_records_updated_at ON scaling_records (updated_at, seq);
