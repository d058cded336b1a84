package commands

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Checkpoint names of the delayed log followers.
const (
	RecoveryName = "intent-recovery"
	ExpiryName   = "reservation-expiry"
)

// RunRecovery finishes intents whose executor stopped before the commit
// point (process killed between steps), exactly as a repeat of the request
// would: it follows the log from its checkpoint and, for every IntentRecorded
// or IntentResumed, waits until that executor's lease has passed (database
// clock), then resumes the intent if it has no outcome yet — taking it over
// with a fenced IntentResumed. Work after a commit point is the process
// manager's. The delay before an interrupted intent is finished is thus
// bounded by the intent lease plus one pass. It blocks until ctx is done; a
// failed resume (a dependency down) is retried every retry without advancing
// the checkpoint.
//
// An order or reservation intent recorded in the unit of its commit point
// (the order's claim, the hold batch: inflight.go) is never left before
// that point on PostgreSQL or memstore: a crash before the unit leaves no
// intent at all (nor an order's key, made in the same unit), and the
// request's repeat starts afresh. Recovery finds such an intent without
// its commit point only when it was recorded alone (its unit failed on
// another part, or the process had seen its stream), or on KurrentDB,
// where a unit's parts are appended one by one, the intents first.
func (h *Workers) RunRecovery(ctx context.Context, log Log, cps Checkpoints, retry time.Duration) error {
	intents := []string{domain.TypeIntentRecorded, domain.TypeIntentResumed}
	return h.delayedFollower(ctx, log, cps, RecoveryName, retry, intents, func(ctx context.Context, r eventstore.RecordedEvent, e domain.Event) plannedJob {
		var until time.Time
		var op string
		cause := r.Stream // an IntentResumed's intent may have opened earlier: a miss reads
		switch e := e.(type) {
		case domain.IntentRecorded:
			until, op, cause = e.LeaseUntil, e.Operation, intentCause(r.Stream, r.Revision)
		case domain.IntentResumed:
			until = e.LeaseUntil
		default:
			return plannedJob{}
		}
		return plannedJob{due: until, job: func(ctx context.Context) error {
			if h.finishedHere(cause, op, r.Position) {
				return nil
			}
			return h.recoverIntent(ctx, r.Stream)
		}}
	})
}

// finishedHere reports whether this process appended, after the intent
// record at position after, the event that core.committed looks for —
// the show, the reservation's opening (after its seats were held), the
// order claim — or the intent's recorded refusal, for the intent whose
// deterministic ids derive from cause (intentRun.cause) and operation op
// ("" when unknown). Recovery then has nothing to do and skips its reads
// (core.written is a hint: a miss reads the intent). The
// position is a second guard: only an append after the intent's record
// counts.
func (h *core) finishedHere(cause, op string, after eventstore.Position) bool {
	if h.written.hasAfter(after, DerivedID(cause, "rejected")) {
		return true
	}
	switch op {
	case OpScheduleShow:
		return h.written.hasAfter(after, DerivedID(cause, "show-scheduled"))
	case OpReserveSeats:
		return h.written.hasAfter(after, DerivedID(DerivedID(cause, "seats-held"), "reservation-held"))
	case OpPlaceOrder:
		return h.written.hasAfter(after, DerivedID(cause, "order-claimed"))
	}
	return false
}

