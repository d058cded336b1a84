package server

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/retrysafe/booking/cmd/booking/internal/natsrun"
	"github.com/retrysafe/booking/cmd/booking/internal/readmodels/readmodelstest"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
	"github.com/retrysafe/booking/projections"
)

// lagSeries returns the lag gauges booking serve's collector reports now,
// by series: booking_projector_lag_events{projector="…"} and
// booking_relay_lag_events.
func lagSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			out[name] = m.GetGauge().GetValue()
		}
	}
	return out
}

// waitLag polls the collector (up to 60 s) until every series in want has
// its value, and fails the test naming the last values otherwise.
func waitLag(t *testing.T, reg *prometheus.Registry, want map[string]float64, when string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := lagSeries(t, reg)
		ok := len(got) == len(want)
		for k, v := range want {
			if g, present := got[k]; !present || g != v {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: lag gauges = %v, want %v", when, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lagWant is every lag series: projectors at p, the relay at r.
func lagWant(p, r float64) map[string]float64 {
	want := map[string]float64{"booking_relay_lag_events": r}
	for _, name := range projections.Names() {
		want[fmt.Sprintf("booking_projector_lag_events{projector=%q}", name)] = p
	}
	return want
}

// TestLagMetrics: the lag gauges of booking serve (newLagCollector) on a
// real database and embedded NATS. Every series exists at 0 on an empty
// log; while no projector or relay runs, each counts the events appended
// (6); started, the projectors and then the relay come back to 0; with the
// relay stopped again, 4 more events leave it 4 behind while the running
// projectors return to 0; restarted, it returns to 0.
func TestLagMetrics(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := pgstore.New(pool, pgstore.WithAppendTimeout(time.Minute))
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newLagCollector(pool, store, log))
	waitLag(t, reg, lagWant(0, 0), "an empty log")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	showID := uuid.Must(uuid.NewV7()).String()
	price := domain.Money{Amount: 1000, Currency: "EUR"}
	add := func(stream string, events ...eventstore.Typed) {
		t.Helper()
		readmodelstest.Append(t, ctx, store, stream, events...)
	}
	hold := func() { // 2 events
		held := domain.SeatsHeld{ShowID: showID, ReservationID: uuid.Must(uuid.NewV7()).String(), Actor: "alice", Quantity: 2, Amount: price.Times(2)}
		add(domain.ShowStream(showID), held)
		add(domain.ReservationStream(held.ReservationID), domain.HeldFrom(held))
	}
	add(domain.ShowStream(showID), domain.ShowScheduled{ShowID: showID, Name: "S", StartsAt: time.Now().Add(time.Hour), Capacity: 50, Price: price})
	add(domain.ShowStream(showID), domain.ShowScheduled{ShowID: uuid.Must(uuid.NewV7()).String(), Name: "T", StartsAt: time.Now().Add(time.Hour), Capacity: 5, Price: price})
	hold()
	hold()
	waitLag(t, reg, lagWant(6, 6), "6 events, nothing running")

	wait := readmodelstest.RunLive(ctx, pool, store, log)
	defer wait()
	defer cancel()
	waitLag(t, reg, lagWant(0, 6), "projectors running, relay stopped")

	notif, err := natsrun.Start(ctx, natsrun.Config{Addr: "127.0.0.1:0", DuplicateWindow: 10 * time.Minute,
		RecoveryInterval: 2 * time.Second, DataDir: t.TempDir()}, log, pool, store)
	if err != nil {
		t.Fatal(err)
	}
	defer notif.Close()
	runRelay := func() (stop func()) {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			notif.RunRelay(rctx)
		}()
		return func() { rcancel(); <-done }
	}
	stop := runRelay()
	waitLag(t, reg, lagWant(0, 0), "projectors and relay running")

	stop()
	hold()
	hold()
	waitLag(t, reg, lagWant(0, 4), "relay stopped, 4 more events")
	stop = runRelay()
	defer stop()
	waitLag(t, reg, lagWant(0, 0), "relay running again")
}
