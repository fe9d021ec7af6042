-- Automatic TLS (issue #22): what certmagic stores (ACME accounts,
-- certificates, their keys and metadata, distributed challenge tokens),
-- keyed by its slash-separated paths, and the locks it takes so that
-- several servers sharing the database obtain one certificate per name,
-- not one each. A lock is held by owner until expires_at; a holder that
-- died lets it expire and another takes it over.
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE acme_data (
    key         TEXT PRIMARY KEY,
    value       BLOB NOT NULL,
    modified_at TEXT NOT NULL
) STRICT;

CREATE TABLE acme_locks (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at TEXT NOT NULL
) STRICT;