// RunExpiry is the expiry job: it follows the log from its checkpoint and,
// for every SeatsHeld, waits until the hold's expires_at (database clock),
// then writes the expiry claim if no order claimed the reservation, and
// releases its seats. An OrderClaimed of the reservation that it reads
// meanwhile settles the job without running it: the claim stream takes
// exactly one claim and never changes it, so ExpireReservation would read
// that claim and do nothing. It blocks until ctx is done.
func (h *Workers) RunExpiry(ctx context.Context, log Log, cps Checkpoints, retry time.Duration) error {
	holds := []string{domain.TypeSeatsHeld, domain.TypeOrderClaimed}
	return h.delayedFollower(ctx, log, cps, ExpiryName, retry, holds, func(ctx context.Context, r eventstore.RecordedEvent, e domain.Event) plannedJob {
		switch e := e.(type) {
		case domain.SeatsHeld:
			return plannedJob{key: e.ReservationID, due: e.ExpiresAt, job: func(ctx context.Context) error { return h.ExpireReservation(ctx, e.ReservationID) }}
		case domain.OrderClaimed:
			if r.Stream == domain.ClaimStream(e.ReservationID) {
				return plannedJob{settles: e.ReservationID}
			}
		}
		return plannedJob{}
	})
}

// plannedJob is what a delayed follower makes of one event: a job due at
// due (none when job is nil), known by key when key is set; and settles,
// when set, the key of a pending job that the event makes moot (it is
// finished without running).
type plannedJob struct {
	key     string
	due     time.Time
	job     func(context.Context) error
	settles string
}

// The delayed followers' pace: due jobs run together in rounds at most
// scheduleRound apart (a job runs at most that late), and the checkpoint is
// saved at most once per checkpointEvery while it moves (a restart reads
// again at most that much more of the log, every job idempotent): one clock
// reading and one checkpoint statement per round, not per job
// (ARCHITECTURE.md, "Performance").
const (
	scheduleRound   = time.Second
	checkpointEvery = 2 * time.Second
)

// delayedFollower follows the log and runs each event's job once the
// database clock passes that event's own due time. Jobs are scheduled by due
// time, not run in log order, so a long hold (say from before a change of
// BOOKING_RESERVATION_HOLD) never delays a shorter one recorded after it.
//
// The checkpoint is the position just before the oldest event whose job is
// still pending, so a restart re-reads every pending job (jobs are
// idempotent; a job already done is a no-op). A failing job is retried every
// retry without holding back the others. Pending jobs are kept in memory: at
// most one per reservation held or intent recorded within the window.
// Only events of the types plan acts on (types) are decoded and planned;
// the others only move the checkpoint.
func (h *core) delayedFollower(ctx context.Context, log Log, cps Checkpoints, name string, retry time.Duration, types []string,
	plan func(ctx context.Context, r eventstore.RecordedEvent, e domain.Event) plannedJob) error {
	from, err := cps.Load(ctx, name)
	if err != nil {
		return fmt.Errorf("%s: load checkpoint: %w", name, err)
	}
	sched := newSchedule(from)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.runSchedule(ctx, cps, name, retry, sched) }()
	err = log.SubscribeAll(ctx, from, func(ctx context.Context, batch []eventstore.RecordedEvent) error {
		for _, r := range batch {
			var p plannedJob
			if slices.Contains(types, r.Type) && h.registry.Known(r.Type) {
				ev, err := h.registry.Decode(r.Type, r.Data)
				if err != nil {
					return err
				}
				p = plan(ctx, r, ev.(domain.Event))
			}
			if p.settles != "" {
				sched.settle(p.settles)
			}
			sched.addKeyed(r.Position, p.key, p.due, p.job)
		}
		return nil
	})
	cancel()
	if serr := <-done; err == nil || errors.Is(err, context.Canceled) {
		if serr != nil && !errors.Is(serr, context.Canceled) {
			return serr
		}
	}
	return err
}

// errNothingWaiting is runSchedule's reason not to read the clock.
var errNothingWaiting = errors.New("no job waiting")

