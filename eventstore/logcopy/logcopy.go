// Package logcopy moves an event log from one eventstore.Store to another
// (PostgreSQL to KurrentDB or back): Copy appends every event in log order
// with its id, type, data, metadata and revision; MirrorTruncations hides in
// the target what the source hides; Verify compares what each stream shows
// on both sides (counts and a digest per stream); MapPositions translates
// positions of the source's log (checkpoints) into the target's.
//
// # Idempotent, so resumable
//
// Each run of consecutive events of one stream is one append at the exact
// revision before it (NoStream for revision 0), with the source's event ids:
// appended again, it is a repeat both backends recognise and answer without
// writing. So a copy cut short (a crash, SIGKILL) is resumed by running it
// again from the start: what was copied is recognised, the rest written.
// Where the target already holds a revision the repeat cannot show (its
// events truncated there), the copy reads the target stream: an event with
// the same id at the same revision, or one the target's truncation hides,
// counts as copied; any other is a divergence, reported with its stream and
// revision.
//
// # Purged stream starts
//
// A stream whose first events were purged from the source (PostgreSQL
// deletes them; its truncation point keeps the revisions) starts in the
// source's log at a later revision. The copy writes placeholders
// (eventstore.PlaceholderType, ids derived from stream and revision) for
// the missing revisions, so the stream keeps its revisions, and
// MirrorTruncations hides them again. Digests cover the events a stream
// shows, so placeholders never count.
package logcopy

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
)

// DefaultBatch is how many events one read of the source asks for.
const DefaultBatch = 500

// DefaultWait is how long Copy (unless Options.Wait says otherwise) and
// MapPositions wait for the events a Horizon holds back.
const DefaultWait = 2 * time.Minute

// placeholderNS is the namespace of the placeholders' ids (UUID v5 of
// "stream/revision").
var placeholderNS = uuid.MustParse("8d3b1f7e-52c4-4f0e-9a4e-2b8f6d0c1a37")

// Options configure Copy.
type Options struct {
	// Batch is how many events one read of the source asks for (default
	// DefaultBatch).
	Batch int
	// Progress, if set, is called after every batch with the counts so
	// far, and while the copy waits for events the source holds back
	// (Result.HeldBack > 0).
	Progress func(Result)
	// Wait bounds the wait for the events the source holds back (default
	// DefaultWait); then Copy returns a *HeldBackError.
	Wait time.Duration
}

// Result counts what a Copy did: events read from the source, appended to
// the target, found already there (a repeat, or hidden by the target's
// truncation), placeholders written, and streams seen. HeldBack is,
// while the copy waits for them, the number of committed events of the
// source its ReadAll cannot return yet (see Horizon), and 0 otherwise.
type Result struct {
	Read, Written, Present, Placeholders int64
	Streams                              []string
	HeldBack                             int64
}

// Horizon is implemented by a store whose ReadAll returns only the events
// below a readable horizon, so that an empty page is not the end of its
// log while HorizonLag reports committed events held back (pgstore: any
// transaction still running on the server, in any database, holds back
// the events committed after it began; its horizon is the xmin of
// pg_current_snapshot(), see
// https://www.postgresql.org/docs/current/functions-info.html#FUNCTIONS-PG-SNAPSHOT).
type Horizon interface {
	HorizonLag(ctx context.Context) (pgstore.Lag, error)
}

// HeldBackError is returned when a store still held back committed events
// after the wait (Options.Wait, DefaultWait): a transaction has been
// running on its server all that time.
type HeldBackError struct {
	// Events is the number of committed events held back at the last look,
	// the oldest written Age ago.
	Events int64
	Age    time.Duration
	// Wait is how long the copy waited.
	Wait time.Duration
}

// Error says what is held back and the way out.
func (e *HeldBackError) Error() string {
	return fmt.Sprintf("logcopy: %d committed events (the oldest %s old) stayed unreadable for %s behind a transaction still running on the PostgreSQL server (pg_stat_activity lists it, with any database's): end it and run the copy again",
		e.Events, e.Age.Round(time.Second), e.Wait)
}

