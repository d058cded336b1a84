package commands

// This file is the intent module: every rule of the idempotency promise on
// the commands side (draft-ietf-httpapi-idempotency-key-header) lives here,
// decided by the domain's table (domain.Intent.Resolve and Await) and used by
// every state-changing use case through beginIntent and awaitExecutor:
//
//   - an intent is (actor, operation, key), its stream IntentStream(...);
//   - a new intent records IntentRecorded at no stream (or at the purged
//     stream's last revision) with the target id, executor and lease;
//   - a repeat with another fingerprint is domain.ErrKeyReused (422), naming
//     the differing fields, never their values;
//   - a repeat of a definitively rejected intent answers the same rejection;
//   - before the commit point a repeat waits (bounded) inside the executor's
//     lease, then answers InUseError (409), and after the lease takes the
//     intent over with IntentResumed, fenced by the stream revision;
//   - a definitive refusal is recorded once (reject, event id derived from
//     the intent's cause: its stream, or stream@revision for an intent
//     recorded after a purge) as a domain outcome: kind and code, no HTTP
//     status;
//   - an intent past its retention is truncated and its key starts anew.

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Request is the idempotency envelope of a state-changing request
// (draft-ietf-httpapi-idempotency-key-header): the intent is
// (Actor, Operation, Key).
type Request struct {
	// Actor is the stable actor id of the authenticated caller (never the token).
	Actor string
	// Operation is "METHOD route-template", e.g. "POST /v1/orders".
	Operation string
	// Key is the Idempotency-Key, already unescaped and validated.
	Key string
	// Wait bounds how long the request waits for a pending outcome (Prefer: wait, RFC 7240).
	Wait time.Duration
}

// Outcome describes how a request was answered. Replayed is true when the
// request repeated an existing intent (Idempotent-Replayed: true). Rejection
// is set for a definitive refusal recorded on the intent: every repeat
// answers it the same.
type Outcome struct {
	Replayed  bool
	Rejection *Rejection
}

// Rejection is a definitive refusal of an intent, answered identically to
// every repeat. It is an error whose Unwrap is the domain error, whose Kind
// fixes the answer's status. ResourceID names a resource the answer may
// show; Replayed is true when a repeat found it recorded.
type Rejection struct {
	Err        *domain.Error
	ResourceID string
	Replayed   bool
	// LegacyStatus is the HTTP status a version 1 IntentRejected stored
	// with the rejection; a repeat of it answers that status. Zero for
	// rejections recorded as domain outcomes (version 2).
	LegacyStatus int
}

// Error returns the domain error's message.
func (r *Rejection) Error() string { return r.Err.Error() }

// Unwrap returns the domain error, so errors.Is matches its sentinel.
func (r *Rejection) Unwrap() error { return r.Err }

// errRetry asks the caller to reload and decide again.
var errRetry = errors.New("commands: retry")

// intentRun is an intent as a request found or recorded it.
type intentRun struct {
	req     Request
	stream  string
	intent  domain.Intent
	rev     eventstore.Revision
	created bool // this request recorded the intent or took it over
	now     time.Time
	command map[string]any
	// opened is the revision of the intent's IntentRecorded in its
	// stream: 0 for the stream's first intent, more for an intent recorded
	// after an earlier one was purged (its key reused after the retention).
	opened eventstore.Revision
	// leaseFrom is a host instant (monotonic clock) no later than the one
	// the recorded lease was computed from, when this request recorded the
	// intent; zero for a repeat or a takeover.
	leaseFrom time.Time
	// secrets is what the order flow's prep made for a new intent: the
	// order's data key and the token sealed under it; nil otherwise.
	secrets *heldSecrets
	// lineage is what the run's events name (see correlation.go): the
	// intent's correlation id, the server id of the request serving it (or
	// for recovery, the intent's latest event) as their cause, and the
	// request behind them.
	lineage lineage
	// trace is the trace recovery continues: the one kept with the
	// intent's latest event that keeps one (tracing.go); invalid for a run
	// a request serves, which is in its own.
	trace trace.SpanContext
	// pending is the run's IntentRecorded while it is not appended yet
	// (beginDeferred): the use case's unit appends it; nil once recorded.
	pending *pendingIntent
	// waitUntil ends the bounded wait a repeat began in flight
	// (intentBegin.waitUntil); zero when it has not waited.
	waitUntil time.Time
}

