-- NATS notifications: the relay's fenced lease and checkpoint,
-- and the reference subscriber's processed set, per-entity ordering state and
-- effect table. See projections/notify/doc.go.

-- +goose Up

-- notify_relays has one row per relay name (normally one: 'notify'). The row
-- is both the relay's lease and its checkpoint, so a checkpoint update can be
-- conditional on the fencing token in one statement:
--   owner        the relay instance holding (or last holding) the lease;
--   token        the fencing token, incremented by every acquisition; a
--                checkpoint update or renewal carrying an older token matches
--                no row, so a stale relay can never move the checkpoint;
--   lease_until  end of the lease by the database clock (now() + TTL at
--                acquisition or renewal); another instance may take over once
--                now() >= lease_until;
--   (commit_tx, prepare)  the checkpoint: log position (eventstore.Position)
--                of the last event whose publish was acknowledged, together
--                with every event before it. It only moves forward.
CREATE TABLE notify_relays (
    name            text        PRIMARY KEY,
    owner           text        NOT NULL,
    token           bigint      NOT NULL CHECK (token > 0),
    lease_until     timestamptz NOT NULL,
    acquired_at     timestamptz NOT NULL DEFAULT now(),
    commit_tx       bigint      NOT NULL DEFAULT 0 CHECK (commit_tx >= 0),
    prepare         bigint      NOT NULL DEFAULT 0 CHECK (prepare >= 0),
    checkpointed_at timestamptz
);

-- notify_processed is a subscriber's processed set: the Nats-Msg-Id (event
-- id) of every message whose effect it committed, inserted in the same
-- transaction as the effect. Rows older than the subscriber's horizon are
-- pruned; after that, a late duplicate is still stopped by the per-entity
-- revision check (notify_entities), which is never pruned.
CREATE TABLE notify_processed (
    consumer     text        NOT NULL,
    msg_id       text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, msg_id)
);
CREATE INDEX notify_processed_age ON notify_processed (consumer, processed_at);

-- notify_entities holds, per subscriber and entity stream, the last applied
-- Booking-Revision: an older or equal revision is skipped, a higher one than
-- the next is a gap. Its row is locked (FOR UPDATE) while a notification of
-- the entity is applied, so concurrent subscriber instances apply one
-- entity's notifications one at a time.
CREATE TABLE notify_entities (
    consumer      text        NOT NULL,
    stream        text        NOT NULL,
    last_revision bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, stream)
);

-- notification_log is the reference subscriber's effect: one row per applied
-- notification. It deliberately has no unique key on msg_id -- it stands for
-- an arbitrary effect with no idempotency of its own, so counting its rows
-- shows whether the processed set did its job. seq is the order of
-- application.
CREATE TABLE notification_log (
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer    text        NOT NULL,
    msg_id      text        NOT NULL,
    stream      text        NOT NULL,
    revision    bigint      NOT NULL,
    event_type  text        NOT NULL,
    subject     text        NOT NULL,
    position    text        NOT NULL,
    stream_seq  bigint      NOT NULL,
    delivered   bigint      NOT NULL,
    gap         boolean     NOT NULL DEFAULT false,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_log_consumer_stream ON notification_log (consumer, stream, revision);

-- +goose Down
DROP TABLE notification_log;
DROP TABLE notify_entities;
DROP TABLE notify_processed;
DROP TABLE notify_relays;
