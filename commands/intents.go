package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// CorrelationID is stored in event metadata (the HTTP request id).
	CorrelationID string
	// Wait bounds how long the request waits for a pending outcome (Prefer: wait, RFC 7240).
	Wait time.Duration
}

// Outcome describes how a request was answered. Replayed is true when the
// request repeated an existing intent (Idempotent-Replayed: true). Rejection
// is set for a definitive refusal recorded on the intent: every repeat
// answers it with the same Status.
type Outcome struct {
	Replayed  bool
	Rejection *Rejection
}

// Rejection is a definitive refusal of an intent, answered identically to
// every repeat. It is an error whose Unwrap is the domain error.
type Rejection struct {
	Status     int
	Err        *domain.Error
	ResourceID string
	Replayed   bool
}

// Error returns the domain error's message.
func (r *Rejection) Error() string { return r.Err.Error() }

// Unwrap returns the domain error, so errors.Is matches its sentinel.
func (r *Rejection) Unwrap() error { return r.Err }

// KeyReusedError is the 422 answer to a repeat with a different fingerprint.
// Fields lists the differing top-level fields, never their values.
type KeyReusedError = domain.Error

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
}

// intentPrep is work a new intent needs right before it is recorded:
// prepare runs just before IntentRecorded is appended under targetID (the
// order flow holds the payment token in the key table there), and discard
// undoes it when the intent was certainly not recorded under targetID (the
// key was recorded by another request first). discard is best effort.
type intentPrep struct {
	prepare func(ctx context.Context, targetID string, now time.Time) error
	discard func(ctx context.Context, targetID string)
}

// meta returns event metadata for events caused by this intent.
func (r *intentRun) meta(now time.Time, causation string) eventstore.Metadata {
	return eventstore.Metadata{Actor: r.req.Actor, Intent: r.stream, CorrelationID: r.req.CorrelationID,
		CausationID: causation, OccurredAt: now}
}

// targetID is the id of the resource the intent creates.
func (r *intentRun) targetID() string { return r.intent.Recorded.TargetID }

// StatusOf maps an error to the HTTP status its rejection fixes; cmd/booking
// sets it from its one Kind→status table (httperr.go).
var StatusOf = func(err error) int { return 500 }

