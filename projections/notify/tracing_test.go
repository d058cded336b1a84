package notify

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// TestRelayContinuesTheEventsTrace: an event that keeps a trace context is
// published in a producer span that is a child of the span it keeps, and
// its notification carries the publish span's traceparent and the
// tracestate; the reference consumer's span and Handler continue beneath
// it. An event decided outside any trace is published without trace
// headers, and the relay starts no trace for it.
func TestRelayContinuesTheEventsTrace(t *testing.T) {
	e := newEnv(t, mustEmbedded(t), time.Minute)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled})
	traced, untraced := uuid.NewString(), uuid.NewString()
	var last eventstore.Position
	for _, ev := range []struct {
		order string
		meta  eventstore.Metadata
	}{
		{traced, eventstore.Metadata{Traceparent: "00-" + caller.TraceID().String() + "-" + caller.SpanID().String() + "-01", Tracestate: "booking=t"}},
		{untraced, eventstore.Metadata{}},
	} {
		ev.meta.OccurredAt, ev.meta.SchemaVersion = time.Now().UTC(), 1
		d, err := eventstore.Encode(uuid.NewString(), domain.OrderConfirmed{OrderID: ev.order}, ev.meta)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.store.Append(e.ctx, domain.OrderStream(ev.order), eventstore.Any(), d)
		if err != nil {
			t.Fatal(err)
		}
		last = res.Position
	}
	cfg := testRelayConfig(e)
	cfg.TracerProvider = tp
	r := NewRelay(e.store, e.pool, e.nc, cfg)
	run := start(t, e.ctx, r.Run)
	waitFor(t, 60*time.Second, "checkpoint at head", func() bool { return r.Stats().Checkpoint == last })
	run.stop(t)

	var publish sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindProducer {
			if publish != nil {
				t.Fatalf("two publish spans (%s and %s), want one: the untraced event's publish started a trace", publish.Name(), s.Name())
			}
			publish = s
		}
	}
	if publish == nil || publish.SpanContext().TraceID() != caller.TraceID() || publish.Parent().SpanID() != caller.SpanID() || !publish.Parent().IsRemote() {
		t.Fatalf("publish span %v, want one in trace %s whose remote parent is the event's span %s", publish, caller.TraceID(), caller.SpanID())
	}
	msgs := e.readStream(t)
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(msgs))
	}
	for _, m := range msgs {
		tp, ts := m.header.Get(HeaderTraceparent), m.header.Get(HeaderTracestate)
		switch m.payload.Stream {
		case domain.OrderStream(traced):
			want := "00-" + caller.TraceID().String() + "-" + publish.SpanContext().SpanID().String() + "-01"
			if tp != want || ts != "booking=t" {
				t.Errorf("traced event's notification: traceparent %q tracestate %q, want %q and booking=t", tp, ts, want)
			}
		default:
			if tp != "" || ts != "" {
				t.Errorf("untraced event's notification: traceparent %q tracestate %q, want none", tp, ts)
			}
		}
	}

	var mu sync.Mutex
	handled := map[string]trace.SpanContext{}
	sub := NewSubscriber(e.js, e.pool, SubscriberConfig{Durable: "traced", Logger: e.log, TracerProvider: tp,
		Handler: func(ctx context.Context, _ pgx.Tx, n *Notification) error {
			mu.Lock()
			defer mu.Unlock()
			handled[n.Stream] = trace.SpanContextFromContext(ctx)
			return nil
		}})
	srun := start(t, e.ctx, sub.Run)
	waitFor(t, 60*time.Second, "both notifications handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 2 })
	srun.stop(t)
	mu.Lock()
	defer mu.Unlock()
	if sc := handled[domain.OrderStream(traced)]; sc.TraceID() != caller.TraceID() {
		t.Errorf("Handler of the traced notification ran in trace %s, want %s", sc.TraceID(), caller.TraceID())
	}
	consumed := 0
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer && s.SpanContext().TraceID() == caller.TraceID() {
			consumed++
			if s.Parent().SpanID() != publish.SpanContext().SpanID() {
				t.Errorf("consumer span's parent %s, want the publish span %s", s.Parent().SpanID(), publish.SpanContext().SpanID())
			}
		}
	}
	if consumed != 1 {
		t.Errorf("%d consumer spans in the event's trace, want 1", consumed)
	}
}
