-- Event store schema for eventstore/pgstore. See eventstore/pgstore/doc.go
-- for the design; the comments here say what each object is for.

-- +goose Up

-- streams has one row per stream that has ever had an event. Appends to a
-- stream (and Truncate) serialize on the transaction-scoped advisory lock
-- (1702261620, hashtext(name)) -- the two-int4 key space, apart from
-- single-bigint application locks; appends to different streams never wait
-- for each other (but for a rare hash collision), so group commit keeps
-- working. last_revision survives Truncate. fillfactor leaves room for HOT
-- updates of last_revision.
CREATE TABLE streams (
    name            text   PRIMARY KEY,
    last_revision   bigint NOT NULL CHECK (last_revision >= 0),
    truncate_before bigint NOT NULL DEFAULT 0 CHECK (truncate_before >= 0)
) WITH (fillfactor = 80);

-- events is the log. (tx, seq) is the commit-ordered log position: tx is the
-- appending transaction's id (xid8), seq a global sequence (unique, and
-- increasing within a transaction). Readers of the log see only events with
-- tx < pg_snapshot_xmin(pg_current_snapshot()): every transaction below that
-- horizon has finished, so no event can later appear before a position a
-- reader has passed. data and metadata are stored as the exact bytes given.
-- recorded_at is the database clock at the start of the appending
-- transaction.
CREATE TABLE events (
    tx          xid8        NOT NULL,
    seq         bigint      GENERATED ALWAYS AS IDENTITY (CACHE 32),
    stream      text        NOT NULL,
    revision    bigint      NOT NULL CHECK (revision >= 0),
    id          uuid        NOT NULL,
    type        text        NOT NULL,
    data        bytea,
    metadata    bytea,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_pkey PRIMARY KEY (tx, seq),
    CONSTRAINT events_stream_revision_key UNIQUE (stream, revision),
    CONSTRAINT events_id_key UNIQUE (id)
);

-- eventstore_append appends one batch of events to one stream in the
-- caller's transaction (one statement: autocommit callers get one round trip
-- and one transaction that never waits for the client).
--
-- p_kind is the expected revision's kind: 0 any, 1 no stream, 2 stream
-- exists, 3 exact (p_revision is then the expected last revision; ignored
-- otherwise). p_ids, p_types, p_data and p_metadata are parallel arrays, in
-- revision order, with distinct ids. p_timeout_ms (> 0) bounds every lock wait
-- (lock_timeout) and any idle time of an explicit caller transaction
-- (idle_in_transaction_session_timeout); 0 leaves the session's settings.
--
-- Result: o_status 0 = appended; o_revision is the new last revision and
-- (o_tx, o_seq) the position of the last event written. o_status 1 = already
-- appended (idempotent repeat, nothing written); o_revision and (o_tx, o_seq)
-- are those of the batch's last event as stored. o_status 2 = conflict,
-- nothing written; o_revision is the stream's last revision (-1 if it has
-- never had an event) and o_dup_* describe an id of the batch that is stored
-- elsewhere, if there is one.
--
-- Idempotency rules (KurrentDB's, with ids unique across the whole log): when
-- the expected revision does not hold, or an id of the batch is already
-- stored, the append succeeds without writing only if every id of the batch
-- is stored in this stream, and for Exact(n) at revisions n+1.., in order,
-- for NoStream at 0.., in order, for Any and StreamExists anywhere in the
-- stream. Anything else is a conflict.

-- +goose StatementBegin
CREATE FUNCTION eventstore_append(
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

-- eventstore_truncate deletes the events of p_stream with a revision below
-- p_before (capped at last revision + 1) and records the bound in
-- streams.truncate_before, which only grows. The stream's last revision is
-- kept. It serializes with appends on the stream's lock. Returns the stream's
-- truncate_before afterwards, or NULL if the stream has never had an event
-- (then nothing is recorded).

-- +goose StatementBegin
CREATE FUNCTION eventstore_truncate(p_stream text, p_before bigint)
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

-- +goose Down
DROP FUNCTION eventstore_truncate(text, bigint);
DROP FUNCTION eventstore_append(text, smallint, bigint, uuid[], text[], bytea[], bytea[], integer);
DROP TABLE events;
DROP TABLE streams;