// waitReadable returns once store, if it is a Horizon, holds back no
// committed event: every event committed before the call is then
// returned by the ReadAll calls that follow. While it waits it calls
// waiting, if set, with the number held back. Returns a *HeldBackError
// after wait, ctx's error if ctx ends, or a wrapped error if a look fails.
func waitReadable(ctx context.Context, store eventstore.Store, wait time.Duration, waiting func(int64)) error {
	h, ok := store.(Horizon)
	if !ok {
		return nil
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		lag, err := h.HorizonLag(ctx)
		if err != nil {
			return fmt.Errorf("logcopy: look for held-back events: %w", err)
		}
		if lag.Events == 0 {
			return nil
		}
		if waiting != nil {
			waiting(lag.Events)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return &HeldBackError{Events: lag.Events, Age: lag.Age, Wait: wait}
		case <-time.After(pause):
		}
	}
}

// Copy appends every event of src's log (eventstore.Store.ReadAll, in log
// order) to dst with the same id, type, data, metadata and revision (see
// the package comment), and returns what it did, the streams sorted. It
// reads up to the end of the log: an empty page from a Horizon ends the
// copy only once it holds back nothing. Running it again is safe and
// completes a copy cut short. Returns a wrapped error if a read or an
// append fails, if dst holds other events at a stream's revisions (a
// divergence, naming the stream and revision), or a *HeldBackError if src
// held back events for longer than opts.Wait.
func Copy(ctx context.Context, src, dst eventstore.Store, opts Options) (Result, error) {
	batch, wait := opts.Batch, opts.Wait
	if batch <= 0 {
		batch = DefaultBatch
	}
	if wait <= 0 {
		wait = DefaultWait
	}
	progress := func(res Result) {
		if opts.Progress != nil {
			opts.Progress(res)
		}
	}
	var res Result
	seen := map[string]bool{}
	var pos eventstore.Position
	settled := false // src held back nothing before the last read
	for {
		page, err := src.ReadAll(ctx, pos, batch)
		if err != nil {
			return res, fmt.Errorf("logcopy: read the source after %s: %w", pos, err)
		}
		if len(page) == 0 {
			if _, ok := src.(Horizon); !ok || settled {
				break
			}
			err := waitReadable(ctx, src, wait, func(n int64) { res.HeldBack = n; progress(res) })
			res.HeldBack = 0
			if err != nil {
				return res, err
			}
			settled = true
			continue
		}
		settled = false
		if err := copyPage(ctx, dst, page, &res, seen); err != nil {
			return res, err
		}
		pos = page[len(page)-1].Position
		progress(res)
	}
	if err := copyPurged(ctx, src, dst, &res); err != nil {
		return res, err
	}
	sort.Strings(res.Streams)
	return res, nil
}

// copyPage copies a page of src's log, a run of consecutive events of one
// stream at a time, counting them in res and the streams first seen.
func copyPage(ctx context.Context, dst eventstore.Store, page []eventstore.RecordedEvent, res *Result, seen map[string]bool) error {
	for i := 0; i < len(page); {
		j := i + 1
		for j < len(page) && page[j].Stream == page[i].Stream && page[j].Revision == page[j-1].Revision+1 {
			j++
		}
		if err := copyRun(ctx, dst, page[i:j], res, 0); err != nil {
			return err
		}
		if !seen[page[i].Stream] {
			seen[page[i].Stream] = true
			res.Streams = append(res.Streams, page[i].Stream)
		}
		i = j
	}
	res.Read += int64(len(page))
	return nil
}

// PurgedStreams is implemented by a store whose truncation deletes events
// (pgstore): it lists the streams with no event left and the last revision
// each keeps, which ReadAll cannot show.
type PurgedStreams interface {
	PurgedStreams(ctx context.Context) (map[string]eventstore.Revision, error)
}

