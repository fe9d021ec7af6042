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
    key         text PRIMARY KEY,
    value       bytea NOT NULL,
    modified_at timestamptz NOT NULL
);

CREATE TABLE acme_locks (
    name       text PRIMARY KEY,
    owner      text NOT NULL,
    expires_at timestamptz NOT NULL
);
