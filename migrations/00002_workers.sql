-- Checkpoints and leases of the background workers (process manager,
-- projectors, relay). See eventstore/pgcoord (Checkpoints, Leases).

-- +goose Up

-- checkpoints holds each named log consumer's last processed position
-- (eventstore.Position: commit = xid8 of the appending transaction, prepare =
-- sequence). A consumer saves it after it has handled the events up to it.
CREATE TABLE checkpoints (
    name       text        PRIMARY KEY,
    commit_tx  bigint      NOT NULL CHECK (commit_tx >= 0),
    prepare    bigint      NOT NULL CHECK (prepare >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE checkpoints;