// runSchedule runs due jobs and saves the checkpoint until ctx is done. It
// wakes when a job becomes the earliest (schedule.add), when the earliest
// is due, and at least every retry, when it also saves the checkpoint if it
// moved; it reads the database clock only while a job waits.
func (h *core) runSchedule(ctx context.Context, cps Checkpoints, name string, retry time.Duration, sched *schedule) error {
	var saved eventstore.Position
	var savedAt time.Time // process clock: only paces the saves
	for {
		wait := retry
		var now time.Time
		var err error
		if sched.waiting() { // the clock is read only when a job may be due
			now, err = h.now(ctx)
		} else {
			err = errNothingWaiting
		}
		if err == nil {
			for _, it := range sched.due(now) {
				if jerr := it.job(ctx); jerr != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					h.log.WarnContext(ctx, "background job will retry", "job", name, "err", jerr)
					sched.retry(it, now.Add(retry))
					continue
				}
				sched.finish(it)
			}
			if next, ok := sched.next(); ok {
				wait = min(retry, max(next.Sub(now), scheduleRound))
			}
		}
		if cp := sched.checkpoint(); cp != saved {
			if since := time.Since(savedAt); since < checkpointEvery {
				wait = min(wait, checkpointEvery-since)
			} else if err := cps.Save(ctx, name, cp); err != nil && ctx.Err() == nil {
				h.log.WarnContext(ctx, "background job: checkpoint not saved", "job", name, "err", err)
			} else if err == nil {
				saved, savedAt = cp, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sched.wake:
		case <-time.After(wait):
		}
	}
}

// schedItem is one pending job: the event's position, the position of the
// event before it (the checkpoint while it is pending), its due time and
// arrival order.
type schedItem struct {
	seq  int64
	prev eventstore.Position
	due  time.Time
	job  func(context.Context) error
	// at is the item's index in the due heap, -1 while the runner has it.
	at   int
	done bool
	key  string // for settle; "" when the job has none
}

// schedule is the set of pending jobs of a delayed follower: a min-heap by
// due time (container/heap) for the runner, and a queue in arrival order for
// the checkpoint, so no operation scans or sorts every pending job. Safe for
// concurrent use by the subscriber (add) and the runner. Its size is bounded
// by the window it covers: one job per reservation held (expiry) or intent
// recorded (recovery) since the oldest pending job; a job leaves both
// structures when it finishes (the queue drops finished jobs from its front).
type schedule struct {
	mu      sync.Mutex
	heap    dueHeap      // jobs waiting for their due time
	fifo    []*schedItem // pending jobs (waiting, running or retried) in arrival order
	keyed   map[string]*schedItem
	last    eventstore.Position
	nextSeq int64
	wake    chan struct{}
}

func newSchedule(from eventstore.Position) *schedule {
	return &schedule{last: from, wake: make(chan struct{}, 1), keyed: map[string]*schedItem{}}
}

// add records that the log has been read through pos; job, when not nil, is
// scheduled at due.
func (s *schedule) add(pos eventstore.Position, due time.Time, job func(context.Context) error) {
	s.addKeyed(pos, "", due, job)
}

// addKeyed is add of a job that settle can find by key (none when key is
// ""); keyed holds at most one entry per pending job, dropped when it
// finishes or is settled.
func (s *schedule) addKeyed(pos eventstore.Position, key string, due time.Time, job func(context.Context) error) {
	s.mu.Lock()
	earliest := false
	if job != nil {
		it := &schedItem{seq: s.nextSeq, prev: s.last, due: due, job: job, key: key}
		s.nextSeq++
		heap.Push(&s.heap, it)
		s.fifo = append(s.fifo, it)
		if key != "" {
			s.keyed[key] = it
		}
		earliest = it.at == 0
	}
	s.last = pos
	s.mu.Unlock()
	if !earliest {
		return // the runner's next wake-up stands; it saves the checkpoint by then
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// waiting reports whether a job waits for its due time.
func (s *schedule) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heap) > 0
}

// due takes the jobs due at now out of the heap, earliest first; they stay
// pending (for the checkpoint) until finish, or go back into the heap with
// retry.
func (s *schedule) due(now time.Time) []*schedItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*schedItem
	for len(s.heap) > 0 && !now.Before(s.heap[0].due) {
		out = append(out, heap.Pop(&s.heap).(*schedItem))
	}
	return out
}

