package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/internal/tick"
)

// Log is what the relay reads: the event store's catch-up subscription, and
// ReadStream to verify the stream's last notification against the log.
// eventstore.Store satisfies it.
type Log interface {
	SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error
	ReadStream(ctx context.Context, stream string, from eventstore.Revision, limit int) ([]eventstore.RecordedEvent, error)
}

// Defaults of RelayConfig.
const (
	DefaultRelayName       = "notify"
	DefaultLeaseTTL        = 15 * time.Second
	DefaultAckTimeout      = 5 * time.Second
	DefaultMaxInFlight     = 1024
	DefaultCheckpointEvery = 100 * time.Millisecond
)

// JetStream headers of optimistic concurrency on the stream.
const (
	headerExpectedLastMsgID = "Nats-Expected-Last-Msg-Id"
	headerExpectedLastSeq   = "Nats-Expected-Last-Sequence"
)

// JetStream API error codes of a failed expectation: another publisher
// extended the stream since this relay last looked.
const (
	errCodeWrongLastMsgID = 10070
	errCodeWrongLastSeq   = 10071
)

// RelayConfig configures a Relay. Zero values take the defaults.
type RelayConfig struct {
	// Name is the relay's row in notify_relays (lease and checkpoint);
	// default "notify". Instances that share a name are replicas of one relay.
	Name string
	// Owner identifies this instance in the lease; default a random UUID.
	// It must be unique per instance.
	Owner string
	// Stream is the JetStream stream; default BOOKING.
	Stream string
	// LeaseTTL is how long an acquisition or renewal holds the lease, by the
	// database clock (default 15 s).
	LeaseTTL time.Duration
	// RenewEvery is the renewal interval (default LeaseTTL/3).
	RenewEvery time.Duration
	// RetryInterval is how often a standby tries to take the lease, and the
	// pause after a failed run (default LeaseTTL/3).
	RetryInterval time.Duration
	// AckTimeout bounds the wait for one publish acknowledgement (default 5 s).
	AckTimeout time.Duration
	// MaxInFlight bounds the events handed to NATS whose acknowledgement
	// has not been processed yet (default 1024).
	MaxInFlight int
	// CheckpointEvery is the most often the checkpoint is saved while
	// events flow (default 100 ms); idle progress is saved within it.
	CheckpointEvery time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider, if set, records a producer span per publish of an
	// event that keeps a trace context, a child of that span, whose context
	// the notification then carries (see HeaderTraceparent). Nil: no span;
	// the event's own trace context is published.
	TracerProvider trace.TracerProvider
}

