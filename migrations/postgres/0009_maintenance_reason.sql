-- A maintenance record's reason, shown to visitors, and its end: NULL
-- means it lasts until it is cleared. Every server applies the end by
-- itself, so a record that ended stays in the table, without effect,
-- until it is cleared or set again.

-- +goose Up
ALTER TABLE maintenance ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE maintenance ADD COLUMN expires_at TIMESTAMPTZ;
