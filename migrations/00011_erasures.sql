-- Erasure as a fact (see commands/erasure.go). Deleting an order's data key
-- (crypto-shredding) leaves, in the same statement, a row here: the erasure
-- still to be recorded in the order's stream (PaymentSecretsShredded). The
-- payment reconciler records each and then deletes its row, so a crash at
-- any point neither loses an erasure (the row survives until the event is
-- in the stream) nor records one early (the row exists only once the key is
-- gone). The orders read model shows when an order's secrets went.

-- +goose Up

-- order_key_erasures:
--   order_id     the order whose key was deleted;
--   shredded_at  when it was deleted (database clock), the event's
--                shredded_at.
CREATE TABLE order_key_erasures (
    order_id    uuid        PRIMARY KEY,
    shredded_at timestamptz NOT NULL DEFAULT now()
);

-- rm_orders.secrets_shredded_at: the shredded_at of the order's
-- PaymentSecretsShredded (NULL until it is recorded; rows written before this
-- migration get it from `booking projections rebuild orders`).
ALTER TABLE rm_orders ADD COLUMN secrets_shredded_at timestamptz;

-- +goose Down
ALTER TABLE rm_orders DROP COLUMN secrets_shredded_at;
DROP TABLE order_key_erasures;
