package notify

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// benchOrders is the size of the generated log: 10 events per order, 8 of
// them published.
const benchOrders = 2000

// BenchmarkRelay measures the relay's throughput (events published and
// acknowledged per second, reading the log from PostgreSQL) over a
// generated log, and in the same run, against the same embedded server
// (file storage), raw JetStream asynchronous publishing of the same
// messages (same sizes, Nats-Msg-Id, same in-flight bound). It reports
// relay-events/s, raw-msgs/s and their ratio. Each iteration publishes the
// whole log into a fresh stream, once raw and once through the relay.
func BenchmarkRelay(b *testing.B) {
	e := newEnv(b, startEmbedded(b), DefaultDuplicateWindow)
	last := benchLog(b, e)
	events := e.publicEvents(b)
	msgs := make([]*nats.Msg, len(events))
	bytes := 0
	for i, ev := range events {
		m, _, err := NewMessage(ev)
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = m
		bytes += len(m.Data)
	}
	cfg := RelayConfig{Logger: e.log}.withDefaults()
	b.Logf("log: %d events, %d published, %d payload bytes on average; max in flight %d", benchOrders*10, len(msgs), bytes/len(msgs), cfg.MaxInFlight)

	var relayTime, rawTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rawTime += benchRaw(b, e, msgs, cfg.MaxInFlight)
		relayTime += benchRelayOnce(b, e, cfg, len(msgs), last)
	}
	b.StopTimer()
	n := float64(b.N * len(msgs))
	relayRate, rawRate := n/relayTime.Seconds(), n/rawTime.Seconds()
	b.ReportMetric(relayRate, "relay-events/s")
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(relayRate/rawRate, "relay/raw")
}

// resetStream deletes and recreates stream BOOKING.
func (e *env) resetStream(tb testing.TB) {
	tb.Helper()
	if err := e.js.DeleteStream(e.ctx, StreamName); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		tb.Fatal(err)
	}
	s, err := EnsureStream(e.ctx, e.js, StreamSpec{Duplicates: DefaultDuplicateWindow})
	if err != nil {
		tb.Fatal(err)
	}
	e.stream = s
}

// benchRaw publishes msgs asynchronously with at most maxInFlight pending
// and returns the time until every ack arrived.
func benchRaw(b *testing.B, e *env, msgs []*nats.Msg, maxInFlight int) time.Duration {
	e.resetStream(b)
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(maxInFlight))
	if err != nil {
		b.Fatal(err)
	}
	defer js.CleanupPublisher()
	startAt := time.Now()
	for _, m := range msgs {
		c := &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}
		if _, err := js.PublishMsgAsync(c, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("raw publish did not complete")
	}
	d := time.Since(startAt)
	if got := e.streamCount(b); got != len(msgs) {
		b.Fatalf("raw publish stored %d messages, want %d", got, len(msgs))
	}
	return d
}

// benchRelayOnce runs a relay from an empty checkpoint into a fresh stream
// and returns the time until all n messages were acknowledged.
func benchRelayOnce(b *testing.B, e *env, cfg RelayConfig, n int, last eventstore.Position) time.Duration {
	e.resetStream(b)
	if _, err := e.pool.Exec(e.ctx, `DELETE FROM notify_relays`); err != nil {
		b.Fatal(err)
	}
	r := NewRelay(e.store, e.pool, e.nc, cfg)
	startAt := time.Now()
	run := start(b, e.ctx, r.Run)
	for r.Stats().Published < int64(n) {
		time.Sleep(200 * time.Microsecond)
	}
	d := time.Since(startAt)
	waitFor(b, time.Minute, "checkpoint at the end of the log", func() bool { return r.Stats().Checkpoint == last })
	run.stop(b)
	if got := e.streamCount(b); got != n {
		b.Fatalf("relay stored %d messages, want %d", got, n)
	}
	return d
}

// benchLog appends benchOrders order flows, 8 goroutines at once, one
// append per stream and step, and returns the last position.
func benchLog(b *testing.B, e *env) eventstore.Position {
	b.Helper()
	var (
		mu   sync.Mutex
		last eventstore.Position
		wg   sync.WaitGroup
		errs = make(chan error, 8)
	)
	enc := func(ev domain.Event) eventstore.EventData {
		d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), ev, eventstore.Metadata{Actor: "alice", OccurredAt: time.Now().UTC(), SchemaVersion: 1})
		if err != nil {
			panic(err)
		}
		return d
	}
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			price := domain.Money{Amount: 4500, Currency: "EUR"}
			for i := g; i < benchOrders; i += 8 {
				show, res, order := uuid.NewString(), uuid.NewString(), uuid.NewString()
				at := time.Now().UTC()
				appends := []struct {
					stream string
					events []eventstore.EventData
				}{
					{domain.ShowStream(show), []eventstore.EventData{
						enc(domain.ShowScheduled{ShowID: show, Name: "Concert", StartsAt: at, Capacity: 100, Price: price}),
						enc(domain.SeatsHeld{ShowID: show, ReservationID: res, Actor: "alice", Intent: "intent-x", Quantity: 2, Amount: price.Times(2), ExpiresAt: at})}},
					{domain.ReservationStream(res), []eventstore.EventData{
						enc(domain.ReservationHeld{ReservationID: res, ShowID: show, Actor: "alice", Quantity: 2, Amount: price.Times(2), ExpiresAt: at})}},
					{"intent-" + uuid.NewString(), []eventstore.EventData{
						enc(domain.IntentRecorded{Actor: "alice", Operation: "POST /v1/orders", TargetID: order})}},
					{domain.ClaimStream(res), []eventstore.EventData{
						enc(domain.OrderClaimed{ReservationID: res, OrderID: order, ShowID: show, Actor: "alice", Quantity: 2, Amount: price.Times(2)})}},
					{domain.OrderStream(order), []eventstore.EventData{
						enc(domain.OrderPlaced{OrderID: order, ReservationID: res, ShowID: show, Actor: "alice", Quantity: 2, Amount: price.Times(2), PaymentDeadline: at,
							Private: &domain.OrderPrivate{PaymentToken: "tok_visa"}}),
						enc(domain.PaymentAttemptStarted{OrderID: order, Attempt: 1, ProviderKey: "order-" + order + "-1", Owner: "x", Amount: price.Times(2), StartedAt: at,
							Private: &domain.AttemptPrivate{RequestBody: `{"amount":9000}`}}),
						enc(domain.PaymentSucceeded{OrderID: order, Attempt: 1, ChargeID: "ch_" + order, Amount: price.Times(2)}),
						enc(domain.OrderConfirmed{OrderID: order, Tickets: []domain.Ticket{{ID: uuid.NewString()}, {ID: uuid.NewString()}}})}},
					{domain.ReservationStream(res), []eventstore.EventData{
						enc(domain.ReservationOrdered{ReservationID: res, OrderID: order})}},
				}
				for _, a := range appends {
					r, err := e.store.Append(context.Background(), a.stream, eventstore.Any(), a.events...)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if last.Less(r.Position) {
						last = r.Position
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	// Wait until the log is readable up to the last append.
	waitFor(b, time.Minute, "log horizon", func() bool { h, _ := e.store.Head(e.ctx); return h == last })
	return last
}