// context returns ctx carrying the run's lineage, so every event the run
// appends, and every follow-up it does inline, names the intent's request,
// and for recovery continues the intent's trace.
func (r *intentRun) context(ctx context.Context) context.Context {
	if r.trace.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, r.trace)
	}
	return withLineage(ctx, r.lineage)
}

// requestLineage is the lineage of a run a request serves: the intent's
// correlation id (first, the metadata of the intent's IntentRecorded; ""
// for a new intent, whose correlation is the request's own server id, or
// its IntentRecorded's id outside a request) and the request as the cause.
func requestLineage(ctx context.Context, first *eventstore.RecordedEvent, newID string) lineage {
	ids := RequestIDsOf(ctx)
	l := lineage{correlation: ids.Server, causation: ids.Server, request: ids}
	if first != nil {
		if m, err := eventstore.DecodeMetadata(first.Metadata); err == nil && m.CorrelationID != "" {
			l.correlation = m.CorrelationID
		}
	}
	if l.correlation == "" {
		l.correlation = newID
	}
	if l.causation == "" {
		l.causation = l.correlation
	}
	return l
}

// alone reports whether no other executor can have acted on the intent yet:
// this request recorded it (not a repeat, not a takeover) and less than half
// the lease has passed on the host's monotonic clock since the instant the
// lease was computed from. A takeover needs the database clock past the
// lease's end; the reading the lease was computed from trails the database
// clock by at most its statement's way back (see clock.go), far less than
// half a lease. While alone, a request may skip reading streams it can only
// have written itself, and trust what its own appends of deterministic
// events wrote. An intent recorded after an earlier one on the same stream
// (a key reused after its retention) is never alone: see beginIntent.
func (r *intentRun) alone(lease time.Duration) bool {
	return !r.leaseFrom.IsZero() && time.Since(r.leaseFrom) < lease/2
}

// intentPrep is work a new intent needs right before it is recorded:
// prepare runs just before IntentRecorded is appended under targetID (the
// order flow holds the payment token in the key table there), and discard
// undoes it when the intent was certainly not recorded under targetID (the
// key was recorded by another request first, or this request is a repeat
// that tried to record first). discard is best effort and must not block.
// The IntentRecorded that names targetID is sent within prepWindow of the
// start of prepare, or not at all (the request answers 503): what prepare
// made for an intent that was never recorded is found by that bound
// (shredUnplaced).
//
// With key units (WithKeyUnits), unit is used instead when set: it returns
// the key-table write that joins the unit recording the intent, so what it
// makes is durable with the intent or not at all, and nothing is discarded.
type intentPrep struct {
	prepare func(ctx context.Context, targetID string, now time.Time) error
	discard func(ctx context.Context, targetID string)
	unit    func(targetID string, now time.Time) keyWrite
}

// cause is what the ids of the intent's deterministic events derive from
// (DerivedID): its stream's name for the stream's first intent, as ever;
// for an intent recorded after an earlier one was purged (a key reused
// after its retention), the name and the revision it was opened at. Event
// ids are unique across the whole log, so an id derived from the name
// alone is the earlier intent's: its append (a show, a hold, an order
// claim, a cancel, a rejection) would conflict with that one's for ever.
func (r *intentRun) cause() string { return intentCause(r.stream, r.opened) }

// at returns the intent stream as the run knows it: its revision only (for
// core.commit, which fences a step of the run by it).
func (r *intentRun) at() *stream { return streamAt(r.stream, r.rev) }

// intentCause is intentRun.cause of the intent opened at revision opened
// of stream.
func intentCause(stream string, opened eventstore.Revision) string {
	if opened == 0 {
		return stream
	}
	return stream + "@" + strconv.FormatUint(opened, 10)
}

// meta returns event metadata for events caused by this intent: caused by
// the event id causation, or when "" by what the run's lineage names.
func (r *intentRun) meta(now time.Time, causation string) eventstore.Metadata {
	if causation == "" {
		causation = r.lineage.causation
	}
	return eventstore.Metadata{Actor: r.req.Actor, Intent: r.stream, CorrelationID: r.lineage.correlation,
		CausationID: causation, RequestID: r.lineage.request.Server, ClientRequestID: r.lineage.request.Client, OccurredAt: now}
}

// targetID is the id of the resource the intent creates.
func (r *intentRun) targetID() string { return r.intent.Recorded.TargetID }

