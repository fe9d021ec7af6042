-- Issue #38, item 11: sessions of the services' OpenID Connect login
-- live in sealed cookies; these rows end them before their sealed expiry,
-- for every server sharing the database (followed through the change
-- feed). A row ends one session (session_id set: a logout), every session
-- of a user (subject or email) or of the hostname (neither) issued at or
-- before revoked_at, and is dropped at expires_at, when every session it
-- ends has expired. Times are Unix milliseconds. The store bounds the
-- rows per user and per hostname (store.MaxRevokedSessionsPerUser,
-- store.MaxRevocationsPerHost).
--
-- Conventions as in 0001.

-- +goose Up
CREATE TABLE oidc_revocations (
    id         text PRIMARY KEY,
    hostname   text NOT NULL,
    session_id text NOT NULL,
    subject    text NOT NULL,
    email      text NOT NULL,
    revoked_at bigint NOT NULL,
    expires_at bigint NOT NULL
);

CREATE INDEX oidc_revocations_hostname ON oidc_revocations (hostname, subject);
CREATE INDEX oidc_revocations_expires ON oidc_revocations (expires_at);