// copyPurged gives every stream src purged whole a run of placeholders up
// to its last revision in dst, so a later append there expects the same
// revision (MirrorTruncations hides them).
func copyPurged(ctx context.Context, src, dst eventstore.Store, res *Result) error {
	p, ok := src.(PurgedStreams)
	if !ok {
		return nil
	}
	purged, err := p.PurgedStreams(ctx)
	if err != nil {
		return fmt.Errorf("logcopy: %w", err)
	}
	names := make([]string, 0, len(purged))
	for name := range purged {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := writePlaceholders(ctx, dst, name, 0, int64(purged[name])); err != nil {
			return err
		}
		res.Placeholders += int64(purged[name]) + 1
		res.Streams = append(res.Streams, name)
	}
	return nil
}

// expectBefore is the expected revision of an append whose first event has
// revision rev.
func expectBefore(rev eventstore.Revision) eventstore.ExpectedRevision {
	if rev == 0 {
		return eventstore.NoStream()
	}
	return eventstore.Exact(rev - 1)
}

// toData converts recorded events back into events to append.
func toData(run []eventstore.RecordedEvent) []eventstore.EventData {
	out := make([]eventstore.EventData, len(run))
	for i, e := range run {
		out[i] = eventstore.EventData{ID: e.ID, Type: e.Type, Data: e.Data, Metadata: e.Metadata}
	}
	return out
}

// copyRun appends a run of consecutive events of one stream to dst at the
// revision before its first, handling a target that lacks earlier
// revisions (placeholders) or already holds some of the run.
func copyRun(ctx context.Context, dst eventstore.Store, run []eventstore.RecordedEvent, res *Result, depth int) error {
	if len(run) == 0 {
		return nil
	}
	if depth > 3 {
		return fmt.Errorf("logcopy: %s@%d: the target stream keeps changing", run[0].Stream, run[0].Revision)
	}
	stream, first := run[0].Stream, run[0].Revision
	_, err := dst.Append(ctx, stream, expectBefore(first), toData(run)...)
	if err == nil {
		// Written, or a repeat of a run copied before: both leave the run
		// in place.
		res.Written += int64(len(run))
		return nil
	}
	var conflict *eventstore.RevisionConflictError
	if !errors.As(err, &conflict) {
		return fmt.Errorf("logcopy: append %s@%d (%d events): %w", stream, first, len(run), err)
	}
	actual := conflict.Actual
	if actual < int64(first)-1 {
		if err := writePlaceholders(ctx, dst, stream, actual+1, int64(first)-1); err != nil {
			return err
		}
		res.Placeholders += int64(first) - 1 - actual
		return copyRun(ctx, dst, run, res, depth+1)
	}
	present := 0
	for present < len(run) && int64(run[present].Revision) <= actual {
		present++
	}
	if err := checkPresent(ctx, dst, run[:present]); err != nil {
		return err
	}
	res.Present += int64(present)
	return copyRun(ctx, dst, run[present:], res, depth+1)
}

// writePlaceholders appends placeholders for revisions from..to of stream
// (the target's last revision is from-1).
func writePlaceholders(ctx context.Context, dst eventstore.Store, stream string, from, to int64) error {
	const chunk = 500
	for lo := from; lo <= to; lo += chunk {
		hi := min(to, lo+chunk-1)
		evs := make([]eventstore.EventData, 0, hi-lo+1)
		for r := lo; r <= hi; r++ {
			evs = append(evs, eventstore.EventData{
				ID:   uuid.NewSHA1(placeholderNS, fmt.Appendf(nil, "%s/%d", stream, r)).String(),
				Type: eventstore.PlaceholderType, Data: []byte(`{}`),
			})
		}
		if _, err := dst.Append(ctx, stream, expectBefore(eventstore.Revision(lo)), evs...); err != nil {
			return fmt.Errorf("logcopy: placeholders %s@%d..%d: %w", stream, lo, hi, err)
		}
	}
	return nil
}