// beginIntent records the intent of req, or finds it. It returns the run, or
// a copy of domain.ErrKeyReused (422) when a live intent has a different
// fingerprint, or the recorded *Rejection. Expired intents (database clock)
// are truncated and replaced, so their key starts a new intent.
//
// An intent stream this process has not seen is recorded first and read
// only when that append conflicts (recordFirst); one it has seen (most
// likely a repeat) is read first.
//
// validate, when not nil, runs only before a new intent is recorded: input
// that is invalid at the database clock's now is refused without recording
// anything, while a repeat still answers the intent's outcome. prep, when
// not nil, runs right before a new intent is recorded (see intentPrep).
func (h *core) beginIntent(ctx context.Context, req Request, command map[string]any, prep *intentPrep, validate func(now time.Time) error) (*intentRun, error) {
	return h.begin(ctx, req, command, prep, validate, false)
}

// beginDeferred is beginIntent for a use case whose own unit of work
// records a new intent (see deferRecord): an intent stream this process has
// not seen comes back as a run whose IntentRecorded is not appended yet
// (intentRun.pending), registered in flight (inFlight) until the unit
// commits or fails. A request that finds its intent in flight in this
// process waits for it (awaitInFlight) before it reads.
func (h *core) beginDeferred(ctx context.Context, req Request, command map[string]any, prep *intentPrep, validate func(now time.Time) error) (*intentRun, error) {
	return h.begin(ctx, req, command, prep, validate, true)
}

// begin is beginIntent, deferring the record when deferred is true.
func (h *core) begin(ctx context.Context, req Request, command map[string]any, prep *intentPrep, validate func(now time.Time) error, deferred bool) (*intentRun, error) {
	fp, err := Fingerprint(CanonicalVersion, req.Operation, command)
	if err != nil {
		return nil, err
	}
	// The target id is chosen once: prep's work under it stays valid when
	// a lost race makes the loop record again.
	b := &intentBegin{req: req, stream: IntentStream(req.Actor, req.Operation, req.Key), fp: fp, command: command,
		targetID: NewID(), prep: prep, validate: validate, units: h.units != nil, deferred: deferred}
	defer func() {
		if b.prepared && !b.keep {
			prep.discard(h.detach(ctx), b.targetID)
		}
	}()
	if run, done, err := h.beginFirst(ctx, b); done {
		return run, err
	}
	return h.beginOnReads(ctx, b)
}

// beginOnReads decides b on reads of the intent stream (beginOnRead) under
// the retry policy.
func (h *core) beginOnReads(ctx context.Context, b *intentBegin) (*intentRun, error) {
	var run *intentRun
	err := h.retryConflicts(ctx, func() error {
		var err error
		run, err = h.beginOnRead(ctx, b)
		return err
	})
	if errors.Is(err, domain.ErrContention) {
		return nil, domain.ErrContention.With("the idempotency key is being recorded concurrently; retry")
	}
	if err != nil {
		return nil, err
	}
	return run, nil
}

// beginFirst is what begin does before it reads the intent stream: a
// deferred intent in flight in this process is waited for (then read); an
// intent stream this process has not seen is recorded first (recordFirst)
// or, deferred, made a run to record in the use case's unit (deferRecord).
// done is true when that settled the request (a run, or an error); false
// when begin goes on to read.
func (h *core) beginFirst(ctx context.Context, b *intentBegin) (run *intentRun, done bool, err error) {
	if b.deferred {
		if e := h.inflight.get(b.stream); e != nil {
			err := h.awaitInFlight(ctx, b, e)
			return nil, err != nil, err
		}
	}
	if h.intents.has(b.stream) {
		return nil, false, nil
	}
	if b.deferred {
		run, e, err := h.deferRecord(ctx, b)
		switch {
		case err != nil || run != nil:
			b.keep = run != nil // the run records it, or discards what prep made (dropPending)
			return run, true, err
		case e != nil: // another request of this process defers the same intent
			err := h.awaitInFlight(ctx, b, e)
			return nil, err != nil, err
		case !b.deferred: // no room in flight: record first
		default:
			return nil, false, nil // validate refused: decide on a read
		}
	}
	// Record first, read only when that conflicts (see recordFirst).
	run, conflict, err := h.recordFirst(ctx, b)
	if run != nil {
		b.keep = true
		return run, true, nil
	}
	if conflict == nil {
		b.keep = err != nil && b.prepared // the append may have committed
		return nil, err != nil, err
	}
	if conflict.Actual >= 0 {
		// The stream exists, or was purged: it keeps its last revision.
		a := eventstore.Revision(conflict.Actual)
		b.purgedAt = &a
	}
	return nil, false, nil
}

