package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/internal/tick"
)

// Defaults of SubscriberConfig.
const (
	DefaultDurable          = "booking-tail"
	DefaultAckWait          = 30 * time.Second
	DefaultMaxAckPending    = 1000
	DefaultPrefetch         = 100
	DefaultProcessedHorizon = 24 * time.Hour
	DefaultPruneEvery       = time.Minute
	DefaultGapRetries       = 20
	DefaultGapDelay         = 250 * time.Millisecond
	DefaultErrorDelay       = time.Second
	DefaultHandleTimeout    = time.Minute
)

// SubscriberConfig configures a Subscriber. Zero values take the defaults.
type SubscriberConfig struct {
	// Stream is the JetStream stream; default BOOKING.
	Stream string
	// Durable is the durable consumer's name and the subscriber's key in its
	// tables; default "booking-tail". Instances sharing it share the work.
	Durable string
	// Subject filters the stream; default booking.v1.>.
	Subject string
	// AckWait is the consumer's redelivery timeout (default 30 s).
	AckWait time.Duration
	// MaxAckPending bounds unacknowledged deliveries (default 1000).
	MaxAckPending int
	// Prefetch is how many messages the client buffers (default 100).
	Prefetch int
	// ProcessedHorizon is how long a message id stays in the processed set
	// (default 24 h). It must exceed the stream's duplicate window and the
	// longest redelivery delay; beyond it a late copy is still skipped by
	// the per-entity revision check.
	ProcessedHorizon time.Duration
	// PruneEvery is how often the processed set is pruned (default 1 m).
	PruneEvery time.Duration
	// GapRetries and GapDelay: a notification whose revision skips ahead of
	// the entity's last applied one is handed back (NakWithDelay(GapDelay))
	// until it has been delivered GapRetries times, so a redelivery of the
	// missing ones can come first; then it is applied and the gap reported.
	// Only when Subject covers whole entities (its event token is a
	// wildcard); with a narrower filter gaps are expected and not waited for.
	GapRetries int
	GapDelay   time.Duration
	// ErrorDelay is the redelivery delay after a failed attempt (default 1 s).
	ErrorDelay time.Duration
	// HandleTimeout bounds one message's transaction, handler included
	// (default 1 m). It may exceed AckWait: a slow handler's effect still
	// commits once, and its redelivered copy is absorbed.
	HandleTimeout time.Duration
	// Handler, if set, is the subscriber's own effect: it runs inside the
	// transaction that records the notification, before the commit. An
	// error rolls everything back and the message is redelivered. Its ctx
	// continues the trace the notification carries (TraceContext).
	Handler func(ctx context.Context, tx pgx.Tx, n *Notification) error
	// TracerProvider, if set, records a consumer span per delivery,
	// "process <stream>", continuing the trace the notification carries
	// (HeaderTraceparent); Handler runs in it. Nil: no span, and the
	// carried trace context is still Handler's.
	TracerProvider trace.TracerProvider
	// Applied, if set, is called after a notification's transaction has
	// committed and its ack was sent (printing, say). It runs at most once
	// per notification: a crash between commit and Applied loses the call,
	// never the recorded effect.
	Applied func(n *Notification)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c SubscriberConfig) withDefaults() SubscriberConfig {
	if c.Stream == "" {
		c.Stream = StreamName
	}
	if c.Durable == "" {
		c.Durable = DefaultDurable
	}
	if c.Subject == "" {
		c.Subject = SubjectAll
	}
	c.AckWait = orDefault(c.AckWait, DefaultAckWait)
	c.MaxAckPending = orDefault(c.MaxAckPending, DefaultMaxAckPending)
	c.Prefetch = orDefault(c.Prefetch, DefaultPrefetch)
	c.ProcessedHorizon = orDefault(c.ProcessedHorizon, DefaultProcessedHorizon)
	c.PruneEvery = orDefault(c.PruneEvery, DefaultPruneEvery)
	c.GapRetries = orDefault(c.GapRetries, DefaultGapRetries)
	c.GapDelay = orDefault(c.GapDelay, DefaultGapDelay)
	c.ErrorDelay = orDefault(c.ErrorDelay, DefaultErrorDelay)
	c.HandleTimeout = orDefault(c.HandleTimeout, DefaultHandleTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Notification is one delivered notification: the payload, and what the
// delivery says about it.
type Notification struct {
	Payload
	MsgID string // Nats-Msg-Id (the event id)
	// CorrelationID is the Booking-Request-Id header: the event's
	// correlation_id (the service's id of the request that recorded the
	// event's intent), not the event's own request_id; empty when absent.
	CorrelationID string
	Subject       string
	StreamSeq     uint64 // JetStream stream sequence
	Delivered     uint64 // delivery count, 1 on the first delivery
	Gap           bool   // applied although earlier revisions of the entity were never applied
	Body          []byte // the payload as published
}

// SubscriberStats counts a subscriber's outcomes since NewSubscriber.
type SubscriberStats struct {
	Applied     int64 // effects committed
	Duplicates  int64 // already in the processed set
	Stale       int64 // revision not after the entity's last applied one: skipped
	Gaps        int64 // applied after a gap (reported)
	Deferred    int64 // handed back to wait for missing revisions
	Redelivered int64 // deliveries with a delivery count above 1
	Malformed   int64 // not a notification: terminated
	Errors      int64 // failed attempts (redelivered later)
}

// Subscriber is the reference consumer of notifications (docs/notifications.md,
// "The reference consumer", describes its guarantees): a
// durable pull consumer that applies each notification once per effect and
// in revision order per entity. For every message it runs one PostgreSQL
// transaction that inserts the message id into the processed set
// (notify_processed), checks and advances the entity's last applied revision
// (notify_entities), runs Handler and records the effect (notification_log);
// it acknowledges the message only after the commit. Create it with
// NewSubscriber; Stats is safe for concurrent use.
type Subscriber struct {
	cfg   SubscriberConfig
	js    jetstream.JetStream
	pool  *pgxpool.Pool
	whole bool // Subject covers whole entities

	applied, duplicates, stale, gaps, deferred, redelivered, malformed, errs atomic.Int64

	// Test hook: true drops the ack of a committed notification (a lost ack).
	loseAck func(n *Notification) bool
}

// NewSubscriber returns a subscriber that consumes through js and records in
// pool (migration 00004).
func NewSubscriber(js jetstream.JetStream, pool *pgxpool.Pool, cfg SubscriberConfig) *Subscriber {
	cfg = cfg.withDefaults()
	return &Subscriber{cfg: cfg, js: js, pool: pool, whole: WholeEntities(cfg.Subject)}
}

// WholeEntities reports whether subject filter delivers every event of each
// entity it matches (its event token is a wildcard), so that a revision gap
// means a missing notification rather than a filtered one.
func WholeEntities(subject string) bool {
	tokens := strings.Split(subject, ".")
	for _, t := range tokens {
		if t == ">" {
			return true
		}
	}
	return len(tokens) == 5 && tokens[4] == "*"
}

// Stats returns the subscriber's counters.
func (s *Subscriber) Stats() SubscriberStats {
	return SubscriberStats{
		Applied: s.applied.Load(), Duplicates: s.duplicates.Load(), Stale: s.stale.Load(),
		Gaps: s.gaps.Load(), Deferred: s.deferred.Load(), Redelivered: s.redelivered.Load(),
		Malformed: s.malformed.Load(), Errors: s.errs.Load(),
	}
}

// Consumer creates or updates the durable pull consumer: explicit acks,
// deliver all, unlimited redeliveries. Returns a wrapped JetStream error.
func (s *Subscriber) Consumer(ctx context.Context) (jetstream.Consumer, error) {
	c, err := s.js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       s.cfg.Durable,
		Description:   "booking notifications subscriber",
		FilterSubject: s.cfg.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: s.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
	})
	if err != nil {
		return nil, fmt.Errorf("notify: consumer %s on %s: %w", s.cfg.Durable, s.cfg.Stream, err)
	}
	return c, nil
}

