-- An atomic append to several streams (eventstore.Store.AppendMulti; see
-- eventstore/pgstore/doc.go, "AppendMulti"): eventstore_append_multi does in
-- one statement, and so in one transaction with one transaction id (xid8),
-- what eventstore_append does for one stream, for every part of the call.
--
-- p_streams, p_kinds and p_revisions hold one entry per part: its stream
-- (distinct), its expected revision's kind (0 any, 1 no stream, 2 stream
-- exists, 3 exact) and, for exact, the expected last revision. p_counts is
-- the number of events of each part (at least one); p_ids, p_types, p_data
-- and p_metadata hold the events of every part, part after part, in
-- revision order, with distinct ids. p_timeout_ms is eventstore_append's.
--
-- It takes the advisory lock of every part's stream in one order for every
-- caller (ascending key), so two calls sharing streams never wait for each
-- other in a cycle, and all of them before anything assigns the transaction
-- its id: the log's commit order stays each stream's revision order. Then it
-- reads every stream's last revision and whether an id of the call is
-- stored, in one snapshot; when every part's expected revision holds and no
-- id is stored (the common case) it inserts every event in one statement.
-- Otherwise it decides each part as eventstore_append does: to be written
-- (the expected revision holds and none of its ids is stored), a repeat
-- (every id of the part stored in its stream where the expected revision
-- puts them: nothing written), or a conflict. The first conflicting part
-- raises SQLSTATE EV409, so nothing of the call, and nothing else of its
-- transaction, is written; the error's DETAIL is a JSON object:
--   {"part": 1-based index, "actual": the stream's last revision (-1: never
--    had an event), "dup_id", "dup_stream", "dup_revision": an id of the
--    part stored in another stream, or null}
--
-- Result: one row per part, in order. o_status 0 = appended: o_revision is
-- the stream's new last revision, (o_tx, o_seq) the position of the part's
-- last event. o_status 1 = repeat: the stored revision and position of the
-- part's last event.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION eventstore_append_multi(
    p_streams    text[],
    p_kinds      smallint[],
    p_revisions  bigint[],
    p_counts     integer[],
    p_ids        uuid[],
    p_types      text[],
    p_data       bytea[],
    p_metadata   bytea[],
    p_timeout_ms integer
)
RETURNS TABLE (o_status smallint, o_revision bigint, o_tx xid8, o_seq bigint)
LANGUAGE plpgsql VOLATILE
-- Every statement below has an index path (see eventstore_append).
SET enable_seqscan = off
AS $$
DECLARE
    v_parts  integer := cardinality(p_streams);
    v_n      integer := cardinality(p_ids);
    v_first  integer[] := '{}';  -- index of each part's first event
    v_part   integer[] := '{}';  -- each event's part
    v_last   bigint[];           -- each stream's last revision, NULL: never had an event
    v_stored boolean;            -- an id of the call is stored
    v_holds  boolean[] := '{}';  -- each part's expected revision holds
    v_write  boolean[] := '{}';  -- each part is to be written
    v_status smallint[] := '{}'; -- each repeated part's result
    v_rev    bigint[] := '{}';
    v_txs    xid8[] := '{}';
    v_seqs   bigint[] := '{}';
    v_ins    bigint[];           -- the seq of each event written, in event order
    v_tx     xid8;
    v_key    integer;
    v_k      integer;
    v_at     integer := 0;
    v_ids    uuid[];
    v_here   integer;
    v_placed boolean;
    v_base   bigint;
    r_rev    bigint;
    r_tx     xid8;
    r_seq    bigint;
    v_dup_id uuid;
    v_dup_st text;
    v_dup_rv bigint;
