-- Which event store backend wrote each stored log position. Positions are
-- not comparable across backends (PostgreSQL's are (xid8, sequence),
-- KurrentDB's transaction-file offsets), so `booking serve` refuses to start
-- on a backend other than the one that wrote a non-zero position, and says
-- what to rebuild or reset (eventstore/pgcoord CheckBackend; docs/kurrentdb.md,
-- "Switching backends").
--
-- The service sets the session setting booking.backend on every connection
-- ('postgres' or 'kurrentdb'); the trigger below stamps it on every row
-- whose position is written, so no statement that moves a checkpoint has to
-- name the backend. A session without the setting writes 'postgres' (every
-- position stored before this migration came from PostgreSQL: KurrentDB was
-- refused at start until then).

-- +goose Up
ALTER TABLE checkpoints            ADD COLUMN backend text NOT NULL DEFAULT 'postgres';
ALTER TABLE projection_checkpoints ADD COLUMN backend text NOT NULL DEFAULT 'postgres';
ALTER TABLE notify_relays          ADD COLUMN backend text NOT NULL DEFAULT 'postgres';

-- +goose StatementBegin
CREATE FUNCTION stamp_backend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.backend := coalesce(nullif(current_setting('booking.backend', true), ''), 'postgres');
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER checkpoints_backend BEFORE INSERT OR UPDATE OF commit_tx, prepare ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION stamp_backend();
CREATE TRIGGER projection_checkpoints_backend BEFORE INSERT OR UPDATE OF commit_tx, prepare ON projection_checkpoints
    FOR EACH ROW EXECUTE FUNCTION stamp_backend();
CREATE TRIGGER notify_relays_backend BEFORE INSERT OR UPDATE OF commit_tx, prepare ON notify_relays
    FOR EACH ROW EXECUTE FUNCTION stamp_backend();

-- +goose Down
DROP TRIGGER notify_relays_backend ON notify_relays;
DROP TRIGGER projection_checkpoints_backend ON projection_checkpoints;
DROP TRIGGER checkpoints_backend ON checkpoints;
DROP FUNCTION stamp_backend();
ALTER TABLE notify_relays          DROP COLUMN backend;
ALTER TABLE projection_checkpoints DROP COLUMN backend;
ALTER TABLE checkpoints            DROP COLUMN backend;
