-- A cheaper append (see eventstore/pgstore/doc.go, "Append", and
-- ARCHITECTURE.md, "Performance"). Measured: eventstore_append's cost was
-- its writes, not its logic. It wrote the events row with its three index
-- entries and, for every append, upserted the stream's row in streams
-- (another heap tuple, another entry in streams_pkey, and the speculative
-- insertion of ON CONFLICT): six writes for a one-event append to a new
-- stream, against two for a plain one-row insert.
--
-- From here on an append writes only its events. A stream's last revision
-- is its newest event's (one backward probe of events_stream_revision_key);
-- streams keeps a row only for a stream that has been truncated, holding
-- the truncation point and the last revision at that time, which survives
-- when every event is gone (a later append must still expect it). So:
--
--   last revision  = greatest(max(events.revision of the stream),
--                             streams.last_revision)    NULL: never had an event
--   live events    = the stream's rows in events (truncation deletes the
--                    rest), so ReadStream needs no streams row either
--
-- Rows written into streams before this migration stay valid: their
-- last_revision is never above the stream's newest event unless it was
-- truncated, and greatest() takes the larger. Nothing else changes: the same
-- signatures and results, the same advisory lock taken before the
-- transaction id, the same idempotency rules.
--
-- The per-call bound is one set_config (lock_timeout) instead of two: an
-- autocommit append is never idle in a transaction. A caller that runs the
-- function inside its own transaction passes a negative p_timeout_ms to
-- bound that transaction's idle time as well. (The bound stays per call:
-- set on the pool's sessions, lock_timeout would also cut the waits of the
-- service's other statements on the same pool, such as pgcoord's
-- pg_advisory_lock; the measured cost of the set_config is small.)
--
-- Down restores the old functions and writes the streams rows the new ones
-- did not (one per stream with events), so the old code finds every stream.

-- +goose Up

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION eventstore_append(
    p_stream     text,
    p_kind       smallint,
    p_revision   bigint,
    p_ids        uuid[],
    p_types      text[],
    p_data       bytea[],
    p_metadata   bytea[],
    p_timeout_ms integer,
    OUT o_status       smallint,
    OUT o_revision     bigint,
    OUT o_tx           xid8,
    OUT o_seq          bigint,
    OUT o_dup_id       uuid,
    OUT o_dup_stream   text,
    OUT o_dup_revision bigint
)
LANGUAGE plpgsql VOLATILE
-- Every statement below has an index path. Without this, plans cached while
-- the tables were small (seq scans) would stay cached as they grow.
SET enable_seqscan = off
AS $$
DECLARE
    v_n      integer := cardinality(p_ids);
    v_last   bigint;
    v_exists boolean;
    v_holds  boolean;
    v_stored boolean;
    v_here   integer;
    v_placed boolean;
    v_base   bigint;