// beginIntent records the intent of req, or finds it. It returns the run, or
// a KeyReused *domain.Error (422) when a live intent has a different
// fingerprint, or the recorded *Rejection. Expired intents (database clock)
// are truncated and replaced, so their key starts a new intent.
//
// validate, when not nil, runs only before a new intent is recorded: input
// that is invalid at the database clock's now is refused without recording
// anything, while a repeat still answers the intent's outcome. prep, when
// not nil, runs right before a new intent is recorded (see intentPrep).
func (h *Handler) beginIntent(ctx context.Context, req Request, command map[string]any, prep *intentPrep, validate func(now time.Time) error) (*intentRun, error) {
	stream := IntentStream(req.Actor, req.Operation, req.Key)
	fp, err := Fingerprint(CanonicalVersion, req.Operation, command)
	if err != nil {
		return nil, err
	}
	// The target id is chosen once: prep's work under it stays valid when
	// a lost race makes the loop record again.
	targetID := NewID()
	prepared, keep := false, false
	defer func() {
		if prepared && !keep {
			prep.discard(context.WithoutCancel(ctx), targetID)
		}
	}()
	var purgedAt *eventstore.Revision
	for range 8 {
		now, err := h.now(ctx)
		if err != nil {
			return nil, err
		}
		s, err := h.load(ctx, stream)
		if err != nil {
			return nil, err
		}
		in := fold[domain.Intent](s.events)
		if s.exists {
			in.RecordedAt = s.records[0].RecordedAt
		}
		exp := eventstore.NoStream()
		if purgedAt != nil {
			exp = eventstore.Exact(*purgedAt)
		}
		if s.exists && in.Expired(now, h.cfg.IntentRetention) {
			if err := h.store.Truncate(ctx, stream, s.last+1); err != nil {
				return nil, unavailable(err)
			}
			exp = eventstore.Exact(s.last)
			s.exists = false
		}
		if !s.exists {
			if validate != nil {
				if err := validate(now); err != nil {
					return nil, err
				}
			}
			if prep != nil && !prepared {
				if err := prep.prepare(ctx, targetID, now); err != nil {
					return nil, err
				}
				prepared = true
			}
			rec := domain.IntentRecorded{Actor: req.Actor, Operation: req.Operation, KeySHA256: sha256Hex([]byte(req.Key)),
				Fingerprint: fp, CanonicalVersion: CanonicalVersion, Command: command, TargetID: targetID,
				Executor: h.cfg.Executor, LeaseUntil: now.Add(h.cfg.IntentLease)}
			run := &intentRun{req: req, stream: stream, created: true, now: now, command: command}
			// If the answer is lost, appendEvents repeats this append (same
			// event id, same expected revision) to learn whether the intent
			// was recorded: success means it is, and this request is its
			// executor; still unknown after the repeats is a 503 and the
			// intent (if recorded) waits for a repeat or recovery after its
			// lease.
			res, err := h.appendEvents(ctx, stream, exp, run.meta(now, ""), pending{NewID(), rec})
			var rc *eventstore.RevisionConflictError
			if err != nil && !errors.As(err, &rc) {
				keep = true // the append may have committed: keep what prep made for it
			}
			if errors.As(err, &rc) {
				if rc.Actual >= 0 && purgedAt == nil {
					// Purged earlier: the stream keeps its last revision.
					a := eventstore.Revision(rc.Actual)
					purgedAt = &a
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			keep = true
			run.intent.Apply(rec)
			run.intent.RecordedAt = now
			run.rev = res.NextRevision
			h.step("intent.recorded")
			return run, nil
		}
		storedFP := fp
		if v := in.Recorded.CanonicalVersion; v != CanonicalVersion {
			if storedFP, err = Fingerprint(v, req.Operation, command); err != nil {
				return nil, err
			}
		}
		if storedFP != in.Recorded.Fingerprint {
			h.metrics.FingerprintConflict(req.Operation)
			// Compared as the fingerprint compares: strings in NFC.
			fields := domain.DiffFields(nfcCommand(in.Recorded.Command), nfcCommand(normalizeJSON(command)))
			e := *domain.ErrKeyReused
			e.Fields = fields
			if len(fields) > 0 {
				e.Msg = fmt.Sprintf("this idempotency key was used with a different request; differing fields: %v", fields)
			}
			return nil, &e
		}
		h.metrics.Replay(req.Operation)
		if in.Rejection != nil {
			return nil, rejectionOf(in.Rejection, true)
		}
		run := &intentRun{req: req, stream: stream, intent: in, rev: s.last, now: now, command: in.Recorded.Command}
		return run, nil
	}
	return nil, domain.ErrContention.With("the idempotency key is being recorded concurrently; retry")
}

func rejectionOf(r *domain.IntentRejected, replayed bool) *Rejection {
	return &Rejection{Status: r.Status, ResourceID: r.ResourceID, Replayed: replayed,
		Err: &domain.Error{Kind: domain.ParseKind(r.Kind), Code: r.Code, Msg: r.Detail}}
}

// takeOver resumes an intent whose executor's lease expired, fenced by the
// intent stream's revision. Returns errRetry if someone else changed the
// intent first.
func (h *Handler) takeOver(ctx context.Context, run *intentRun) error {
	now, err := h.now(ctx)
	if err != nil {
		return err
	}
	ev := domain.IntentResumed{Executor: h.cfg.Executor, LeaseUntil: now.Add(h.cfg.IntentLease)}
	res, err := h.appendEvents(ctx, run.stream, eventstore.Exact(run.rev), run.meta(now, ""), pending{NewID(), ev})
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
func (h *Handler) reject(ctx context.Context, run *intentRun, derr *domain.Error, resourceID string) error {
	ev := domain.IntentRejected{Status: StatusOf(derr), Kind: derr.Kind.String(), Code: derr.Code, Detail: derr.Error(), ResourceID: resourceID}
	now, err := h.now(ctx)
	if err != nil {
		return err
	}
	_, err = h.appendEvents(ctx, run.stream, eventstore.Exact(run.rev), run.meta(now, ""), pending{DerivedID(run.stream, "rejected"), ev})
	if err == nil {
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

// reloadIntent refreshes run from its stream.
func (h *Handler) reloadIntent(ctx context.Context, run *intentRun) error {
	s, err := h.load(ctx, run.stream)
	if err != nil {
		return err
	}
	in := fold[domain.Intent](s.events)
	if !s.exists {
		return domain.ErrUnavailable.With("the intent expired while it was being processed; retry")
	}
	in.RecordedAt = s.records[0].RecordedAt
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