// Run consumes until ctx is done, then finishes the notification in hand
// (commit and ack), stops the consumer's delivery and returns nil. Messages
// buffered but not handled are redelivered after AckWait. It prunes the
// processed set every PruneEvery. Returns an error if the consumer cannot be
// created or its delivery fails for good. It blocks; run several
// Subscribers (in one or many processes) with one Durable to share the work.
func (s *Subscriber) Run(ctx context.Context) error {
	cons, err := s.Consumer(ctx)
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.Prefetch))
	if err != nil {
		return fmt.Errorf("notify: consume %s: %w", s.cfg.Durable, err)
	}
	defer it.Stop()

	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, stopPrune := context.WithCancel(ctx)
	defer stopPrune()
	wg.Go(func() {
		tick.Every(pctx, s.cfg.PruneEvery, func() bool {
			if _, err := s.Prune(pctx); err != nil && pctx.Err() == nil {
				s.cfg.Logger.Warn("notify: prune processed set", "durable", s.cfg.Durable, "err", err)
			}
			return true
		})
	})

	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return fmt.Errorf("notify: consume %s: %w", s.cfg.Durable, err)
		}
		if err != nil {
			s.cfg.Logger.Warn("notify: next message", "durable", s.cfg.Durable, "err", err)
			continue
		}
		// The message in hand is finished even if ctx is done meanwhile.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.HandleTimeout)
		s.Handle(hctx, msg)
		cancel()
	}
}

