package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retrysafe/booking/eventstore"
)

// LagScan bounds how many events one lag query counts: a consumer further
// behind reports LagScan (far above the alert threshold of 500).
const LagScan = 100_000

// AheadOfHead is the value of a lag gauge whose consumer's checkpoint is
// beyond the head of the log (LagCollector.WithHead): no count of events
// is negative, so an alert on lag < 0 finds it.
const AheadOfHead = -1

// LogDistance counts the readable events after a position, at most limit
// of them (pgstore.Store.EventsAfter).
type LogDistance interface {
	EventsAfter(ctx context.Context, after eventstore.Position, limit int64) (int64, error)
}

// LagCollector is a prometheus.Collector that reports, at scrape time, how
// many events each log consumer still has to handle: the events between the
// log's readable head and the consumer's checkpoint, as stored in the
// database, so every replica reports the same value whichever instance runs
// the consumer, and a consumer that stopped keeps its lag growing.
//
//   - booking_projector_lag_events{projector}: one series per read model
//     (projections.Names), from its checkpoint in projection_checkpoints;
//   - booking_relay_lag_events: the NATS notification relay, from its
//     checkpoint in notify_relays.
//
// Each is 0 when the consumer is caught up, also on an empty log, so every
// series exists from the start; a failed query omits its series. Counts
// are capped at LagScan. With WithHead, a checkpoint beyond the head of
// the log (the log is another one than the checkpoint was read from, an
// error state the consumer never leaves by itself) reports AheadOfHead
// and logs a warning instead of 0. Create it with NewLagCollector; safe
// for concurrent scrapes.
type LagCollector struct {
	log        LogDistance
	projectors []string
	checkpoint func(ctx context.Context, projector string) (eventstore.Position, error)
	relay      func(ctx context.Context) (eventstore.Position, error)
	head       func(ctx context.Context) (eventstore.Position, error)
	logger     *slog.Logger

	projectorLag, relayLag *prometheus.Desc
}

// NewLagCollector returns the collector of the lag gauges: for each name in
// projectors, the distance from checkpoint(name) (projections.Reader's
// Checkpoint: the zero position before the projector applied anything) to
// the head of log; for the relay, from relay() (the zero position before
// the relay ever ran).
func NewLagCollector(log LogDistance, projectors []string,
	checkpoint func(ctx context.Context, projector string) (eventstore.Position, error),
	relay func(ctx context.Context) (eventstore.Position, error), logger *slog.Logger) *LagCollector {
	return &LagCollector{log: log, projectors: projectors, checkpoint: checkpoint, relay: relay, logger: logger,
		projectorLag: prometheus.NewDesc("booking_projector_lag_events",
			"Events between the log's readable head and the read model's checkpoint (capped at 100000; -1: the checkpoint is beyond the head, another log).", []string{"projector"}, nil),
		relayLag: prometheus.NewDesc("booking_relay_lag_events",
			"Events between the log's readable head and the notification relay's checkpoint (capped at 100000; -1: the checkpoint is beyond the head, another log).", nil, nil),
	}
}

// WithHead makes c compare a checkpoint with no event after it against
// head, the position of the last event of the log (kurrentdb.Store.Head),
// and report AheadOfHead for one beyond it. Use it only on a log whose
// head never moves back. Returns c.
func (c *LagCollector) WithHead(head func(ctx context.Context) (eventstore.Position, error)) *LagCollector {
	c.head = head
	return c
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.projectorLag
	ch <- c.relayLag
}

// Collect implements prometheus.Collector: one checkpoint read and one
// bounded count per consumer, 2 s in all.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var head *eventstore.Position // read once per scrape, when needed
	lag := func(consumer string, pos eventstore.Position, err error) (float64, bool) {
		if err == nil {
			var n int64
			if n, err = c.log.EventsAfter(ctx, pos, LagScan); err == nil && (n > 0 || c.head == nil || pos.IsZero()) {
				return float64(n), true
			}
			if err == nil && head == nil {
				var h eventstore.Position
				if h, err = c.head(ctx); err == nil {
					head = &h
				}
			}
			if err == nil {
				if head.Less(pos) {
					c.logger.Warn("metrics: a checkpoint is beyond the head of the event log: the log is not the one it was read from; restart booking serve to have every position checked",
						"consumer", consumer, "checkpoint", pos, "head", *head)
					return AheadOfHead, true
				}
				return 0, true
			}
		}
		c.logger.Debug("metrics: consumer lag", "err", err)
		return 0, false
	}
	for _, name := range c.projectors {
		pos, err := c.checkpoint(ctx, name)
		if v, ok := lag(name, pos, err); ok {
			ch <- prometheus.MustNewConstMetric(c.projectorLag, prometheus.GaugeValue, v, name)
		}
	}
	pos, err := c.relay(ctx)
	if v, ok := lag("relay", pos, err); ok {
		ch <- prometheus.MustNewConstMetric(c.relayLag, prometheus.GaugeValue, v)
	}
}
