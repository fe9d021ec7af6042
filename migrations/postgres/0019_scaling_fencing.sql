-- Issue #42, items 3 and 4: what every server sharing the database
-- shares about its scaling calls, beyond each record's own call state.
--
-- scaling_cluster holds one row (id 1):
--   lease_generation counts the scaling leases ever taken, for any record.
--     Each lease taken gets the next value, sent with its call
--     (lease_generation in the body, Aperio-Lease-Generation header) so
--     that a provider can refuse a call from a holder whose lease was
--     taken over (fencing). A single counter keeps a record's generations
--     rising even when the record is deleted and declared again.
--   budget_units and budget_at are the calls-per-minute budget
--     (scaling_max_calls_per_minute), a token bucket shared by every
--     server: budget_units is what it held at budget_at, in units of
--     1/60e9 token (as autoscale counts). NULL budget_at: never used, so
--     the bucket starts with one token.
--
-- scaling_records.lease_generation is the generation of the record's
-- latest lease, so that the outcome of a call made under an older one is
-- not stored over a newer call's; scaling_leases.generation is the
-- generation of the lease in the row.
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE scaling_cluster (
    id               smallint PRIMARY KEY CHECK (id = 1),
    lease_generation bigint NOT NULL,
    budget_units     bigint NOT NULL,
    budget_at        timestamptz
);

INSERT INTO scaling_cluster (id, lease_generation, budget_units, budget_at) VALUES (1, 0, 0, NULL);

ALTER TABLE scaling_records ADD COLUMN lease_generation bigint NOT NULL DEFAULT 0;
ALTER TABLE scaling_leases ADD COLUMN generation bigint NOT NULL DEFAULT 0;