// settle finishes the job added under key if it is still waiting for its
// due time (one the runner has taken runs to its end as usual).
func (s *schedule) settle(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.keyed[key]; it != nil && it.at >= 0 {
		s.finishLocked(it)
	}
}

// finish marks a job taken by due as done.
func (s *schedule) finish(done *schedItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishLocked(done)
}

func (s *schedule) finishLocked(done *schedItem) {
	if done.at >= 0 {
		heap.Remove(&s.heap, done.at)
	}
	if done.key != "" && s.keyed[done.key] == done {
		delete(s.keyed, done.key)
	}
	done.done = true
	n := 0
	for n < len(s.fifo) && s.fifo[n].done {
		s.fifo[n] = nil
		n++
	}
	s.fifo = s.fifo[n:]
}

// retry puts a job taken by due back, due at at.
func (s *schedule) retry(it *schedItem, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it.due = at
	if it.at >= 0 {
		heap.Fix(&s.heap, it.at)
		return
	}
	heap.Push(&s.heap, it)
}

// next returns the earliest due time of the jobs waiting in the heap.
func (s *schedule) next() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.heap) == 0 {
		return time.Time{}, false
	}
	return s.heap[0].due, true
}

// checkpoint is the position before the oldest pending job, or the last
// position read when none is pending.
func (s *schedule) checkpoint() eventstore.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fifo) == 0 {
		return s.last
	}
	return s.fifo[0].prev
}

// dueHeap orders jobs by due time, then arrival (heap.Interface).
type dueHeap []*schedItem

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *dueHeap) Push(x any) {
	it := x.(*schedItem)
	it.at = len(*h)
	*h = append(*h, it)
}
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.at = -1
	return it
}

// loadRun reads an intent stream into a run as a repeat would find it.
// Returns nil when the stream has no live intent.
func (h *core) loadRun(ctx context.Context, stream string) (*intentRun, error) {
	s, err := h.load(ctx, stream)
	if err != nil || !s.exists {
		return nil, err
	}
	in := fold[domain.Intent](s.events)
	if !in.Exists() {
		return nil, nil
	}
	in.RecordedAt = openedAt(s.records[0])
	req := Request{Actor: in.Recorded.Actor, Operation: in.Recorded.Operation}
	return &intentRun{req: req, stream: stream, intent: in, rev: s.last, command: in.Recorded.Command, opened: s.records[0].Revision,
		lineage: recoveryLineage(s), trace: latestTrace(ctx, s)}, nil
}

// recoveryLineage is the lineage of an intent recovery resumes: the
// intent's correlation id (its IntentRecorded's), and its latest event as
// the cause, with that event's request ids.
func recoveryLineage(s *stream) lineage {
	first, _ := eventstore.DecodeMetadata(s.records[0].Metadata)
	last := s.records[len(s.records)-1]
	m, _ := eventstore.DecodeMetadata(last.Metadata)
	l := lineage{correlation: first.CorrelationID, causation: last.ID, request: RequestIDs{Server: m.RequestID, Client: m.ClientRequestID}}
	if l.correlation == "" {
		l.correlation = m.CorrelationID
	}
	return l
}

