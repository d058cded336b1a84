-- eventstore_wrote reports whether the current transaction appended any of
-- the events p_ids. A key-table write that joins a unit of work
-- (commands/keystore, Units) guards itself with it when it must happen with
-- the unit's events only, never with a repeat of the unit: a unit whose
-- answer was lost is repeated byte for byte to learn its outcome, and when
-- the first try committed, the repeat finds its events stored by that
-- earlier transaction and appends nothing. The creation of an order's key
-- is such a write: by the time of the repeat the order may have ended and
-- its key been deleted, and a repeat must not make it again.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION eventstore_wrote(p_ids uuid[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM events WHERE id = ANY (p_ids) AND tx = pg_current_xact_id())
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION eventstore_wrote(uuid[]);
