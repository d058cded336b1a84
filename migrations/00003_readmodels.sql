-- Read models: the tables of the projectors in package
-- projections and their checkpoints. See projections/doc.go.
--
-- Rules every read-model table follows:
--   * each row derives from ONE stream; `revision` is the 0-based revision of
--     the last event of that stream applied to the row, and an event at or
--     below it is a no-op (never an overwrite);
--   * times come from event metadata (occurred_at), never from now(), so a
--     rebuild from the log equals the live tables row for row;
--   * secrets (the payment token, the provider request body) never appear.
-- `booking projections rebuild` builds copies of these tables (CREATE TABLE
-- ... (LIKE t INCLUDING ALL)) named t_rebuild_<n> and renames them into place
-- together with the checkpoint in one transaction, so keep every table
-- self-contained: no foreign keys, no views, no sequences. fillfactor leaves
-- room on each page so that updates of a row stay HOT (no index writes).

-- +goose Up

-- projection_checkpoints holds each projector's position in the log
-- (eventstore.Position: commit = xid8 of the appending transaction, prepare
-- = sequence). It is updated in the same transaction as the read-model rows
-- of every batch, and only when it still holds the position the batch
-- started from (a fence against a stale instance or a concurrent rebuild).
-- log_time is the latest occurred_at among the events applied so far: the
-- "log clock" the intents view measures retention against.
CREATE TABLE projection_checkpoints (
    name       text        PRIMARY KEY,
    commit_tx  bigint      NOT NULL DEFAULT 0 CHECK (commit_tx >= 0),
    prepare    bigint      NOT NULL DEFAULT 0 CHECK (prepare >= 0),
    log_time   timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    rebuilt_at timestamptz
);

-- projection_rebuild_seq numbers the fresh tables of a rebuild.
CREATE SEQUENCE projection_rebuild_seq;

-- ---- projector "orders" (order streams) --------------------------------

-- rm_orders: one row per order stream. charge_id is the charge that paid
-- the order (the first succeeded charge while pending or cancelling);
-- refunds maps every charge id with a requested refund to "requested" or
-- "succeeded" (redundant charges included). payment_status follows the
-- API's payment view: refunded / refund_pending / succeeded once the paying
-- charge is known, else the last attempt's outcome, else pending.
-- unknown_since is the occurred_at of the current attempt's
-- PaymentOutcomeUnknown while that attempt has no other outcome (the age
-- basis of unknown outcomes). ticket_ids (a JSON array) are the tickets
-- issued by OrderConfirmed; they are valid only while status is confirmed.
CREATE TABLE rm_orders (
    id               uuid        PRIMARY KEY,
    actor            text        NOT NULL,
    reservation_id   uuid        NOT NULL,
    show_id          uuid        NOT NULL,
    intent           text        NOT NULL,
    status           text        NOT NULL,
    fail_reason      text        NOT NULL DEFAULT '',
    review_reason    text        NOT NULL DEFAULT '',
    quantity         integer     NOT NULL,
    amount           bigint      NOT NULL,
    currency         text        NOT NULL,
    payment_deadline timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    last_outcome     text        NOT NULL DEFAULT '',
    unknown_since    timestamptz,
    charge_id        text        NOT NULL DEFAULT '',
    refunds          jsonb       NOT NULL DEFAULT '{}',
    payment_status   text        GENERATED ALWAYS AS (
        CASE
            WHEN charge_id <> '' THEN
                CASE refunds ->> charge_id WHEN 'succeeded' THEN 'refunded'
                                           WHEN 'requested' THEN 'refund_pending'
                                           ELSE 'succeeded' END
            WHEN last_outcome <> '' THEN last_outcome
            ELSE 'pending'
        END) STORED,
    ticket_count     integer     NOT NULL DEFAULT 0,
    ticket_ids       jsonb       NOT NULL DEFAULT '[]',
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    revision         bigint      NOT NULL CHECK (revision >= 0)
) WITH (fillfactor = 80);
-- GET /v1/orders: the actor's orders, newest first, keyset (created_at, id).
CREATE INDEX rm_orders_actor_idx ON rm_orders (actor, created_at DESC, id DESC);
-- Unknown payment outcomes, oldest first.
CREATE INDEX rm_orders_unknown_idx ON rm_orders (unknown_since) WHERE unknown_since IS NOT NULL;

-- ---- projector "reservations" (reservation streams) --------------------

