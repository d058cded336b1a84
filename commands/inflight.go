package commands

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Deferred intent records. A use case that places its commit point in a
// unit of work of its own (an order: beginDeferred) records a new intent in
// that same unit: its IntentRecorded is the unit's first part, so the intent
// and its commit point commit together (one transaction on PostgreSQL and
// memstore; on KurrentDB the parts are appended in order, the intent first,
// and recovery finishes what a crash cut short). The outcomes:
//
//   - the unit commits: the intent is recorded (recordedPending), with
//     everything recording it alone would have noted;
//   - the unit loses the race on the intent part: another request recorded
//     this intent first; the request goes on as a repeat, on reads
//     (resolveTaken);
//   - the unit fails on another part (the claim taken, a stream moved on),
//     or cannot be decided at all: the intent is recorded alone
//     (recordPending) and the use case goes on as for any recorded intent,
//     so a refusal is still recorded on the intent and answered the same to
//     every repeat;
//   - the unit's outcome stays unknown: appendResolving repeated it byte for
//     byte; the request answers 503 and a repeat reads what committed.
//
// Until its unit commits, a deferred intent is invisible to readers. A
// repeat that reaches this process meanwhile finds it registered in flight
// (inFlight) and waits for it, bounded (awaitInFlight); a repeat that
// reaches another process records the intent stream first or loses to this
// unit on its expected revision (no stream), writing nothing, and is
// answered on reads as a repeat.

// errIntentTaken means a unit recording a deferred intent lost the race on
// the intent stream: another request recorded the intent first.
var errIntentTaken = errors.New("commands: the intent was recorded by another request first")

// pendingIntent is a run's IntentRecorded not appended yet: the unit part
// that appends it (encoded once, so every send of it is the same bytes),
// what beginIntent carried (b: for recording it alone, or reading it), the
// host instant its lease was computed from, and its entry in flight.
type pendingIntent struct {
	part      unitPart
	b         *intentBegin
	leaseFrom time.Time
	flight    *flight
}

// inFlightCap bounds the intents inFlight registers.
const inFlightCap = 1 << 14

// inFlight registers the intents whose record this process deferred to a
// use case's unit, while that unit is decided and sent: a repeat arriving
// at this process meanwhile waits for it (awaitInFlight) instead of racing
// it. Bound: inFlightCap intents (a request finding it full records its
// intent first, as without deferral); eviction: an entry leaves when its
// run is recorded or its unit failed (release), at the latest when its
// request returns. Safe for concurrent use; the zero value is ready.
type inFlight struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one deferred intent in flight: the lease its IntentRecorded
// carries (Retry-After), and done, closed on release.
type flight struct {
	leaseUntil time.Time
	done       chan struct{}
	once       sync.Once
}

// get returns the flight of intent stream name, or nil.
func (f *inFlight) get(name string) *flight {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[name]
}

// enter registers a flight for name unless one is there (returned as
// existing) or the registry is full (both nil).
func (f *inFlight) enter(name string, leaseUntil time.Time) (mine, existing *flight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.m[name]; e != nil {
		return nil, e
	}
	if f.m == nil {
		f.m = map[string]*flight{}
	}
	if len(f.m) >= inFlightCap {
		return nil, nil
	}
	fl := &flight{leaseUntil: leaseUntil, done: make(chan struct{})}
	f.m[name] = fl
	return fl, nil
}

// release ends fl, registered for name: its waiters read. Idempotent.
func (f *inFlight) release(name string, fl *flight) {
	f.mu.Lock()
	if f.m[name] == fl {
		delete(f.m, name)
	}
	f.mu.Unlock()
	fl.once.Do(func() { close(fl.done) })
}

// deferRecord is beginIntent's first try for a deferred intent stream this
// process has not seen: after validate accepts at the database clock's now,
// it registers the intent in flight, runs prep, and returns the run whose
// IntentRecorded (at no stream) the use case's unit appends. It returns
// the flight of the same intent when another request of this process
// defers it already (wait for it); nil, nil, nil when validate refused (a
// repeat answers the intent's outcome, on reads) or, with b.deferred set
// false, when the registry is full (record first). Errors are the clock's
// and prep's.
func (h *core) deferRecord(ctx context.Context, b *intentBegin) (*intentRun, *flight, error) {
	leaseFrom := time.Now()
	now, ok, err := h.firstRecordAt(ctx, b)
	if err != nil || !ok {
		return nil, nil, err
	}
	fl, existing := h.inflight.enter(b.stream, now.Add(h.cfg.IntentLease))
	if fl == nil {
		b.deferred = existing != nil
		return nil, existing, nil
	}
	if err := b.prepare(ctx, now); err != nil {
		h.inflight.release(b.stream, fl)
		return nil, nil, err
	}
	rn, part := h.newIntent(ctx, b, newStream(b.stream), now)
	if part.data, err = encodeEvents(ctx, part.m, part.evs...); err != nil {
		h.inflight.release(b.stream, fl)
		return nil, nil, err
	}
	rn.leaseFrom = leaseFrom // the first intent of its stream, recorded by this request or by none
	rn.pending = &pendingIntent{part: part, b: b, leaseFrom: leaseFrom, flight: fl}
	return rn, nil, nil
}

