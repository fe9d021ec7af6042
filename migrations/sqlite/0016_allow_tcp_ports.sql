-- The public ports a token's clients may expose (issue #23): a JSON list
-- of "N" or "N-M", within the server's tcp_port_range; empty = none.

-- +goose Up
ALTER TABLE tokens ADD COLUMN allow_tcp_ports TEXT NOT NULL DEFAULT '[]';