func (c RelayConfig) withDefaults() RelayConfig {
	if c.Name == "" {
		c.Name = DefaultRelayName
	}
	if c.Owner == "" {
		c.Owner = uuid.NewString()
	}
	if c.Stream == "" {
		c.Stream = StreamName
	}
	c.LeaseTTL = orDefault(c.LeaseTTL, DefaultLeaseTTL)
	c.RenewEvery = orDefault(c.RenewEvery, c.LeaseTTL/3)
	c.RetryInterval = orDefault(c.RetryInterval, c.LeaseTTL/3)
	c.AckTimeout = orDefault(c.AckTimeout, DefaultAckTimeout)
	c.MaxInFlight = orDefault(c.MaxInFlight, DefaultMaxInFlight)
	c.CheckpointEvery = orDefault(c.CheckpointEvery, DefaultCheckpointEvery)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// FailoverTime returns the longest time, after defaults, from a relay's
// publish of an event to the republish of that event by the instance that
// takes over when the publisher dies before its checkpoint: the ack wait and
// checkpoint interval of the dead relay, its lease TTL, and a standby's
// retry interval. (Catching up adds to it; resuming after the stream's last
// notification removes most republishes altogether.)
func (c RelayConfig) FailoverTime() time.Duration {
	c = c.withDefaults()
	return c.AckTimeout + c.CheckpointEvery + c.LeaseTTL + c.RetryInterval
}

// DuplicateWindowError reports a JetStream duplicate window that does not
// exceed the relay's fail-over time.
type DuplicateWindowError struct {
	Window, Failover time.Duration
}

// Error names the window and the fail-over time it must exceed.
func (e *DuplicateWindowError) Error() string {
	return fmt.Sprintf("notify: duplicate window %s must exceed the relay's fail-over time %s", e.Window, e.Failover)
}

// CheckDuplicateWindow returns a *DuplicateWindowError unless window exceeds
// c.FailoverTime(), so a relay that takes over republishes inside the window.
func (c RelayConfig) CheckDuplicateWindow(window time.Duration) error {
	if f := c.FailoverTime(); window <= f {
		return &DuplicateWindowError{Window: window, Failover: f}
	}
	return nil
}

// RelayStats counts a relay's work since NewRelay.
type RelayStats struct {
	Published  int64 // messages the stream stored (new)
	Duplicates int64 // publishes acknowledged as duplicates (already stored)
	Skipped    int64 // events of streams that are not published
	Leads      int64 // lease acquisitions
	Fenced     int64 // runs ended because another instance took the lease
	Checkpoint eventstore.Position
}

// Relay publishes the public events of the log to NATS JetStream (at least
// once, in log order, deduplicated by Nats-Msg-Id), one active instance
// across replicas under a fenced PostgreSQL lease (pgcoord.Leases). Create
// it with NewRelay and call Run. Its methods are safe for concurrent use.
type Relay struct {
	cfg  RelayConfig
	log  Log
	pool *pgxpool.Pool
	nc   *nats.Conn
	base time.Time // monotonic base of lease deadlines
	// tracer records the publish spans; nil: none (RelayConfig.TracerProvider).
	tracer trace.Tracer

	published, duplicates, skipped, leads, fenced atomic.Int64
	mu                                            sync.Mutex
	checkpoint                                    eventstore.Position

	// Test hooks.
	beforeSave func(pos eventstore.Position) hookAction // consulted before each checkpoint save
	noChain    bool                                     // no resume from the stream, no expectation headers
}

// hookAction is what a test's beforeSave hook asks for.
type hookAction int

const (
	hookSave hookAction = iota // save as usual
	hookSkip                   // skip this save (the checkpoint lags)
	hookDie                    // crash: no save, no release
)

// NewRelay returns a relay that follows log, keeps its lease and checkpoint
// in pool's notify_relays (migration 00004) and publishes through nc. nc is
// not closed by the relay.
func NewRelay(log Log, pool *pgxpool.Pool, nc *nats.Conn, cfg RelayConfig) *Relay {
	r := &Relay{cfg: cfg.withDefaults(), log: log, pool: pool, nc: nc, base: time.Now()}
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	return r
}

// Config returns the relay's configuration with defaults applied.
func (r *Relay) Config() RelayConfig { return r.cfg }

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	r.mu.Lock()
	cp := r.checkpoint
	r.mu.Unlock()
	return RelayStats{Published: r.published.Load(), Duplicates: r.duplicates.Load(),
		Skipped: r.skipped.Load(), Leads: r.leads.Load(), Fenced: r.fenced.Load(), Checkpoint: cp}
}

func (r *Relay) setCheckpoint(p eventstore.Position) {
	r.mu.Lock()
	r.checkpoint = p
	r.mu.Unlock()
}

// errLeaseExpired stops publishing when the lease may have expired by the
// database clock (no renewal succeeded in time).
var errLeaseExpired = errors.New("notify: relay lease expired before it could be renewed")

// errKilled is a test hook's simulated crash.
var errKilled = errors.New("notify: relay killed (test)")

// errStreamMoved means the stream was extended by another publisher.
var errStreamMoved = errors.New("notify: stream BOOKING moved ahead (another relay published)")