// intentBegin is what beginIntent carries across its tries: the request,
// its intent stream, fingerprint and command, the target id chosen once,
// prep and validate, and what prep made (prepared, the last instant sendBy
// to send the intent record that names it, and keep once that record may
// have been sent); with key units (units), the key-table write that joins
// the intent's unit instead (kw). purgedAt is the revision a purged intent
// stream kept, once an append learned it.
type intentBegin struct {
	req      Request
	stream   string
	fp       string
	command  map[string]any
	targetID string
	prep     *intentPrep
	validate func(now time.Time) error
	prepared bool
	keep     bool
	sendBy   time.Time
	units    bool
	kw       keyWrite
	purgedAt *eventstore.Revision
	// waitUntil is the host instant this request's bounded wait ends, once
	// it began waiting for the intent in flight here (awaitInFlight);
	// awaitExecutor waits no further, so a repeat waits InUseWait in all.
	waitUntil time.Time
	// busy is the flight this request waited for in vain (awaitInFlight):
	// still in flight when its wait ended.
	busy *flight
	// deferred is true when the use case's unit records a new intent
	// (beginDeferred); deferRecord sets it false when it cannot.
	deferred bool
}

// prepare runs prep once, before the first record of the intent at now
// (with key units, makes the write that joins the record instead).
func (b *intentBegin) prepare(ctx context.Context, now time.Time) error {
	if b.prep == nil || b.prepared || b.kw.create != nil {
		return nil
	}
	if b.units && b.prep.unit != nil {
		b.kw = b.prep.unit(b.targetID, now)
		return nil
	}
	started := time.Now()
	if err := b.prep.prepare(ctx, b.targetID, now); err != nil {
		return err
	}
	b.prepared, b.sendBy = true, started.Add(prepWindow)
	return nil
}

// beginOnRead is one try of beginIntent on a read of the intent stream: an
// expired intent is truncated (its key starts anew), a live one resolved
// (resolveExisting), and a new one recorded after validate and prep.
func (h *core) beginOnRead(ctx context.Context, b *intentBegin) (*intentRun, error) {
	leaseFrom := time.Now()
	now, s, err := h.loadIntent(ctx, b.stream)
	if err != nil {
		return nil, err
	}
	in := fold[domain.Intent](s.events)
	if s.exists {
		in.RecordedAt = intentOpened(s)
		h.intents.note(b.stream)
	}
	at := newStream(b.stream) // the revision the intent is recorded at
	if b.purgedAt != nil {
		at = streamAt(b.stream, *b.purgedAt)
	}
	if s.exists && in.Expired(now, h.cfg.IntentRetention) {
		if err := h.store.Truncate(ctx, b.stream, s.last+1); err != nil {
			return nil, unavailable(err)
		}
		at = streamAt(b.stream, s.last)
		s.exists, in = false, domain.Intent{}
	}
	if in.Exists() {
		if run, done, err := h.resolveExisting(ctx, b, in, s, now); done {
			return run, err
		}
	}
	// domain.ResolveNew: record the intent, unless it is still in flight
	// here after this request's bounded wait.
	if b.busy != nil {
		if err := h.inUseInFlight(b, now); err != nil {
			return nil, err
		}
	}
	if b.validate != nil {
		if err := b.validate(now); err != nil {
			return nil, err
		}
	}
	if err := b.prepare(ctx, now); err != nil {
		return nil, err
	}
	rn, res, err := h.recordIntent(ctx, b, at, now)
	var rc *eventstore.RevisionConflictError
	if errors.As(err, &rc) {
		if rc.Actual >= 0 && b.purgedAt == nil {
			// Purged earlier: the stream keeps its last revision.
			a := eventstore.Revision(rc.Actual)
			b.purgedAt = &a
		}
		return nil, err
	}
	b.keep = true // the append may have committed: keep what prep made for it
	if err != nil {
		return nil, err
	}
	h.recorded(ctx, rn, res, leaseFrom)
	return rn, nil
}

