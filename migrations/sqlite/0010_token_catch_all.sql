-- A client token may be minted to allow catch-all services: a service that
-- names no hostname serves the hostnames no other client binds (when the
-- server's require_hostname_bind is off). 0 means it may not, the
-- behaviour of every token minted before.

-- +goose Up
ALTER TABLE tokens ADD COLUMN allow_catch_all INTEGER NOT NULL DEFAULT 0 CHECK (allow_catch_all IN (0, 1));
