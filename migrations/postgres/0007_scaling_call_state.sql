-- What a server knows of a record's calls, kept so that a restarted
-- server, or every other server of a cluster, honours it: no call before
-- next_call_at (the cooldown after a call, or the backoff after a failed
-- one), none to the provider before penalty_until (its 429 penalty or
-- Retry-After, as it stood when the call ended), and the last failure's
-- reason for the API. NULL means none; last_error is '' after a success.
--
-- scaling_leases makes a decision single-flight across servers: the
-- server holding a record's lease is the only one calling for it until
-- the lease is released (with the call's outcome, in one transaction) or
-- expires. The lease names its decision (reason, current, desired) and the
-- decision's Idempotency-Key, which a server taking over an expired lease
-- for the same decision reuses. A lease goes with its record.

-- +goose Up
ALTER TABLE scaling_records ADD COLUMN next_call_at timestamptz;
ALTER TABLE scaling_records ADD COLUMN penalty_until timestamptz;
ALTER TABLE scaling_records ADD COLUMN last_error text NOT NULL DEFAULT '';

CREATE TABLE scaling_leases (
    record_id       text PRIMARY KEY REFERENCES scaling_records (id) ON DELETE CASCADE,
    holder          text NOT NULL,
    reason          text NOT NULL,
    current_instances bigint NOT NULL,
    desired_instances bigint NOT NULL,
    idempotency_key text NOT NULL,
    acquired_at     timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL
);