// resolveExisting answers a request under a live intent in (read as s at
// now) by the domain's table: a different fingerprint is
// domain.ErrKeyReused with the differing fields, a recorded rejection is
// answered again, and the same request continues the intent as a repeat;
// done is false when the intent is to be recorded anew (domain.ResolveNew).
// A repeat is fingerprinted under the intent's canonical version, so a
// deploy never turns retries into 422s.
func (h *core) resolveExisting(ctx context.Context, b *intentBegin, in domain.Intent, s *stream, now time.Time) (run *intentRun, done bool, err error) {
	req := b.req
	storedFP := b.fp
	if v := in.Recorded.CanonicalVersion; v != CanonicalVersion {
		if storedFP, err = Fingerprint(v, req.Operation, b.command); err != nil {
			return nil, true, err
		}
	}
	switch in.Resolve(storedFP, now, h.cfg.IntentRetention) {
	case domain.ResolveNew:
		return nil, false, nil
	case domain.ResolveMismatch:
		return nil, true, h.keyReused(req.Operation, in.Recorded.Command, b.command)
	case domain.ResolveRejected:
		h.metrics.Replay(req.Operation)
		h.metrics.Intent(req.Operation, IntentReplayed, "")
		return nil, true, rejectionOf(in.Rejection, true)
	}
	h.metrics.Replay(req.Operation)
	h.metrics.Intent(req.Operation, IntentReplayed, "")
	h.log.DebugContext(ctx, "intent repeated", "operation", req.Operation, "intent", b.stream, "target_id", in.Recorded.TargetID)
	return &intentRun{req: req, stream: b.stream, intent: in, rev: s.last, now: now, command: in.Recorded.Command,
		opened: s.records[0].Revision, lineage: requestLineage(ctx, &s.records[0], ""), waitUntil: b.waitUntil}, true, nil
}

// keptTarget answers, for a repeat of an intent this process keeps
// (loadIntent) and that is young by the service clock, the id of the
// intent's target when the repeat would continue it (same fingerprint, no
// rejection): what a replay needs of the intent once the target exists.
// That part of an intent never changes — the recorded command, fingerprint
// and target are written once, and a young intent is not truncated or
// replaced — so the caller may answer from the target alone, read once,
// without reading the intent's tail. ok is false when the intent is not
// kept, is old, or would not continue (a mismatch, a rejection); the caller
// then goes through beginIntent, which reads it. Errors are the clock's and
// the fingerprint's.
func (h *core) keptTarget(ctx context.Context, req Request, command map[string]any) (target string, ok bool, err error) {
	name := IntentStream(req.Actor, req.Operation, req.Key)
	k, _, kept := h.keptIntents.get(name)
	if !kept || !k.exists {
		return "", false, nil
	}
	now, err := h.now(ctx)
	if err != nil {
		return "", false, err
	}
	in := fold[domain.Intent](k.events)
	in.RecordedAt = intentOpened(k)
	if !now.Before(in.RecordedAt.Add(h.cfg.IntentRetention/2)) || in.Recorded.TargetID == "" {
		return "", false, nil
	}
	fp, err := Fingerprint(in.Recorded.CanonicalVersion, req.Operation, command)
	if err != nil {
		return "", false, err
	}
	if in.Resolve(fp, now, h.cfg.IntentRetention) != domain.ResolveContinue {
		return "", false, nil
	}
	return in.Recorded.TargetID, true, nil
}

// intentOpened is openedAt of s's first record (the IntentRecorded): s.opened
// when it was set, so a kept intent's metadata is decoded once.
func intentOpened(s *stream) time.Time {
	if !s.opened.IsZero() {
		return s.opened
	}
	return openedAt(s.records[0])
}

// loadIntent reads the service clock and intent stream name. An intent
// this process loaded before is kept (loadKept) while it is younger than
// half the intent retention — an intent stream is truncated or purged only
// once its intent expired, so a kept young one is only ever appended to —
// and then only its tail is read, after the clock (usually the process's
// reading, no round trip). Otherwise the clock and the whole stream are read
// at once: two statements, one round trip of waiting; the stream is kept
// when it is young enough.
func (h *core) loadIntent(ctx context.Context, name string) (time.Time, *stream, error) {
	young := func(s *stream, now time.Time) bool {
		return s.exists && now.Before(intentOpened(s).Add(h.cfg.IntentRetention/2))
	}
	if k, _, ok := h.keptIntents.get(name); ok {
		now, err := h.now(ctx)
		if err != nil {
			return time.Time{}, nil, err
		}
		if young(k, now) {
			s, err := h.loadKept(ctx, &h.keptIntents, name)
			return now, s, err
		}
		h.keptIntents.drop(name)
	}
	var now time.Time
	nowErr := make(chan error, 1)
	go func() {
		var err error
		now, err = h.now(ctx)
		nowErr <- err
	}()
	s, err := h.load(ctx, name)
	if nerr := <-nowErr; err == nil {
		err = nerr
	}
	if err != nil {
		return time.Time{}, nil, err
	}
	if young(s, now) {
		k := s.keptCopy()
		k.opened = intentOpened(s) // k is not shared yet
		h.keptIntents.put(name, k, k.last)
		s = k.clipped()
	}
	return now, s, nil
}