CREATE TABLE rm_reservations (
    id             uuid        PRIMARY KEY,
    actor          text        NOT NULL,
    show_id        uuid        NOT NULL,
    quantity       integer     NOT NULL,
    amount         bigint      NOT NULL,
    currency       text        NOT NULL,
    expires_at     timestamptz NOT NULL,
    status         text        NOT NULL,
    order_id       text        NOT NULL DEFAULT '',
    release_reason text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    revision       bigint      NOT NULL CHECK (revision >= 0)
) WITH (fillfactor = 80);
CREATE INDEX rm_reservations_actor_idx ON rm_reservations (actor, created_at DESC, id DESC);

-- ---- projector "shows" (show streams, plus reservation streams) --------

-- rm_shows: one row per show stream. taken is the number of seats held or
-- ordered (SeatsHeld minus SeatsReleased), holds the number of live holds;
-- available = capacity - taken.
CREATE TABLE rm_shows (
    id             uuid        PRIMARY KEY,
    name           text        NOT NULL,
    starts_at      timestamptz NOT NULL,
    capacity       integer     NOT NULL,
    price_amount   bigint      NOT NULL,
    price_currency text        NOT NULL,
    taken          integer     NOT NULL DEFAULT 0,
    holds          integer     NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    revision       bigint      NOT NULL CHECK (revision >= 0)
) WITH (fillfactor = 80);
-- GET /v1/shows: keyset (starts_at, id).
CREATE INDEX rm_shows_starts_at_idx ON rm_shows (starts_at, id);

-- rm_show_reservations: one row per reservation stream (the shows
-- projector's own copy, so it never reads another read model): which show
-- and how many seats, and the reservation's status.
CREATE TABLE rm_show_reservations (
    reservation_id uuid    PRIMARY KEY,
    show_id        uuid    NOT NULL,
    quantity       integer NOT NULL,
    status         text    NOT NULL,
    revision       bigint  NOT NULL CHECK (revision >= 0)
) WITH (fillfactor = 80);

-- rm_show_sales: per show, the seats of reservations whose status is
-- ordered: an aggregate of rm_show_reservations maintained in the same
-- statement as the row it sums. ordered seats of a show = least(ordered,
-- rm_shows.taken); held = taken - that.
CREATE TABLE rm_show_sales (
    show_id uuid    PRIMARY KEY,
    ordered integer NOT NULL DEFAULT 0
) WITH (fillfactor = 80);

-- ---- projector "intents" (intent streams, plus targets' streams) -------

-- rm_intents: one row per live intent stream. A purged stream that is
-- recorded again (a higher revision) replaces the row. Rows whose
-- recorded_at is older than the intent retention measured against the log
-- clock (projection_checkpoints.log_time) are deleted, so the view follows
-- the same retention rule as the event store's purge and a rebuild equals
-- live after purges too. rejection_status is 0 until a rejection.
CREATE TABLE rm_intents (
    stream           text        PRIMARY KEY,
    actor            text        NOT NULL,
    operation        text        NOT NULL,
    target_id        text        NOT NULL,
    executor         text        NOT NULL,
    lease_until      timestamptz NOT NULL,
    takeovers        integer     NOT NULL DEFAULT 0,
    rejection_status integer     NOT NULL DEFAULT 0,
    rejection_code   text        NOT NULL DEFAULT '',
    recorded_at      timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    revision         bigint      NOT NULL CHECK (revision >= 0)
) WITH (fillfactor = 80);
CREATE INDEX rm_intents_recorded_at_idx ON rm_intents (recorded_at);

-- rm_intent_targets: one row per show, reservation or order stream with the
-- status an intent's finality depends on (show: scheduled; reservation:
-- held; order: its status).
CREATE TABLE rm_intent_targets (
    id         text        PRIMARY KEY,
    kind       text        NOT NULL,
    status     text        NOT NULL,
    updated_at timestamptz NOT NULL,
    revision   bigint      NOT NULL CHECK (revision >= 0)
) WITH (fillfactor = 80);

-- +goose Down
DROP TABLE rm_intent_targets;
DROP TABLE rm_intents;
DROP TABLE rm_show_sales;
DROP TABLE rm_show_reservations;
DROP TABLE rm_shows;
DROP TABLE rm_reservations;
DROP TABLE rm_orders;
DROP SEQUENCE projection_rebuild_seq;
DROP TABLE projection_checkpoints;
