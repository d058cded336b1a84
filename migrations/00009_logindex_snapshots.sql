-- Snapshots of the log index the KurrentDB backend uses for the background
-- jobs' questions (eventstore/logindex: pending orders, intents to purge,
-- event count), so a restart reads only the log after the snapshot instead
-- of the whole log. See eventstore/pgcoord (Snapshots).

-- +goose Up

-- logindex_snapshots holds one snapshot per name: the index's summary as
-- JSON (its position in the log, the event at it, the orders still pending
-- and the intents not purged yet). Replaced by every save; a snapshot that
-- does not match the log it is loaded against is ignored.
CREATE TABLE logindex_snapshots (
    name     text        PRIMARY KEY,
    snapshot bytea       NOT NULL,
    saved_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE logindex_snapshots;
