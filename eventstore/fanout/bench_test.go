package fanout_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
)

// BenchmarkLogLinger measures the in-process fan-out's steady state: a Log
// whose one underlying subscription delivers benchEvents (200,000) events in batches
// of 100 (event sizes of the booking service's), followed through Linger by
// a projector-like consumer (Max 500, a short Delay) and a process-manager-
// like one (with an Age, so every round also hands over events ahead). The
// subscription keeps at most benchLag events ahead of the slower consumer,
// so both are served from the window as in the service. One op is every
// event delivered to both. Metrics: allocs/event, B/event and ns/event.
func BenchmarkLogLinger(b *testing.B) {
	const benchEvents, benchLag = 200_000, 4_000
	events := make([]eventstore.RecordedEvent, benchEvents)
	data := []byte(`{"order_id":"` + strings.Repeat("x", 300) + `"}`)
	meta := []byte(`{"actor":"actor-1","intent":"intent-1","occurred_at":"2026-12-06T16:00:00Z","schema_version":1}`)
	for i := range events {
		events[i] = eventstore.RecordedEvent{ID: fmt.Sprintf("%036d", i), Stream: fmt.Sprintf("order-%036d", i/6), Type: "PaymentSucceeded",
			Revision: eventstore.Revision(i % 6), Position: eventstore.Position{Commit: uint64(i + 1)}, Data: data, Metadata: meta,
			RecordedAt: time.Unix(int64(i), 0)}
	}
	cfgs := []fanout.LingerConfig{{Delay: time.Millisecond, Max: 500}, {Delay: 2 * time.Millisecond, Age: time.Millisecond, Max: 500}}
	run := func() {
		src := &pacedLog{events: events, batch: 100, lag: benchLag, acked: make([]int, len(cfgs))}
		src.cond = sync.NewCond(&src.mu)
		l := fanout.New(src, fanout.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for c, cfg := range cfgs {
			wg.Go(func() {
				err := fanout.Linger(ctx, l, eventstore.Position{}, cfg, func(_ context.Context, ready, _ []eventstore.RecordedEvent) error {
					if src.ack(c, len(ready)) == benchEvents {
						return errDone
					}
					return nil
				})
				if err != errDone {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		cancel()
	}
	run()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	n := float64(b.N * benchEvents)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/event")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
}

var errDone = fmt.Errorf("done")

// pacedLog is a store whose SubscribeAll delivers events (from the start,
// in batches of batch) at most lag events ahead of the consumer that acked
// the fewest, then waits for ctx. Its other methods are not implemented.
type pacedLog struct {
	eventstore.Store
	events     []eventstore.RecordedEvent
	batch, lag int

	mu    sync.Mutex
	cond  *sync.Cond
	acked []int // events handled by each consumer
}

func (p *pacedLog) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(context.Context, []eventstore.RecordedEvent) error) error {
	stop := context.AfterFunc(ctx, func() { p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() })
	defer stop()
	i := int(after.Commit) // positions are 1 + the index
	for i < len(p.events) {
		p.mu.Lock()
		for ctx.Err() == nil && i-min(p.acked[0], p.acked[1]) > p.lag {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		j := min(len(p.events), i+p.batch)
		if err := fn(ctx, p.events[i:j]); err != nil {
			return err
		}
		i = j
	}
	<-ctx.Done()
	return ctx.Err()
}

// ack adds n events handled by consumer c and returns its total.
func (p *pacedLog) ack(c, n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acked[c] += n
	p.cond.Broadcast()
	return p.acked[c]
}