// recordFirst is beginIntent's first try for an intent stream this process
// has not seen (intentHints): it appends IntentRecorded at no stream
// without reading the intent stream first, since a new key is by far the
// common case — after prepare (an order's key-table row) when validate
// accepts. It returns the new run; or nil and the revision conflict when the
// append conflicted (a repeat, an intent that expired or was purged); or
// nil, nil, nil when validate refused (a repeat answers the intent's
// outcome, not the validation error). In both cases beginIntent's loop then
// decides as ever, on a read. Other errors are returned (a failed clock
// read or prepare; an append whose outcome stayed unknown after
// appendEvents repeated it: 503).
//
// The cost moves from new keys to repeats that reach a process which has
// not seen their intent (another replica, a restart, an evicted hint): one
// failed append, and for an order the key-table row its prepare made,
// deleted again within shredDelay. A repeat on the process that recorded or
// read the intent reads it first (ARCHITECTURE.md, "Performance", "Record
// first, read on conflict"). b.sendBy is the last instant the record may be
// sent, once prepare set it.
func (h *core) recordFirst(ctx context.Context, b *intentBegin) (*intentRun, *eventstore.RevisionConflictError, error) {
	leaseFrom := time.Now()
	now, ok, err := h.firstRecordAt(ctx, b)
	if err != nil || !ok {
		return nil, nil, err
	}
	if err := b.prepare(ctx, now); err != nil {
		return nil, nil, err
	}
	rn, res, err := h.recordIntent(ctx, b, newStream(b.stream), now)
	var rc *eventstore.RevisionConflictError
	if errors.As(err, &rc) {
		return nil, rc, nil
	}
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return nil, &eventstore.RevisionConflictError{Actual: -1}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	h.recorded(ctx, rn, res, leaseFrom)
	return rn, nil, nil
}

// firstRecordAt reads the database clock for a first record of b's
// intent: ok is false when b.validate refuses the request at that now
// (nothing is recorded; a repeat answers the intent's outcome on reads).
func (h *core) firstRecordAt(ctx context.Context, b *intentBegin) (now time.Time, ok bool, err error) {
	if now, err = h.now(ctx); err != nil {
		return now, false, err
	}
	return now, b.validate == nil || b.validate(now) == nil, nil
}

// intentHintCap bounds the intent streams intentHints remembers.
const intentHintCap = 1 << 16

// intentHints remembers, as 64-bit FNV-1a hashes of their names, the intent
// streams this process recorded or found existing: a request under one of
// them is most likely a repeat, which beginIntent reads first instead of
// trying to record (recordFirst). A hint only: a miss (never seen here,
// evicted) or a false hit (a hash collision) chooses the other order of
// the same two steps, both correct. Bound: intentHintCap hashes (about
// 3 MB, measured); eviction: first in, first out. Safe for concurrent use;
// the zero value is ready.
type intentHints struct {
	mu     sync.Mutex
	hashes *fifoMap[uint64, struct{}]
}

func intentHash(stream string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(stream))
	return f.Sum64()
}

// note remembers stream.
func (s *intentHints) note(stream string) {
	k := intentHash(stream)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hashes == nil {
		s.hashes = newFIFOMap[uint64, struct{}](intentHintCap)
	}
	s.hashes.put(k, struct{}{})
}

// has reports whether stream was noted (and not evicted since).
func (s *intentHints) has(stream string) bool {
	k := intentHash(stream)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hashes == nil {
		return false
	}
	_, ok := s.hashes.get(k)
	return ok
}

// recordIntent appends a new intent's IntentRecorded at at's revision (a
// stream known by its revision: none for a new stream) and returns its
// run (the intent applied; its revision and lease start are set by
// recorded once the append succeeded) and the append's result.
//
// If the answer is lost, appendEvents repeats this append (same event id,
// same expected revision) to learn whether the intent was recorded: success
// means it is, and this request is its executor; a conflict means it was
// not; still unknown after the repeats is a 503 and the intent (if
// recorded) waits for a repeat or recovery after its lease. A non-zero
// b.sendBy bounds every send of the append (prepWindow): the append is not
// sent, or repeated, after it. b.kw, the key of an order with key units,
// is written in the same unit.
func (h *core) recordIntent(ctx context.Context, b *intentBegin, at *stream, now time.Time) (*intentRun, eventstore.AppendResult, error) {
	if !b.sendBy.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, b.sendBy)
		defer cancel()
	}
	rn, part := h.newIntent(ctx, b, at, now)
	res, err := h.commitUnit(ctx, b.kw, part)
	if err != nil {
		return rn, eventstore.AppendResult{}, err
	}
	return rn, res[0], nil
}

