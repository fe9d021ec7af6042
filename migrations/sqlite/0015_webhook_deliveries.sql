-- Webhook delivery log and payload formats.
--
-- webhooks.format is how a subscription's bodies are written: 'generic'
-- (the JSON envelope), 'slack' ({"text": …}) or 'discord'
-- ({"content": …}); subscriptions made before 0015 are generic.
--
-- webhook_deliveries keeps the latest deliveries of each subscription
-- (the store prunes the older ones on insert): id is the delivery's
-- webhook-id, the same for every attempt and for a redelivery; status is
-- pending (being tried), delivered, failed (given up) or dropped (never
-- sent: the outbound policy refused it); last_error is the last attempt's
-- error, truncated by the store; last_status_code is 0 without a
-- response; body is the payload exactly as signed, kept so that it can be
-- sent again. Rows go with their subscription. seq orders deliveries
-- created in the same microsecond.
--
-- Conventions as in 0001.

-- +goose Up
ALTER TABLE webhooks ADD COLUMN format TEXT NOT NULL DEFAULT 'generic'
    CHECK (format IN ('generic', 'slack', 'discord'));

CREATE TABLE webhook_deliveries (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,
    webhook_id       TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    org_id           TEXT NOT NULL,
    event            TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed', 'dropped')),
    attempts         INTEGER NOT NULL CHECK (attempts >= 0),
    last_error       TEXT NOT NULL,
    last_status_code INTEGER NOT NULL,
    response_time_ms INTEGER NOT NULL CHECK (response_time_ms >= 0),
    body             BLOB NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
) STRICT;

-- Listing and pruning are per subscription, newest first.
CREATE INDEX webhook_deliveries_webhook_id ON webhook_deliveries (webhook_id, seq);