BEGIN
    IF v_n IS NULL OR v_n = 0
       OR cardinality(p_types) IS DISTINCT FROM v_n
       OR cardinality(p_data) IS DISTINCT FROM v_n
       OR cardinality(p_metadata) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'eventstore_append: % ids, % types, % data, % metadata: want the same number, at least one',
            v_n, cardinality(p_types), cardinality(p_data), cardinality(p_metadata)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_timeout_ms > 0 THEN
        PERFORM set_config('lock_timeout', p_timeout_ms::text, true);
    ELSIF p_timeout_ms < 0 THEN -- an explicit caller transaction: bound its idle time too
        PERFORM set_config('lock_timeout', (-p_timeout_ms)::text, true),
                set_config('idle_in_transaction_session_timeout', (-p_timeout_ms)::text, true);
    END IF;

    -- Appends to this stream serialize on this lock. It must come before
    -- anything that assigns the transaction its id (tx): taken in lock order,
    -- tx order is revision order within the stream. (A row lock would not do:
    -- FOR UPDATE assigns the id before it waits, so a waiter could get a lower
    -- tx than the holder and land before it in the log.)
    PERFORM pg_advisory_xact_lock(1702261620, hashtext(p_stream));

    -- The stream's last revision (its newest event, or the one a
    -- truncation recorded if that is higher: NULL if it never had an event)
    -- and whether an id of the batch is stored, read in one snapshot taken
    -- under the lock.
    SELECT greatest((SELECT max(e.revision) FROM events e WHERE e.stream = p_stream),
                    (SELECT s.last_revision FROM streams s WHERE s.name = p_stream)),
           EXISTS (SELECT 1 FROM events e WHERE e.id = ANY (p_ids))
      INTO v_last, v_stored;
    v_exists := v_last IS NOT NULL;
    v_last := coalesce(v_last, -1);
    v_holds := CASE p_kind
                   WHEN 0 THEN true
                   WHEN 1 THEN NOT v_exists
                   WHEN 2 THEN v_exists
                   ELSE v_last = p_revision
               END;

    IF v_holds AND NOT v_stored THEN
        o_tx := pg_current_xact_id(); -- assigned here, under the lock
        WITH ins AS (
            INSERT INTO events (tx, stream, revision, id, type, data, metadata)
            SELECT o_tx, p_stream, v_last + u.ord, u.id, u.type, u.data, u.metadata
            FROM unnest(p_ids, p_types, p_data, p_metadata) WITH ORDINALITY AS u (id, type, data, metadata, ord)
            RETURNING seq
        )
        SELECT max(seq) INTO o_seq FROM ins;
        o_status := 0;
        o_revision := v_last + v_n;
        RETURN;
    END IF;

    -- Nothing is written from here on. Is the batch already stored where the
    -- expected revision puts it?
    v_base := CASE p_kind WHEN 1 THEN 0 WHEN 3 THEN p_revision + 1 END;
    SELECT count(*) FILTER (WHERE e.stream = p_stream),
           coalesce(bool_and(e.revision = v_base + u.ord - 1), true)
      INTO v_here, v_placed
      FROM unnest(p_ids) WITH ORDINALITY AS u (id, ord)
      JOIN events e ON e.id = u.id;
    IF v_here = v_n AND (v_base IS NULL OR v_placed) THEN
        SELECT 1, e.revision, e.tx, e.seq
          INTO o_status, o_revision, o_tx, o_seq
          FROM events e WHERE e.id = p_ids[v_n];
        RETURN;
    END IF;

    o_status := 2;
    o_revision := v_last;
    SELECT e.id, e.stream, e.revision
      INTO o_dup_id, o_dup_stream, o_dup_revision
      FROM events e
     WHERE e.id = ANY (p_ids) AND e.stream <> p_stream
     LIMIT 1;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION eventstore_truncate(p_stream text, p_before bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
DECLARE
    v_old    bigint;
    v_last   bigint;
    v_before bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(1702261620, hashtext(p_stream));
    SELECT coalesce(s.truncate_before, 0),
           greatest((SELECT max(e.revision) FROM events e WHERE e.stream = p_stream), s.last_revision)
      INTO v_old, v_last
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN streams s ON s.name = p_stream;
    IF v_last IS NULL THEN
        RETURN NULL;
    END IF;
    v_before := greatest(v_old, least(p_before, v_last + 1));
    IF v_before > v_old THEN
        INSERT INTO streams (name, last_revision, truncate_before) VALUES (p_stream, v_last, v_before)
        ON CONFLICT (name) DO UPDATE
           SET last_revision = excluded.last_revision, truncate_before = excluded.truncate_before;
        DELETE FROM events WHERE stream = p_stream AND revision >= v_old AND revision < v_before;
    END IF;
    RETURN v_before;
END;
$$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION eventstore_append(
    p_stream     text,
    p_kind       smallint,
    p_revision   bigint,
    p_ids        uuid[],
    p_types      text[],
    p_data       bytea[],
    p_metadata   bytea[],
    p_timeout_ms integer,
    OUT o_status       smallint,
    OUT o_revision     bigint,
    OUT o_tx           xid8,
    OUT o_seq          bigint,
    OUT o_dup_id       uuid,
    OUT o_dup_stream   text,
    OUT o_dup_revision bigint
)
LANGUAGE plpgsql VOLATILE
-- Every statement below has an index path. Without this, plans cached while
-- the tables were small (seq scans) would stay cached as they grow.
SET enable_seqscan = off
AS $$
DECLARE
    v_n      integer := cardinality(p_ids);
    v_last   bigint;
    v_exists boolean;
    v_holds  boolean;
    v_stored boolean;
    v_here   integer;
    v_placed boolean;
    v_base   bigint;
BEGIN
    IF v_n IS NULL OR v_n = 0
       OR cardinality(p_types) IS DISTINCT FROM v_n
       OR cardinality(p_data) IS DISTINCT FROM v_n
       OR cardinality(p_metadata) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'eventstore_append: % ids, % types, % data, % metadata: want the same number, at least one',
            v_n, cardinality(p_types), cardinality(p_data), cardinality(p_metadata)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_timeout_ms > 0 THEN
        PERFORM set_config('lock_timeout', p_timeout_ms::text, true),
                set_config('idle_in_transaction_session_timeout', p_timeout_ms::text, true);
    END IF;

    -- Appends to this stream serialize on this lock. It must come before
    -- anything that assigns the transaction its id (tx): taken in lock order,
    -- tx order is revision order within the stream. (A row lock would not do:
    -- FOR UPDATE assigns the id before it waits, so a waiter could get a lower
    -- tx than the holder and land before it in the log.)
    PERFORM pg_advisory_xact_lock(1702261620, hashtext(p_stream));

    -- The stream's state and whether an id of the batch is stored, read in
    -- one snapshot taken under the lock.
    SELECT s.last_revision, EXISTS (SELECT 1 FROM events e WHERE e.id = ANY (p_ids))
      INTO v_last, v_stored
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN streams s ON s.name = p_stream;
    v_exists := v_last IS NOT NULL;
    v_last := coalesce(v_last, -1);
    v_holds := CASE p_kind
                   WHEN 0 THEN true
                   WHEN 1 THEN NOT v_exists
                   WHEN 2 THEN v_exists
                   ELSE v_last = p_revision
               END;

    IF v_holds AND NOT v_stored THEN
        o_tx := pg_current_xact_id(); -- assigned here, under the lock
        WITH st AS (
            INSERT INTO streams (name, last_revision) VALUES (p_stream, v_last + v_n)
            ON CONFLICT (name) DO UPDATE SET last_revision = excluded.last_revision
        ), ins AS (
            INSERT INTO events (tx, stream, revision, id, type, data, metadata)
            SELECT o_tx, p_stream, v_last + u.ord, u.id, u.type, u.data, u.metadata
            FROM unnest(p_ids, p_types, p_data, p_metadata) WITH ORDINALITY AS u (id, type, data, metadata, ord)
            RETURNING seq
        )
        SELECT max(seq) INTO o_seq FROM ins;
        o_status := 0;
        o_revision := v_last + v_n;
        RETURN;
    END IF;

    -- Nothing is written from here on. Is the batch already stored where the
    -- expected revision puts it?
    v_base := CASE p_kind WHEN 1 THEN 0 WHEN 3 THEN p_revision + 1 END;
    SELECT count(*) FILTER (WHERE e.stream = p_stream),
           coalesce(bool_and(e.revision = v_base + u.ord - 1), true)
      INTO v_here, v_placed
      FROM unnest(p_ids) WITH ORDINALITY AS u (id, ord)
      JOIN events e ON e.id = u.id;
    IF v_here = v_n AND (v_base IS NULL OR v_placed) THEN
        SELECT 1, e.revision, e.tx, e.seq
          INTO o_status, o_revision, o_tx, o_seq
          FROM events e WHERE e.id = p_ids[v_n];
        RETURN;
    END IF;

    o_status := 2;
    o_revision := v_last;
    SELECT e.id, e.stream, e.revision
      INTO o_dup_id, o_dup_stream, o_dup_revision
      FROM events e
     WHERE e.id = ANY (p_ids) AND e.stream <> p_stream
     LIMIT 1;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION eventstore_truncate(p_stream text, p_before bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
DECLARE
    v_old    bigint;
    v_last   bigint;
    v_before bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(1702261620, hashtext(p_stream));
    SELECT truncate_before, last_revision INTO v_old, v_last
      FROM streams WHERE name = p_stream;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_before := greatest(v_old, least(p_before, v_last + 1));
    IF v_before > v_old THEN
        UPDATE streams SET truncate_before = v_before WHERE name = p_stream;
        DELETE FROM events WHERE stream = p_stream AND revision >= v_old AND revision < v_before;
    END IF;
    RETURN v_before;
END;
$$;
-- +goose StatementEnd

INSERT INTO streams (name, last_revision)
SELECT e.stream, max(e.revision) FROM events e GROUP BY e.stream
ON CONFLICT (name) DO UPDATE SET last_revision = greatest(streams.last_revision, excluded.last_revision);