// Run keeps one relay instance active: it takes the lease when it is free,
// then publishes from its checkpoint (or after the stream's last
// notification, when that is ahead) until ctx is done, the lease is lost or
// an error occurs; a standby tries the lease every RetryInterval. On ctx
// done it waits for outstanding acknowledgements (at most AckTimeout),
// saves the checkpoint, releases the lease and returns nil. Errors of a run
// are logged and the run is retried. It blocks.
func (r *Relay) Run(ctx context.Context) error {
	log := r.cfg.Logger.With("relay", r.cfg.Name, "owner", r.cfg.Owner)
	standby := false
	for {
		sent := time.Since(r.base)
		l, err := acquireLease(ctx, r.pool, r.cfg.Name, r.cfg.Owner, r.cfg.LeaseTTL)
		switch {
		case err == nil:
			r.leads.Add(1)
			log.Info("relay lease acquired", "token", l.Token(), "checkpoint", l.Checkpoint().String())
			standby = false
			err = r.lead(ctx, l, sent)
			if ctx.Err() != nil {
				return nil
			}
			switch {
			case errors.Is(err, ErrFenced):
				r.fenced.Add(1)
				log.Warn("relay fenced: another instance took the lease", "token", l.Token())
			case errors.Is(err, errStreamMoved):
				log.Info("relay restarting: the stream moved ahead", "err", err)
			case err != nil:
				log.Error("relay stopped; retrying", "err", err)
			}
		case errors.Is(err, ErrLeaseHeld):
			if !standby {
				log.Info("relay standing by: lease held by another instance")
				standby = true
			}
		default:
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("relay lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.cfg.RetryInterval):
		}
	}
}

// entry is one event handed to the acknowledger, in log order; fut is nil
// for an event that is not published.
type entry struct {
	pos eventstore.Position
	fut jetstream.PubAckFuture
}

// tail is the stream's last notification as found at the start of a run.
type tail struct {
	lastSeq  uint64 // stream's last sequence (0: never had a message)
	msgID    string // Nats-Msg-Id of the last message, if found
	pos      eventstore.Position
	verified bool // the message is the event at pos in the log
}

// lead publishes while l is held. sent is when (since base) the
// acquisition was sent: the lease is trusted until sent + 0.9 × TTL unless
// renewed.
func (r *Relay) lead(ctx context.Context, l *lease, sent time.Duration) error {
	log := r.cfg.Logger.With("relay", r.cfg.Name, "owner", r.cfg.Owner, "token", l.Token())
	trust := r.cfg.LeaseTTL * 9 / 10
	var deadline atomic.Int64
	deadline.Store(int64(sent + trust))
	valid := func() bool { return time.Since(r.base) < time.Duration(deadline.Load()) }

	js, err := jetstream.New(r.nc,
		jetstream.WithPublishAsyncTimeout(r.cfg.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(r.cfg.MaxInFlight+8))
	if err != nil {
		return fmt.Errorf("notify: jetstream: %w", err)
	}
	defer js.CleanupPublisher()
	stream, err := js.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return fmt.Errorf("notify: stream %s: %w", r.cfg.Stream, err)
	}
	if err := r.cfg.CheckDuplicateWindow(stream.CachedInfo().Config.Duplicates); err != nil {
		return err
	}

	start := l.Checkpoint()
	var first nats.Header // expectation of the first publish
	if !r.noChain {
		t, err := r.streamTail(ctx, stream, log)
		if err != nil {
			return err
		}
		switch {
		case t.lastSeq == 0 || (t.msgID == "" && t.verified):
			first = nats.Header{headerExpectedLastSeq: []string{strconv.FormatUint(t.lastSeq, 10)}}
		case t.verified:
			first = nats.Header{headerExpectedLastMsgID: []string{t.msgID}}
			if start.Less(t.pos) {
				log.Info("relay resumes after the stream's last notification", "checkpoint", start.String(), "stream_position", t.pos.String())
				start = t.pos
			}
		}
	}

	r.setCheckpoint(l.Checkpoint())
	if l.Checkpoint().Less(start) {
		// Everything up to the stream's last notification is published.
		if err := l.saveCheckpoint(ctx, start); err != nil {
			return err
		}
		r.setCheckpoint(start)
	}

	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Renewals. A renewal that fails for another reason than fencing is
	// retried; publishing stops by itself once the lease is no longer trusted.
	var renewals sync.WaitGroup
	renewals.Go(func() {
		tick.Every(lctx, r.cfg.RenewEvery, func() bool {
			at := time.Since(r.base)
			rctx, rc := context.WithTimeout(lctx, r.cfg.RenewEvery)
			err := l.renew(rctx)
			rc()
			switch {
			case err == nil:
				deadline.Store(int64(at + trust))
			case errors.Is(err, ErrFenced):
				cancel(ErrFenced)
				return false
			case lctx.Err() == nil:
				log.Warn("relay lease renewal failed", "err", err)
			}
			return true
		})
	})
	defer renewals.Wait()

	pending := make(chan entry, r.cfg.MaxInFlight)
	acked := make(chan error, 1)
	go func() { acked <- r.acknowledge(ctx, lctx, cancel, l, pending) }()

	// The log is read one batch ahead of publishing, so reading and
	// publishing overlap.
	batches := make(chan []eventstore.RecordedEvent, 1)
	var subErr error
	var reader sync.WaitGroup
	reader.Go(func() {
		defer close(batches)
		subErr = r.log.SubscribeAll(lctx, start, func(ctx context.Context, batch []eventstore.RecordedEvent) error {
			select {
			case batches <- batch:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	})
	pubErr := r.publish(lctx, js, batches, pending, first, valid)
	if pubErr != nil {
		cancel(pubErr)
	}
	for range batches { // let the reader finish
	}
	reader.Wait()
	if pubErr != nil {
		subErr = pubErr
	}
	close(pending)
	ackErr := <-acked
	cancel(nil)
	renewals.Wait()

	if errors.Is(ackErr, errKilled) {
		return ackErr // a crash: no release
	}
	if ctx.Err() != nil && ackErr == nil {
		// Shutdown: the checkpoint is saved; let a standby take over at once.
		rctx, rc := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.AckTimeout)
		defer rc()
		if err := l.release(rctx); err != nil {
			log.Warn("relay lease release failed", "err", err)
		}
		return nil
	}
	if ackErr != nil {
		return ackErr
	}
	if cause := context.Cause(lctx); errors.Is(subErr, context.Canceled) && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return subErr
}

// publish publishes the events of batches in log order and hands each to
// the acknowledger through pending (an unpublished event with a nil
// future), which bounds the publishes in flight. Every publish carries the
// expectation that the stream's last message is the previous published
// event (the first one: first). It stops at the first error, when the lease
// is no longer trusted (errLeaseExpired), or when ctx is done.
func (r *Relay) publish(ctx context.Context, js jetstream.JetStream, batches <-chan []eventstore.RecordedEvent, pending chan<- entry, first nats.Header, valid func() bool) error {
	prev := ""
	for batch := range batches {
		for _, e := range batch {
			if !valid() {
				return errLeaseExpired
			}
			msg, ok, err := NewMessage(e)
			if err != nil {
				return err
			}
			var fut jetstream.PubAckFuture
			if ok {
				if !r.noChain {
					if prev != "" {
						msg.Header[headerExpectedLastMsgID] = []string{prev}
					} else {
						for k, v := range first {
							msg.Header[k] = v
						}
					}
				}
				span := startPublish(r.tracer, r.cfg.Stream, msg)
				fut, err = js.PublishMsgAsync(msg)
				endPublish(span, err)
				if err != nil {
					return fmt.Errorf("notify: publish %s (%s@%d): %w", e.ID, e.Stream, e.Revision, err)
				}
				prev = e.ID
			} else {
				r.skipped.Add(1)
			}
			select {
			case pending <- entry{pos: e.Position, fut: fut}:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
	}
	return nil
}

// acknowledge consumes pending in log order: it waits for each publish's
// acknowledgement (a duplicate counts as success) and saves the checkpoint
// through the last event whose acknowledgement, and all before it, arrived
// — at most every CheckpointEvery, and once more when pending is closed.
// It returns ErrFenced as soon as the lease is lost, the publish error of a
// failed acknowledgement (errStreamMoved for a failed expectation), or nil;
// on an error it calls stop, so the publisher stops, and drains pending.
// Saves use a context detached from ctx so a shutdown still saves.
func (r *Relay) acknowledge(ctx, lctx context.Context, stop context.CancelCauseFunc, l *lease, pending <-chan entry) error {
	var (
		done  eventstore.Position
		dirty bool
		fail  error
	)
	failWith := func(err error) {
		if fail == nil {
			fail = err
			stop(err)
		}
	}
	save := func() error {
		if r.beforeSave != nil {
			switch r.beforeSave(done) {
			case hookDie:
				return errKilled
			case hookSkip:
				return nil
			}
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.AckTimeout)
		defer cancel()
		if err := l.saveCheckpoint(sctx, done); err != nil {
			return err
		}
		dirty = false
		r.setCheckpoint(done)
		return nil
	}
	fenced := func() bool { return errors.Is(context.Cause(lctx), ErrFenced) }
	ticker := time.NewTicker(r.cfg.CheckpointEvery)
	defer ticker.Stop()
	for {
		select {
		case e, ok := <-pending:
			if !ok {
				if fail != nil {
					return fail
				}
				if dirty && !fenced() {
					return save()
				}
				if fenced() {
					return ErrFenced
				}
				return nil
			}
			if fail != nil {
				continue // drain; the publisher stops soon
			}
			if e.fut != nil {
				select {
				case pa := <-e.fut.Ok():
					if pa.Duplicate {
						r.duplicates.Add(1)
					} else {
						r.published.Add(1)
					}
				case err := <-e.fut.Err():
					perr := publishError(err)
					if dirty && !fenced() {
						if err := save(); err != nil {
							perr = err
						}
					}
					failWith(perr)
					continue
				case <-fencedDone(lctx):
					failWith(ErrFenced)
					continue
				}
			}
			done, dirty = e.pos, true
		case <-ticker.C:
			if fenced() {
				failWith(ErrFenced)
			}
			if dirty && fail == nil {
				if err := save(); err != nil {
					failWith(err)
				}
			}
		}
	}
}

// fencedDone returns lctx.Done() when lctx ended because of fencing, and a
// nil channel (never ready) otherwise: on shutdown acknowledgements are
// still awaited.
func fencedDone(lctx context.Context) <-chan struct{} {
	if errors.Is(context.Cause(lctx), ErrFenced) {
		return lctx.Done()
	}
	return nil
}

// publishError classifies an asynchronous publish error: a failed
// expectation (another publisher extended the stream) becomes errStreamMoved.
func publishError(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeWrongLastMsgID || apiErr.ErrorCode == errCodeWrongLastSeq) {
		return fmt.Errorf("%w: %w", errStreamMoved, err)
	}
	return fmt.Errorf("notify: publish acknowledgement: %w", err)
}

// streamTail reads the stream's last message and checks it against the log:
// verified when the event named by its Booking-Stream and Booking-Revision
// headers has its Nats-Msg-Id and Booking-Position. A message that does not
// match (a stream left over from another database, say) is logged and not
// trusted.
func (r *Relay) streamTail(ctx context.Context, s jetstream.Stream, log *slog.Logger) (tail, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return tail{}, fmt.Errorf("notify: stream info: %w", err)
	}
	t := tail{lastSeq: info.State.LastSeq}
	if info.State.Msgs == 0 {
		t.verified = true // nothing to contradict: expect the last sequence
		return t, nil
	}
	m, err := s.GetMsg(ctx, info.State.LastSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		log.Warn("relay: the stream's last message is deleted; not resuming from the stream", "seq", info.State.LastSeq)
		return t, nil
	}
	if err != nil {
		return tail{}, fmt.Errorf("notify: stream last message: %w", err)
	}
	t.msgID = m.Header.Get(HeaderMsgID)
	pos, perr := eventstore.ParsePosition(m.Header.Get(HeaderPosition))
	rev, rerr := strconv.ParseUint(m.Header.Get(HeaderRevision), 10, 64)
	stream := m.Header.Get(HeaderStream)
	if t.msgID == "" || perr != nil || rerr != nil || stream == "" {
		log.Warn("relay: the stream's last message is not a notification; not resuming from the stream", "seq", m.Sequence, "subject", m.Subject)
		return t, nil
	}
	evs, err := r.log.ReadStream(ctx, stream, rev, 1)
	if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
		return tail{}, fmt.Errorf("notify: verify the stream's last notification: %w", err)
	}
	if len(evs) == 1 && evs[0].ID == t.msgID && evs[0].Revision == rev && evs[0].Position == pos {
		t.pos, t.verified = pos, true
		return t, nil
	}
	log.Warn("relay: the stream's last notification is not in this event log (stream from another database?); publishing from the checkpoint",
		"seq", m.Sequence, "msg_id", t.msgID, "stream", stream, "revision", rev)
	return t, nil
}

// orDefault returns v if it is positive, def otherwise: the zero value (or
// a negative one) of a setting selects its default.
func orDefault[T ~int | ~int64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
