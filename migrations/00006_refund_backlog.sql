-- The refund backlog of the orders read model, for the metrics
-- booking_refunds_pending, booking_refund_oldest_pending_age_seconds,
-- booking_refunds_in_review and booking_orders_needs_review. Written by the
-- "orders" projector (projections/readmodels.go) like every other column.

-- +goose Up

-- refund_backlog maps the charge id of every refund requested and not
-- succeeded to {"requested_at": occurred_at of its RefundRequested,
-- "refused": true once the provider refused it (RefundRefused: it does not
-- know the charge)}; an entry leaves when RefundSucceeded arrives.
-- refunds_pending counts the entries not refused (the refunds still sent),
-- refund_pending_since is the oldest requested_at among them (NULL when
-- none), refunds_refused counts the refused ones (their orders are in
-- needs_review until an operator acts).
ALTER TABLE rm_orders
    ADD COLUMN refund_backlog       jsonb       NOT NULL DEFAULT '{}',
    ADD COLUMN refunds_pending      integer     NOT NULL DEFAULT 0,
    ADD COLUMN refund_pending_since timestamptz,
    ADD COLUMN refunds_refused      integer     NOT NULL DEFAULT 0;

-- Rows written before this migration: every refund still "requested" is
-- pending since the row's last update (a lower bound of its age; `booking
-- projections rebuild orders` gives the exact times).
UPDATE rm_orders o
SET refund_backlog       = b.backlog,
    refunds_pending      = b.n,
    refund_pending_since = o.updated_at
FROM (SELECT r.id, count(*)::integer AS n,
             jsonb_object_agg(e.key, jsonb_build_object('requested_at', to_jsonb(r.updated_at))) AS backlog
      FROM rm_orders r, jsonb_each_text(r.refunds) e
      WHERE e.value = 'requested'
      GROUP BY r.id) b
WHERE o.id = b.id;

-- The metrics' scans: pending refunds oldest first, refused refunds, orders
-- in review.
CREATE INDEX rm_orders_refund_pending_idx ON rm_orders (refund_pending_since) WHERE refund_pending_since IS NOT NULL;
CREATE INDEX rm_orders_refunds_refused_idx ON rm_orders (refunds_refused) WHERE refunds_refused > 0;
CREATE INDEX rm_orders_needs_review_idx ON rm_orders (id) WHERE status = 'needs_review';

-- +goose Down
DROP INDEX rm_orders_needs_review_idx;
DROP INDEX rm_orders_refunds_refused_idx;
DROP INDEX rm_orders_refund_pending_idx;
ALTER TABLE rm_orders
    DROP COLUMN refunds_refused,
    DROP COLUMN refund_pending_since,
    DROP COLUMN refunds_pending,
    DROP COLUMN refund_backlog;