// awaitInFlight is what a request does with its intent in flight in this
// process (fl), whatever its body: it waits up to InUseWait for the flight
// to end (step intent.waiting) and returns nil for the caller to read the
// intent. A flight is not a recorded intent: its body may never commit, so
// only the intent read decides between the outcome, 422 for another body
// and the wait for a recorded executor. When the wait ends with fl still
// in flight, b.busy keeps it: a read that finds no intent then answers
// *InUseError (409; inUseInFlight) instead of recording one.
func (h *core) awaitInFlight(ctx context.Context, b *intentBegin, fl *flight) error {
	h.metrics.Intent(b.req.Operation, IntentWaited, "")
	h.step(ctx, "intent.waiting")
	b.waitUntil = time.Now().Add(h.cfg.InUseWait)
	t := time.NewTimer(h.cfg.InUseWait)
	defer t.Stop()
	select {
	case <-fl.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		b.busy = fl
	}
	return nil
}

// inUseInFlight is the answer to a request whose bounded wait for the
// flight b.busy ended while it was still in flight and no intent is
// recorded under its key: *InUseError (409) with the flight's lease as
// Retry-After, counted; nil when the flight has ended since.
func (h *core) inUseInFlight(b *intentBegin, now time.Time) error {
	select {
	case <-b.busy.done:
		return nil
	default:
	}
	op := b.req.Operation
	h.metrics.Replay(op)
	h.metrics.Intent(op, IntentReplayed, "")
	h.metrics.InUse(op)
	h.metrics.Intent(op, IntentInUse, "")
	return &InUseError{RetryAfter: max(time.Second, b.busy.leaseUntil.Sub(now))}
}

// commitWithIntent is commitUnit for a run: a pending run's IntentRecorded
// is the unit's first part, recorded when the unit commits
// (recordedPending). It returns the results of parts (without the
// intent's); errIntentTaken when the unit lost the race on the intent part;
// other errors as commitUnit's, the run still pending.
func (h *core) commitWithIntent(ctx context.Context, run *intentRun, kw keyWrite, parts ...unitPart) ([]eventstore.AppendResult, error) {
	p := run.pending
	if p == nil {
		return h.commitUnit(ctx, kw, parts...)
	}
	if !p.b.sendBy.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, p.b.sendBy)
		defer cancel()
	}
	res, err := h.commitUnit(ctx, kw, append([]unitPart{p.part}, parts...)...)
	if err == nil {
		h.recordedPending(ctx, run, res[0])
		return res[1:], nil
	}
	var pe *eventstore.AppendPartError
	if errors.Is(err, eventstore.ErrWrongExpectedRevision) && (len(parts) == 0 || errors.As(err, &pe) && pe.Part == 0) {
		return nil, errIntentTaken
	}
	return nil, err
}

// recordedPending completes a pending run whose IntentRecorded was appended
// with result res, as recorded does, and ends its flight.
func (h *core) recordedPending(ctx context.Context, run *intentRun, res eventstore.AppendResult) {
	p := run.pending
	run.pending = nil
	h.recorded(ctx, run, res, p.leaseFrom)
	h.inflight.release(run.stream, p.flight)
}

// recordPending records a pending run's intent alone, with the key-table
// write recording it always carries (intentBegin.kw): for a use case whose
// unit did not commit on another part. It returns the run, recorded; or,
// when another request recorded the intent first, the run a repeat gets
// (resolveTaken). A run recorded already is returned as it is.
func (h *core) recordPending(ctx context.Context, run *intentRun) (*intentRun, error) {
	err := h.ensureRecorded(ctx, run)
	if errors.Is(err, errIntentTaken) {
		return h.resolveTaken(ctx, run)
	}
	if err != nil {
		return nil, err
	}
	return run, nil
}

// ensureRecorded records a pending run's intent alone (recordPending), or
// does nothing for a run recorded already. errIntentTaken, the run still
// pending, when another request recorded the intent first.
func (h *core) ensureRecorded(ctx context.Context, run *intentRun) error {
	if run.pending == nil {
		return nil
	}
	_, err := h.commitWithIntent(ctx, run, run.pending.b.kw)
	return err
}

// resolveTaken answers a pending run whose intent another request recorded
// first, exactly as a repeat: it ends the run's flight and decides on reads
// (beginOnReads). What prep made for the run's target is discarded unless
// the read recorded the intent under it after all.
func (h *core) resolveTaken(ctx context.Context, run *intentRun) (*intentRun, error) {
	p := run.pending
	run.pending = nil
	h.inflight.release(run.stream, p.flight)
	b := p.b
	b.deferred = false
	rn, err := h.beginOnReads(ctx, b)
	if b.prepared && (rn == nil || rn.targetID() != b.targetID || !rn.created) {
		b.prep.discard(h.detach(ctx), b.targetID)
	}
	return rn, err
}

// keyReused is domain.ErrKeyReused for a request on operation op whose
// command differs from the intent's stored one, naming the differing
// fields (compared as the fingerprint compares: strings in NFC), counted.
func (h *core) keyReused(op string, stored, command map[string]any) error {
	h.metrics.FingerprintConflict(op)
	h.metrics.Intent(op, IntentRefused, domain.ErrKeyReused.Code)
	fields := domain.DiffFields(nfcCommand(stored), nfcCommand(normalizeJSON(command)))
	e := *domain.ErrKeyReused
	e.Fields = fields
	if len(fields) > 0 {
		e.Msg = "this idempotency key was used with a different request; differing fields: " + strings.Join(fields, ", ")
	}
	return &e
}
