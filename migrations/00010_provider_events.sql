-- The provider's webhook events the service processed, by event id, so a
-- redelivery of an event (Stripe delivers at least once and retries for up
-- to three days, https://docs.stripe.com/webhooks) is acknowledged without
-- fetching its payment again. Facts are deduplicated by payment id in the
-- order streams anyway; this table only saves the work. See
-- commands/webhooks.go for who writes and prunes rows, and
-- commands/webhookstore for the SQL.

-- +goose Up

-- provider_events:
--   event_id      the provider's event id ("evt_…");
--   processed_at  when the event was processed (database clock); rows older
--                 than the retention (commands.ProcessedEventsRetention)
--                 are deleted by the payment reconciler.
CREATE TABLE provider_events (
    event_id     text        PRIMARY KEY,
    processed_at timestamptz NOT NULL
);
CREATE INDEX provider_events_processed_at ON provider_events (processed_at);

-- +goose Down
DROP TABLE provider_events;