// newIntent decides b's IntentRecorded at now, to append at at's revision:
// the run it starts (created; its revision and lease start are set once it
// is recorded) and the unit part that records it.
func (h *core) newIntent(ctx context.Context, b *intentBegin, at *stream, now time.Time) (*intentRun, unitPart) {
	req := b.req
	rec := domain.IntentRecorded{Actor: req.Actor, Operation: req.Operation, KeySHA256: sha256Hex([]byte(req.Key)),
		Fingerprint: b.fp, CanonicalVersion: CanonicalVersion, Command: b.command, TargetID: b.targetID,
		Executor: h.cfg.Executor, LeaseUntil: now.Add(h.cfg.IntentLease)}
	id := NewID()
	rn := &intentRun{req: req, stream: b.stream, created: true, now: now, command: b.command, lineage: requestLineage(ctx, nil, id)}
	rn.intent.Apply(rec)
	rn.intent.RecordedAt = now
	return rn, unitPart{s: at, m: rn.meta(now, ""), evs: []pending{{id, rec}}}
}

// recorded completes rn after its IntentRecorded was appended with result
// res; leaseFrom is the host instant taken before the clock reading the
// lease was computed from.
func (h *core) recorded(ctx context.Context, rn *intentRun, res eventstore.AppendResult, leaseFrom time.Time) {
	h.intents.note(rn.stream)
	rn.rev, rn.opened = res.NextRevision, res.NextRevision
	if res.NextRevision == 0 {
		// Only an intent stream's first intent may be alone. An intent
		// recorded after an earlier one was purged (its key reused once
		// the retention passed) derives its events' ids from its own
		// cause (stream@revision), so they cannot repeat the earlier
		// intent's; it is still never alone, a conservative choice that
		// costs a read only on a reused key.
		rn.leaseFrom = leaseFrom
	}
	h.metrics.Intent(rn.req.Operation, IntentCreated, "")
	h.log.DebugContext(ctx, "intent recorded", "operation", rn.req.Operation, "intent", rn.stream, "target_id", rn.targetID())
	h.step(ctx, "intent.recorded")
}

// rejectionOf returns the answer of a recorded rejection; a version 1 event
// keeps the status it stored.
func rejectionOf(r *domain.IntentRejected, replayed bool) *Rejection {
	return &Rejection{LegacyStatus: r.Status, ResourceID: r.ResourceID, Replayed: replayed,
		Err: &domain.Error{Kind: domain.ParseKind(r.Kind), Code: r.Code, Msg: r.Detail}}
}

// takeOver resumes an intent whose executor's lease expired, fenced by the
// intent stream's revision. Returns errRetry if someone else changed the
// intent first.
func (h *core) takeOver(ctx context.Context, run *intentRun) error {
	now, err := h.now(ctx)
	if err != nil {
		return err
	}
	ev := domain.IntentResumed{Executor: h.cfg.Executor, LeaseUntil: now.Add(h.cfg.IntentLease)}
	res, err := h.commit(ctx, run.at(), run.meta(now, ""), pending{NewID(), ev})
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return errRetry
	}
	if err != nil {
		return err
	}
	run.intent.Apply(ev)
	run.rev, run.created, run.now = res.NextRevision, true, now
	return nil
}

