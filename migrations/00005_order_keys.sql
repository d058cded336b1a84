-- The key table of crypto-shredding: one data key per order, stored only
-- wrapped by a master key (BOOKING_MASTER_KEYS). The order's payment token
-- and provider request bytes are sealed under it in the order stream; once
-- the row is deleted they are unreadable for good. See commands/keys.go for
-- who writes and deletes rows, and commands/keystore for the SQL.

-- +goose Up

-- order_keys:
--   order_id       the order (the target id of its POST /v1/orders intent);
--   master_key_id  the master key that wrapped the data key (rotation: a
--                  row stays readable while its master key is configured);
--   wrapped_key    the data key, AES-256-GCM under the master key, bound to
--                  the order id;
--   held_token     the payment token sealed under the data key, written
--                  before the intent is recorded and dropped (NULL) once the
--                  order stream carries it (OrderPlaced);
--   shred_at       when the row is deleted at the latest (database clock):
--                  the intent's retention at first, the order's payment
--                  deadline once placed. Final orders are deleted earlier.
CREATE TABLE order_keys (
    order_id      uuid        PRIMARY KEY,
    master_key_id text        NOT NULL,
    wrapped_key   bytea       NOT NULL,
    held_token    bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    shred_at      timestamptz NOT NULL
);
CREATE INDEX order_keys_shred_at ON order_keys (shred_at);

-- +goose Down
DROP TABLE order_keys;
