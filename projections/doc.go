// Package projections builds the PostgreSQL read models of the booking
// service from the event log, and reads them for the list
// endpoints and operators. The NATS relay lives in projections/notify.
//
// # Read models
//
// Four projections, each a set of tables with one checkpoint (table
// projection_checkpoints, schema in migrations/00003_readmodels.sql):
//
//   - orders: rm_orders, one row per order stream (status, amount, tickets,
//     payment status and charge id, unknown payment outcome since);
//   - reservations: rm_reservations, one row per reservation stream;
//   - shows: rm_shows (show streams: capacity, seats taken), plus
//     rm_show_reservations and its per-show aggregate rm_show_sales
//     (reservation streams: which seats are ordered), so that
//     capacity = available + held + ordered;
//   - intents: rm_intents (intent streams) and rm_intent_targets (the
//     status of each intent's target, from show, reservation and order
//     streams); pending intents are read by joining the two.
//
// Every row derives from one stream and carries that stream's revision; an
// event at or below it is a no-op, so a redelivered or replayed event never
// changes a row. Projectors never read other read models and never call
// now(): times come from event metadata (occurred_at, or the store's
// recorded_at when it is missing), so Rebuild produces exactly the rows the
// live projector produced. Events are decoded through the domain's event
// registry into the domain's types, every schema version included; no row
// holds a private part of an event (the sealed payment token, the
// provider request).
//
// # Transactions and checkpoints
//
// A Projector follows the log with a catch-up subscription from its
// checkpoint. Each batch of events (at most WithMaxBatch, default 500) is
// applied in ONE PostgreSQL transaction together with the checkpoint:
//
//  1. BEGIN, then one pgx.Batch (one round trip) with the checkpoint update
//     and one SELECT per table of the rows the batch's events touch;
//  2. the events are folded into those rows in Go, in log order, with the
//     revision rule above (so duplicates and replays inside one batch are
//     no-ops too);
//  3. one pgx.Batch with one multi-row upsert per table of the changed rows
//     (guarded again by "revision < excluded.revision") and follow-ups
//     (the intents' retention), then COMMIT.
//
// The checkpoint update is a fence: it matches only if the checkpoint still
// holds the position the batch started from, so a stale instance (one that
// lost its lock) or a rebuild that swapped tables in meanwhile makes the
// transaction roll back and the projector reload; it also locks the
// checkpoint row, so rows read after it are the projection's latest. A
// crash anywhere before COMMIT leaves nothing; after it, the batch and its
// checkpoint are both there. Transactions are kept short (a few
// milliseconds) because an open writing transaction holds back the readable
// horizon of the log for every reader.
//
// A live projector (NewProjector) also gathers what arrives within its
// linger into one batch (WithLinger), keeps the rows its own commits wrote
// (rowCache), and does not load the rows of streams the batch opens
// (rowSet.needOpened). A batch that then loads nothing skips BEGIN and
// COMMIT: one pgx.Batch in one implicit transaction, whose checkpoint fence
// fails the whole batch when it does not match (sqlFenceOrFail). See
// ARCHITECTURE.md, "Performance".
//
// An event a projection cannot decode stops its projector with an error
// (the caller logs it and restarts it, which fails again) rather than being
// skipped: a skipped event would leave the read model silently wrong.
//
// # Intent retention
//
// Intent streams are purged after the intent retention. The intents view
// follows the same rule without a clock: it deletes the rows of intents
// recorded more than the retention before the log clock (the latest
// occurred_at applied, kept in the checkpoint), the cutoff truncated to a
// minute, whenever that cutoff moves (pruneCutoff), so the rows of purged
// streams are gone from the live view as from a rebuild. (A purge whose
// stream's expiry no later event has passed yet still shows in the live
// view until one does.)
//
// # Rebuild
//
// Rebuild fills fresh tables (t_rebuild_<n>) from the whole log in bulk:
// it reads the log once for all the projections it rebuilds, folds each
// page into rows kept in memory across the fill (at most
// RebuildOptions.MaxRows per table; rows the log has stopped touching are
// written out early, and read back by key if it touches them again), writes
// them with COPY and builds the indexes after the fill. It then takes the
// live projectors' locks (through RebuildOptions.Lock: a live projector
// yields its lock when it sees a waiter, see WithYield), catches up to the
// head the way the live projectors apply batches, and renames the fresh
// tables into place with the checkpoints, in one transaction. The same
// folds build live and rebuilt rows, so they are equal. On any failure it
// drops the fresh tables and swaps nothing.
//
// Types here are safe for concurrent use unless their doc says otherwise.
package projections