// reject records a definitive refusal on the intent stream (the first
// rejection wins) and returns it. A repeat answers the same.
func (h *core) reject(ctx context.Context, run *intentRun, derr *domain.Error, resourceID string) error {
	ev := domain.IntentRejected{Kind: derr.Kind.String(), Code: derr.Code, Detail: derr.Error(), ResourceID: resourceID}
	now, err := h.now(ctx)
	if err != nil {
		return err
	}
	_, err = h.commit(ctx, run.at(), run.meta(now, ""), pending{DerivedID(run.cause(), "rejected"), ev})
	if err == nil {
		h.metrics.Intent(run.req.Operation, IntentRefused, ev.Code)
		return rejectionOf(&ev, !run.created)
	}
	if !errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		return err
	}
	// The intent changed while this request decided to refuse it: a first
	// rejection may have won, or another executor took the intent over and
	// may have reached the commit point. Only the former is final; otherwise
	// answer a transient 503 (never stored), and a repeat resolves it.
	s, err := h.load(ctx, run.stream)
	if err != nil {
		return err
	}
	in := fold[domain.Intent](s.events)
	if in.Rejection != nil {
		return rejectionOf(in.Rejection, !run.created)
	}
	return domain.ErrContention.With("the request changed hands while it was being refused; retry")
}

// awaitExecutor decides what a request does before an intent's commit point,
// by domain.Intent.Await: the request that recorded (or took over) the
// intent goes on; a repeat inside the executor's lease waits up to InUseWait
// for committed to turn true (then returns errRetry so the caller re-reads)
// and otherwise answers *InUseError (domain.ErrKeyInUse, 409); after the
// lease it takes over (errRetry on a lost race).
func (h *core) awaitExecutor(ctx context.Context, run *intentRun, committed func() (bool, error)) error {
	waited := false
	for {
		var now time.Time
		if !run.created {
			var err error
			if now, err = h.now(ctx); err != nil {
				return err
			}
		}
		switch run.intent.Await(run.created, waited, now) {
		case domain.ResolveExecute:
			return nil
		case domain.ResolveWait:
			if !waited && run.waitUntil.IsZero() {
				h.metrics.Intent(run.req.Operation, IntentWaited, "")
				h.step(ctx, "intent.waiting")
			}
			wait := min(h.cfg.InUseWait, run.intent.LeaseUntil.Sub(now)+50*time.Millisecond)
			if !run.waitUntil.IsZero() {
				wait = min(wait, time.Until(run.waitUntil))
			}
			done, err := waitFor(ctx, wait, committed)
			if err != nil {
				return err
			}
			if done {
				return errRetry
			}
			if err := h.reloadIntent(ctx, run); err != nil {
				return err
			}
			waited = true
		case domain.ResolveInUse:
			h.metrics.InUse(run.req.Operation)
			h.metrics.Intent(run.req.Operation, IntentInUse, "")
			return &InUseError{RetryAfter: max(time.Second, run.intent.LeaseUntil.Sub(now))}
		default: // domain.ResolveTakeOver
			err := h.takeOver(ctx, run)
			if errors.Is(err, errRetry) {
				if err := h.reloadIntent(ctx, run); err != nil {
					return err
				}
			}
			return err
		}
	}
}

// InUseError is domain.ErrKeyInUse with the time after which a retry may
// find the executor's lease expired (Retry-After, RFC 9110 §10.2.3).
type InUseError struct {
	RetryAfter time.Duration
}

// Error returns domain.ErrKeyInUse's message.
func (e *InUseError) Error() string { return domain.ErrKeyInUse.Error() }

// Unwrap returns domain.ErrKeyInUse.
func (e *InUseError) Unwrap() error { return domain.ErrKeyInUse }

// asDomain returns err's *domain.Error, or an Internal one: what a use case
// records with reject.
func asDomain(err error) *domain.Error {
	var de *domain.Error
	if errors.As(err, &de) {
		return de
	}
	return &domain.Error{Kind: domain.Internal, Code: "internal", Msg: "internal error"}
}

// reloadIntent refreshes run from its stream.
func (h *core) reloadIntent(ctx context.Context, run *intentRun) error {
	s, err := h.load(ctx, run.stream)
	if err != nil {
		return err
	}
	in := fold[domain.Intent](s.events)
	if !s.exists {
		return domain.ErrUnavailable.With("the intent expired while it was being processed; retry")
	}
	in.RecordedAt = intentOpened(s)
	run.intent, run.rev = in, s.last
	if in.Rejection != nil {
		return rejectionOf(in.Rejection, !run.created)
	}
	return nil
}

// waitFor polls cond with a growing interval until it reports done, ctx is
// done, or d passes. It returns whether cond reported done.
func waitFor(ctx context.Context, d time.Duration, cond func() (bool, error)) (bool, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	interval := 10 * time.Millisecond
	for {
		ok, err := cond()
		if err != nil || ok {
			return ok, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-deadline.C:
			t.Stop()
			return cond()
		case <-t.C:
		}
		if interval < 100*time.Millisecond {
			interval *= 2
		}
	}
}
