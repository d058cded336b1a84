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
// are capped at LagScan. Create it with NewLagCollector; safe for
// concurrent scrapes.
type LagCollector struct {
	log        LogDistance
	projectors []string
	checkpoint func(ctx context.Context, projector string) (eventstore.Position, error)
	relay      func(ctx context.Context) (eventstore.Position, error)
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
			"Events between the log's readable head and the read model's checkpoint (capped at 100000).", []string{"projector"}, nil),
		relayLag: prometheus.NewDesc("booking_relay_lag_events",
			"Events between the log's readable head and the notification relay's checkpoint (capped at 100000).", nil, nil),
	}
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
	lag := func(pos eventstore.Position, err error) (float64, bool) {
		if err == nil {
			var n int64
			if n, err = c.log.EventsAfter(ctx, pos, LagScan); err == nil {
				return float64(n), true
			}
		}
		c.logger.Debug("metrics: consumer lag", "err", err)
		return 0, false
	}
	for _, name := range c.projectors {
		if v, ok := lag(c.checkpoint(ctx, name)); ok {
			ch <- prometheus.MustNewConstMetric(c.projectorLag, prometheus.GaugeValue, v, name)
		}
	}
	if v, ok := lag(c.relay(ctx)); ok {
		ch <- prometheus.MustNewConstMetric(c.relayLag, prometheus.GaugeValue, v)
	}
}
