-- Webhook subscriptions: where an organization wants its server events
-- (scaling_requested, scaling_failed, scaling_disarmed) delivered.
--
-- Conventions as in 0001, plus: events is a JSON array of event names,
-- never empty; secret is '' when deliveries go unsigned. seq orders
-- subscriptions created in the same microsecond.

-- +goose Up
CREATE TABLE webhooks (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    org_id     TEXT NOT NULL REFERENCES orgs (id),
    url        TEXT NOT NULL,
    secret     TEXT NOT NULL,
    events     TEXT NOT NULL CHECK (json_array_length(events) > 0),
    created_at TEXT NOT NULL
) STRICT;

-- Every lookup (listing, delivery) is per organization.
CREATE INDEX webhooks_org_id ON webhooks (org_id);
