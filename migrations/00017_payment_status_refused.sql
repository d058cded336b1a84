-- rm_orders.payment_status follows the API's payment view (cmd/booking's
-- viewOrder): a paying charge whose refund the provider refused
-- (RefundRefused: refund_backlog marks it "refused", the refund is no
-- longer sent, the order is in needs_review) is "succeeded" — the charge
-- stands — not "refund_pending". A generated column's expression cannot be
-- altered before PostgreSQL 17, so the column is dropped and added again
-- (the table is rewritten once, under an exclusive lock). Refunds refused
-- before migration 00006 have no backlog entry until `booking projections
-- rebuild orders`.

-- +goose Up
ALTER TABLE rm_orders
    DROP COLUMN payment_status,
    ADD COLUMN payment_status text GENERATED ALWAYS AS (
        CASE
            WHEN charge_id <> '' THEN
                CASE
                    WHEN refunds ->> charge_id = 'succeeded' THEN 'refunded'
                    WHEN refunds ->> charge_id = 'requested'
                         AND (refund_backlog -> charge_id ->> 'refused') IS DISTINCT FROM 'true' THEN 'refund_pending'
                    ELSE 'succeeded'
                END
            WHEN last_outcome <> '' THEN last_outcome
            ELSE 'pending'
        END) STORED;

-- +goose Down
ALTER TABLE rm_orders
    DROP COLUMN payment_status,
    ADD COLUMN payment_status text GENERATED ALWAYS AS (
        CASE
            WHEN charge_id <> '' THEN
                CASE refunds ->> charge_id WHEN 'succeeded' THEN 'refunded'
                                           WHEN 'requested' THEN 'refund_pending'
                                           ELSE 'succeeded' END
            WHEN last_outcome <> '' THEN last_outcome
            ELSE 'pending'
        END) STORED;
