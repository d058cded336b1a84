-- The intent each held token was written for, so that the key of an order
-- that can never be placed is found and deleted within a minute, not after
-- the intent retention: commands/keys.go (Keys.Unplaced) and
-- commands/reconciler.go (shredUnplaced).

-- +goose Up

-- order_keys.intent: the intent stream (intent-<sha256>) whose IntentRecorded
-- names the order as its target, written with the held token before that
-- intent is recorded; NULL for keys made otherwise (an order placed before
-- tokens were held, and rows written before this column).
ALTER TABLE order_keys ADD COLUMN intent text;

-- The keys that still hold a token (orders not placed yet), by age: a few
-- rows in flight at any time, read by every reconciler pass.
CREATE INDEX order_keys_unplaced ON order_keys (created_at) WHERE held_token IS NOT NULL;

-- +goose Down
DROP INDEX order_keys_unplaced;
ALTER TABLE order_keys DROP COLUMN intent;
