-- Signing keys: the share-link HMAC keys (one series per organization)
-- and the identity JWT's Ed25519 key (one server-wide series, org_id
-- ''), kept so that a restart and every server sharing the database sign
-- and verify with the same keys. A series grows by one generation per
-- rotation; the unique (purpose, org_id, generation) makes the first
-- creation and each rotation race-safe across servers: the loser of a
-- race re-reads the winner's key. sealed is the secret sealed with
-- AES-GCM under a key derived from the master token, with purpose,
-- org_id and id as additional data, so a row copied to another series
-- does not open. revoked_at is set when a rotation revoked the previous
-- generation; NULL means the key still verifies.
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE signing_keys (
    id         TEXT PRIMARY KEY,
    purpose    TEXT NOT NULL,
    org_id     TEXT NOT NULL DEFAULT '',
    generation INTEGER NOT NULL,
    sealed     BLOB NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT,
    UNIQUE (purpose, org_id, generation)
) STRICT;