// recoverIntent resumes one intent if it is live, has no rejection and its
// lease has passed; it returns nil when there is nothing to do. Definitive
// refusals reached on the way are recorded on the intent (not errors here).
func (h *core) recoverIntent(ctx context.Context, stream string) error {
	run, err := h.loadRun(ctx, stream)
	if err != nil || run == nil || run.intent.Rejection != nil {
		return err
	}
	ctx = run.context(ctx)
	now, err := h.now(ctx)
	if err != nil {
		return err
	}
	if run.intent.Expired(now, h.cfg.IntentRetention) || run.intent.LeaseLive(now) {
		return nil
	}
	str := func(k string) string { v, _ := run.command[k].(string); return v }
	num := func(k string) int { v, _ := run.command[k].(float64); return int(v) }
	if done, err := h.committed(ctx, run, str); err != nil || done {
		return err // past its commit point: the process manager finishes it
	}
	switch run.req.Operation {
	case OpScheduleShow:
		_, _, err = h.scheduleShow(ctx, run, showCommandOf(run.command))
	case OpReserveSeats:
		_, _, err = h.reserveSeats(ctx, run, ReserveSeatsCommand{ShowID: str("show_id"), Quantity: num("quantity")})
	case OpPlaceOrder:
		_, err = h.placeOrder(ctx, run, str("reservation_id"))
	case OpCancelOrder:
		_, err = h.cancelOrder(ctx, run, str("order_id"))
	default:
		return fmt.Errorf("recovery: unknown operation %q", run.req.Operation)
	}
	var rej *Rejection
	var inUse *InUseError
	if errors.As(err, &rej) || errors.As(err, &inUse) {
		return nil
	}
	if err == nil && run.created {
		h.metrics.Recovered("intent") // taken over and finished
	}
	return err
}

// committed reports whether an intent already reached its commit point, by
// one read of the stream that holds it, so recovery leaves finished intents
// alone cheaply.
func (h *core) committed(ctx context.Context, run *intentRun, str func(string) string) (bool, error) {
	switch run.req.Operation {
	case OpScheduleShow:
		s, err := h.load(ctx, domain.ShowStream(run.targetID()))
		return err == nil && s.exists, err
	case OpReserveSeats:
		s, err := h.load(ctx, domain.ReservationStream(run.targetID()))
		return err == nil && s.exists, err
	case OpPlaceOrder:
		c, _, err := h.loadClaim(ctx, str("reservation_id"))
		return err == nil && c.Kind == domain.ClaimKindOrder && c.OrderID == run.targetID(), err
	case OpCancelOrder:
		o, _, err := h.loadOrder(ctx, str("order_id"))
		return err == nil && o.CancelAccepted, err
	}
	return false, nil
}

// ExpireReservation writes the expiry claim of a reservation whose hold has
// passed (database clock) and that no order claimed, with the same id a late
// order request would use, then releases its seats; a no-op otherwise.
func (h *Workers) ExpireReservation(ctx context.Context, reservationID string) error {
	return h.retryConflicts(ctx, func() error {
		c, _, err := h.loadClaim(ctx, reservationID)
		if err != nil {
			return err
		}
		if c.Kind == domain.ClaimKindOrder {
			return nil
		}
		res, rs, err := h.loadReservationStream(ctx, reservationID)
		if err != nil {
			return err
		}
		// The expiry follows from the hold: it keeps the reservation
		// intent's correlation, and names the reservation's latest event
		// as its cause.
		ctx := withStreamCorrelation(ctx, rs)
		now, err := h.now(ctx)
		if err != nil {
			return err
		}
		id := ExpiryClaimID(reservationID)
		var claim domain.ExpiryClaimed
		if c.Kind == domain.ClaimKindExpiry {
			claim = domain.ExpiryClaimed{ReservationID: reservationID, ShowID: res.ShowID, Quantity: res.Quantity}
		} else {
			evs := domain.DecideExpiry(c, res, now)
			if len(evs) == 0 {
				return nil
			}
			claim = evs[0].(domain.ExpiryClaimed)
			m := eventstore.Metadata{Actor: res.Actor, OccurredAt: now}
			h.step(ctx, "expiry.claiming")
			_, err = h.commit(ctx, newStream(domain.ClaimStream(reservationID)), m, pending{id, claim})
			if err != nil {
				return err // a conflict: an order or expiry claimed first, decide again
			}
			h.step(ctx, "expiry.claimed")
		}
		if !res.Exists() {
			return nil
		}
		return h.finishExpiry(ctx, claim, id, eventstore.Metadata{Actor: res.Actor, OccurredAt: now})
	})
}