BEGIN
    IF v_parts IS NULL OR v_parts = 0
       OR cardinality(p_kinds) IS DISTINCT FROM v_parts
       OR cardinality(p_revisions) IS DISTINCT FROM v_parts
       OR cardinality(p_counts) IS DISTINCT FROM v_parts THEN
        RAISE EXCEPTION 'eventstore_append_multi: % streams, % kinds, % revisions, % counts: want one of each per part, at least one part',
            v_parts, cardinality(p_kinds), cardinality(p_revisions), cardinality(p_counts)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_k IN 1 .. v_parts LOOP
        IF p_counts[v_k] IS NULL OR p_counts[v_k] < 1 THEN
            RAISE EXCEPTION 'eventstore_append_multi: part % has % events, want at least one', v_k, p_counts[v_k]
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_first[v_k] := cardinality(v_part) + 1;
        v_part := v_part || array_fill(v_k, ARRAY[p_counts[v_k]]);
    END LOOP;
    IF v_n IS DISTINCT FROM cardinality(v_part)
       OR cardinality(p_types) IS DISTINCT FROM v_n
       OR cardinality(p_data) IS DISTINCT FROM v_n
       OR cardinality(p_metadata) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'eventstore_append_multi: counts add up to % events, but % ids, % types, % data, % metadata',
            cardinality(v_part), v_n, cardinality(p_types), cardinality(p_data), cardinality(p_metadata)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_timeout_ms > 0 THEN
        PERFORM set_config('lock_timeout', p_timeout_ms::text, true);
    ELSIF p_timeout_ms < 0 THEN -- an explicit caller transaction: bound its idle time too
        PERFORM set_config('lock_timeout', (-p_timeout_ms)::text, true),
                set_config('idle_in_transaction_session_timeout', (-p_timeout_ms)::text, true);
    END IF;

    -- The streams' locks, in ascending key order, before the transaction id.
    FOR v_key IN SELECT DISTINCT hashtext(s.name) FROM unnest(p_streams) AS s (name) ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(1702261620, v_key);
    END LOOP;

    -- Every stream's last revision, and whether an id of the call is
    -- stored, in one snapshot taken under the locks.
    SELECT array_agg(greatest((SELECT max(e.revision) FROM events e WHERE e.stream = p.name),
                              (SELECT s.last_revision FROM streams s WHERE s.name = p.name)) ORDER BY p.i),
           EXISTS (SELECT 1 FROM events e WHERE e.id = ANY (p_ids))
      INTO v_last, v_stored
      FROM unnest(p_streams) WITH ORDINALITY AS p (name, i);
    FOR v_k IN 1 .. v_parts LOOP
        v_holds[v_k] := CASE p_kinds[v_k]
                            WHEN 0 THEN true
                            WHEN 1 THEN v_last[v_k] IS NULL
                            WHEN 2 THEN v_last[v_k] IS NOT NULL
                            ELSE coalesce(v_last[v_k], -1) = p_revisions[v_k]
                        END;
        v_write[v_k] := v_holds[v_k] AND NOT v_stored;
    END LOOP;

    IF v_stored OR false = ANY (v_holds) THEN
        -- Decide each part on its own: to be written, a repeat, or a conflict.
        FOR v_k IN 1 .. v_parts LOOP
            v_ids := p_ids[v_first[v_k] : v_first[v_k] + p_counts[v_k] - 1];
            v_write[v_k] := v_holds[v_k] AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ANY (v_ids));
            CONTINUE WHEN v_write[v_k];
            -- Nothing of this part is written. Is it stored where the
            -- expected revision puts it?
            v_base := CASE p_kinds[v_k] WHEN 1 THEN 0 WHEN 3 THEN p_revisions[v_k] + 1 END;
            SELECT count(*) FILTER (WHERE e.stream = p_streams[v_k]),
                   coalesce(bool_and(e.revision = v_base + u.ord - 1), true)
              INTO v_here, v_placed
              FROM unnest(v_ids) WITH ORDINALITY AS u (id, ord)
              JOIN events e ON e.id = u.id;
            IF v_here = p_counts[v_k] AND (v_base IS NULL OR v_placed) THEN
                SELECT e.revision, e.tx, e.seq INTO r_rev, r_tx, r_seq
                  FROM events e WHERE e.id = v_ids[p_counts[v_k]];
                v_status[v_k] := 1;
                v_rev[v_k] := r_rev;
                v_txs[v_k] := r_tx;
                v_seqs[v_k] := r_seq;
                CONTINUE;
            END IF;
            SELECT e.id, e.stream, e.revision
              INTO v_dup_id, v_dup_st, v_dup_rv
              FROM events e
             WHERE e.id = ANY (v_ids) AND e.stream <> p_streams[v_k]
             LIMIT 1;
            RAISE EXCEPTION 'eventstore_append_multi: part % (%): wrong expected revision (kind %, revision %), actual %',
                v_k, p_streams[v_k], p_kinds[v_k], p_revisions[v_k], coalesce(v_last[v_k], -1)
                USING ERRCODE = 'EV409',
                      DETAIL = json_build_object('part', v_k, 'actual', coalesce(v_last[v_k], -1),
                                                 'dup_id', v_dup_id, 'dup_stream', v_dup_st,
                                                 'dup_revision', v_dup_rv)::text;
        END LOOP;
    END IF;

    IF true = ANY (v_write) THEN
        v_tx := pg_current_xact_id(); -- assigned here, under every lock
        -- Rows are inserted, and take their seq, in event order.
        WITH ins AS (
            INSERT INTO events (tx, stream, revision, id, type, data, metadata)
            SELECT v_tx, p_streams[u.part], coalesce(v_last[u.part], -1) + u.ord - v_first[u.part] + 1,
                   u.id, u.type, u.data, u.metadata
            FROM unnest(p_ids, p_types, p_data, p_metadata, v_part)
                 WITH ORDINALITY AS u (id, type, data, metadata, part, ord)
            WHERE v_write[u.part]
            RETURNING seq
        )
        SELECT array_agg(ins.seq ORDER BY ins.seq) INTO v_ins FROM ins;
    END IF;

    FOR v_k IN 1 .. v_parts LOOP
        IF v_write[v_k] THEN
            v_at := v_at + p_counts[v_k];
            o_status := 0;
            o_revision := coalesce(v_last[v_k], -1) + p_counts[v_k];
            o_tx := v_tx;
            o_seq := v_ins[v_at];
        ELSE
            o_status := v_status[v_k];
            o_revision := v_rev[v_k];
            o_tx := v_txs[v_k];
            o_seq := v_seqs[v_k];
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION eventstore_append_multi(text[], smallint[], bigint[], integer[], uuid[], text[], bytea[], bytea[], integer);