// checkPresent checks that dst holds the run at its revisions: the same id
// where the event is readable, or a revision its truncation hides.
func checkPresent(ctx context.Context, dst eventstore.Store, run []eventstore.RecordedEvent) error {
	if len(run) == 0 {
		return nil
	}
	stream, first := run[0].Stream, run[0].Revision
	live, err := dst.ReadStream(ctx, stream, first, len(run))
	if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
		return fmt.Errorf("logcopy: read the target's %s@%d: %w", stream, first, err)
	}
	firstLive := eventstore.Revision(math.MaxUint64) // nothing shown: all hidden
	if len(live) > 0 {
		firstLive = live[0].Revision
	} else if err == nil {
		// Live events exist only above this run.
		firstLive = run[len(run)-1].Revision + 1
	}
	byRev := map[eventstore.Revision]string{}
	for _, e := range live {
		byRev[e.Revision] = e.ID
	}
	for _, e := range run {
		id, ok := byRev[e.Revision]
		switch {
		case ok && id == e.ID:
		case !ok && e.Revision < firstLive:
			// Hidden by the target's truncation: copied before, purged there.
		default:
			return fmt.Errorf("logcopy: the target's %s@%d holds event %s, the source's is %s: the logs diverge", stream, e.Revision, id, e.ID)
		}
	}
	return nil
}

// MirrorTruncations hides in dst, for each of streams, the events src no
// longer shows: a stream src shows from revision n on is truncated before n
// in dst; one src shows nothing of (fully truncated) is truncated whole. It
// returns the number of streams truncated. Returns a wrapped error if a read
// or a truncation fails.
func MirrorTruncations(ctx context.Context, src, dst eventstore.Store, streams []string) (int, error) {
	n := 0
	for _, s := range streams {
		live, err := src.ReadStream(ctx, s, 0, 1)
		var before eventstore.Revision
		switch {
		case errors.Is(err, eventstore.ErrStreamNotFound):
			before = math.MaxInt64
		case err != nil:
			return n, fmt.Errorf("logcopy: read the source's %s: %w", s, err)
		case len(live) == 1 && live[0].Revision > 0:
			before = live[0].Revision
		default:
			continue
		}
		if err := dst.Truncate(ctx, s, before); err != nil {
			return n, fmt.Errorf("logcopy: truncate the target's %s: %w", s, err)
		}
		n++
	}
	return n, nil
}

// StreamReport is one stream of a Verify whose sides differ.
type StreamReport struct {
	Stream               string
	SourceEvents         int
	TargetEvents         int
	SourceDigest, Target string
}

// Report is the outcome of Verify: the events shown on each side and the
// streams that differ.
type Report struct {
	Streams                    int
	SourceEvents, TargetEvents int64
	Differ                     []StreamReport
}

// Verify compares, for each of streams, what src and dst show
// (eventstore.Store.ReadStream, live events only): their number and a
// SHA-256 digest of every event's revision, id, type, data and metadata.
// Returns a wrapped error if a read fails.
func Verify(ctx context.Context, src, dst eventstore.Store, streams []string) (Report, error) {
	rep := Report{Streams: len(streams)}
	for _, s := range streams {
		na, da, err := digest(ctx, src, s)
		if err != nil {
			return rep, fmt.Errorf("logcopy: verify the source's %s: %w", s, err)
		}
		nb, db, err := digest(ctx, dst, s)
		if err != nil {
			return rep, fmt.Errorf("logcopy: verify the target's %s: %w", s, err)
		}
		rep.SourceEvents += int64(na)
		rep.TargetEvents += int64(nb)
		if na != nb || da != db {
			rep.Differ = append(rep.Differ, StreamReport{Stream: s, SourceEvents: na, TargetEvents: nb, SourceDigest: da, Target: db})
		}
	}
	return rep, nil
}

// Digest returns the number of live events of stream in store and their
// SHA-256 digest (see Verify), "" for none. Returns a wrapped error if the
// read fails.
func Digest(ctx context.Context, store eventstore.Store, stream string) (int, string, error) {
	return digest(ctx, store, stream)
}

func digest(ctx context.Context, store eventstore.Store, stream string) (int, string, error) {
	evs, err := store.ReadStream(ctx, stream, 0, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	h := sha256.New()
	for _, e := range evs {
		var rev [8]byte
		binary.BigEndian.PutUint64(rev[:], e.Revision)
		h.Write(rev[:])
		for _, part := range [][]byte{[]byte(e.ID), []byte(e.Type), e.Data, e.Metadata} {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
	}
	return len(evs), hex.EncodeToString(h.Sum(nil)), nil
}