// outcome of applying one notification.
type outcome int

const (
	outApplied outcome = iota
	outDuplicate
	outStale
	outDefer
)

// Handle processes one delivered message: applies it once (see Subscriber)
// and acks it after the commit; acks a duplicate or stale one without
// effect; hands back (NakWithDelay) one that must wait for missing
// revisions or whose transaction failed; terminates one that is not a
// notification. It blocks for the transaction; safe for concurrent use.
func (s *Subscriber) Handle(ctx context.Context, msg jetstream.Msg) {
	log := s.cfg.Logger
	n, err := parseNotification(msg)
	if err != nil {
		s.malformed.Add(1)
		log.Error("notify: not a notification; terminating it", "durable", s.cfg.Durable, "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	if n.Delivered > 1 {
		s.redelivered.Add(1)
	}
	ctx = TraceContext(ctx, msg.Headers())
	if s.cfg.TracerProvider != nil {
		var span trace.Span
		ctx, span = s.cfg.TracerProvider.Tracer(tracerName).Start(ctx, "process "+s.cfg.Stream, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(semconv.MessagingSystemKey.String("nats"), semconv.MessagingOperationTypeProcess,
				semconv.MessagingDestinationName(n.Subject), semconv.MessagingMessageID(n.MsgID)))
		defer span.End()
	}
	out, last, err := s.apply(ctx, n)
	if err != nil {
		s.errs.Add(1)
		log.Warn("notify: apply failed; redelivery follows", "durable", s.cfg.Durable, "msg_id", n.MsgID, "err", err)
		_ = msg.NakWithDelay(s.cfg.ErrorDelay)
		return
	}
	switch out {
	case outDuplicate:
		s.duplicates.Add(1)
		_ = msg.Ack()
	case outStale:
		s.stale.Add(1)
		log.Debug("notify: stale revision skipped", "durable", s.cfg.Durable, "stream", n.Stream, "revision", n.Revision, "last_applied", last)
		_ = msg.Ack()
	case outDefer:
		s.deferred.Add(1)
		_ = msg.NakWithDelay(s.cfg.GapDelay)
	case outApplied:
		s.applied.Add(1)
		if n.Gap {
			s.gaps.Add(1)
			log.Warn("notify: gap in entity revisions: applied after missing revisions", "durable", s.cfg.Durable,
				"stream", n.Stream, "missing_from", last+1, "missing_to", int64(n.Revision)-1)
		}
		if s.loseAck == nil || !s.loseAck(n) {
			_ = msg.Ack()
		}
		if s.cfg.Applied != nil {
			s.cfg.Applied(n)
		}
	}
}

// parseNotification reads the headers and payload of msg.
func parseNotification(msg jetstream.Msg) (*Notification, error) {
	h := msg.Headers()
	n := &Notification{MsgID: h.Get(HeaderMsgID), CorrelationID: h.Get(HeaderRequestID), Subject: msg.Subject(), Body: msg.Data()}
	stream := h.Get(HeaderStream)
	rev, err := strconv.ParseUint(h.Get(HeaderRevision), 10, 63)
	if n.MsgID == "" || stream == "" || err != nil {
		return nil, fmt.Errorf("missing or invalid %s, %s or %s header", HeaderMsgID, HeaderStream, HeaderRevision)
	}
	if err := json.Unmarshal(msg.Data(), &n.Payload); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	n.Stream, n.Revision = stream, rev // the headers are authoritative
	if n.Type == "" {
		n.Type = h.Get(HeaderEventType)
	}
	if n.Position == "" {
		n.Position = h.Get(HeaderPosition)
	}
	if md, err := msg.Metadata(); err == nil {
		n.StreamSeq, n.Delivered = md.Sequence.Stream, md.NumDelivered
	}
	return n, nil
}

// apply runs the notification's transaction. last is the entity's last
// applied revision before it (-1 if none).
func (s *Subscriber) apply(ctx context.Context, n *Notification) (out outcome, last int64, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	tag, err := tx.Exec(ctx,
		`INSERT INTO notify_processed (consumer, msg_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		s.cfg.Durable, n.MsgID)
	if err != nil {
		return 0, 0, fmt.Errorf("processed set: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return outDuplicate, 0, nil // committed before, by this or another instance
	}
	// Upsert and lock the entity's row; RETURNING gives its current value.
	err = tx.QueryRow(ctx, `
INSERT INTO notify_entities (consumer, stream, last_revision) VALUES ($1, $2, -1)
ON CONFLICT (consumer, stream) DO UPDATE SET last_revision = notify_entities.last_revision
RETURNING last_revision`, s.cfg.Durable, n.Stream).Scan(&last)
	if err != nil {
		return 0, 0, fmt.Errorf("entity %s: %w", n.Stream, err)
	}
	rev := int64(n.Revision)
	if rev <= last {
		// Older than what was applied: skip, but remember the id.
		if err := tx.Commit(ctx); err != nil {
			return 0, last, fmt.Errorf("commit: %w", err)
		}
		return outStale, last, nil
	}
	if rev > last+1 {
		if s.whole && n.Delivered < uint64(s.cfg.GapRetries) {
			return outDefer, last, nil // rolled back: the missing ones may come first
		}
		n.Gap = true
	}
	if s.cfg.Handler != nil {
		if err := s.cfg.Handler(ctx, tx, n); err != nil {
			return 0, last, fmt.Errorf("handler: %w", err)
		}
	}
	_, err = tx.Exec(ctx, `
WITH e AS (
    UPDATE notify_entities SET last_revision = $4, updated_at = now()
     WHERE consumer = $1 AND stream = $3
)
INSERT INTO notification_log (consumer, msg_id, stream, revision, event_type, subject, position, stream_seq, delivered, gap)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		s.cfg.Durable, n.MsgID, n.Stream, rev, n.Type, n.Subject, n.Position, int64(n.StreamSeq), int64(n.Delivered), n.Gap)
	if err != nil {
		return 0, last, fmt.Errorf("record: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, last, fmt.Errorf("commit: %w", err)
	}
	return outApplied, last, nil
}

// Prune deletes the processed-set entries of this subscriber older than
// ProcessedHorizon (database clock) and returns how many. Safe for
// concurrent use.
func (s *Subscriber) Prune(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx,
		`DELETE FROM notify_processed WHERE consumer = $1 AND processed_at < now() - $2::interval`,
		s.cfg.Durable, s.cfg.ProcessedHorizon)
	if err != nil {
		return 0, fmt.Errorf("notify: prune processed set of %s: %w", s.cfg.Durable, err)
	}
	return tag.RowsAffected(), nil
}
