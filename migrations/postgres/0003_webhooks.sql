-- Webhook subscriptions: where an organization wants its server events
-- (scaling_requested, scaling_failed, scaling_disarmed) delivered.
--
-- Conventions as in 0001, plus: events is a text[] of event names, never
-- empty; secret is '' when deliveries go unsigned. seq orders
-- subscriptions created in the same microsecond.

-- +goose Up
CREATE TABLE webhooks (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    org_id     text NOT NULL REFERENCES orgs (id),
    url        text NOT NULL,
    secret     text NOT NULL,
    events     text[] NOT NULL CHECK (cardinality(events) > 0),
    created_at timestamptz NOT NULL
);

-- Every lookup (listing, delivery) is per organization.
CREATE INDEX webhooks_org_id ON webhooks (org_id);
