package server

import (
	"context"
	"log/slog"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
)

// hostClock is the service clock of these tests: the host's (standing in
// for PostgreSQL's now(), which the service decides by).
type hostClock struct{}

func (hostClock) Now(context.Context) (time.Time, error) { return time.Now().UTC(), nil }

// TestClockSkew_KurrentDBClockOffIsMeasuredNotShown: the KurrentDB double's
// clock runs 20 s ahead of the service's (Options.Now), so every event's
// "created" is 20 s late. The explanation of a reservation's intent shows
// the service's times (recorded_at, expires_at and every timeline entry
// within the test's own reading of the service clock), never the store's;
// and booking_event_store_clock_skew_seconds, read back from one of the
// handler's own appends, shows the 20 s.
func TestClockSkew_KurrentDBClockOffIsMeasuredNotShown(t *testing.T) {
	t.Parallel()
	const offset = 20 * time.Second
	srv, err := kurrentdbtest.Start("127.0.0.1:0", kurrentdbtest.Options{Now: func() time.Time { return time.Now().Add(offset) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	store, err := kurrentdb.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mx := metrics.New("test")
	h := commands.New(commands.DefaultConfig(), store, hostClock{}, nil, commands.NewRegistry(), slog.New(slog.DiscardHandler),
		commands.WithMetrics(mx))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go h.RunClockSkew(ctx)

	before := time.Now().UTC()
	show, _, err := h.ScheduleShow(ctx, commands.Request{Actor: "admin", Operation: commands.OpScheduleShow, Key: "show"},
		commands.ScheduleShowCommand{Name: "Show", StartsAt: before.Add(48 * time.Hour), Capacity: 10, Price: domain.Money{Amount: 1000, Currency: "EUR"}})
	if err != nil {
		t.Fatalf("ScheduleShow = %v", err)
	}
	if _, _, err := h.ReserveSeats(ctx, commands.Request{Actor: "alice", Operation: commands.OpReserveSeats, Key: "res"},
		commands.ReserveSeatsCommand{ShowID: show.ID, Quantity: 1}); err != nil {
		t.Fatalf("ReserveSeats = %v", err)
	}
	after := time.Now().UTC()
	xs, err := h.ExplainIntents(ctx, "alice", "res")
	if err != nil || len(xs) != 1 {
		t.Fatalf("ExplainIntents = %d, %v; want one intent", len(xs), err)
	}
	x := xs[0]
	inside := func(what string, at time.Time) {
		if at.Before(before) || at.After(after) {
			t.Errorf("%s = %s, want the service clock's, within [%s, %s] (the store's clock is %s ahead)", what, at, before, after, offset)
		}
	}
	inside("recorded_at", x.RecordedAt)
	inside("expires_at - retention", x.ExpiresAt.Add(-commands.DefaultConfig().IntentRetention))
	if len(x.Timeline) < 2 {
		t.Fatalf("timeline = %+v, want the intent and the reservation", x.Timeline)
	}
	for _, e := range x.Timeline {
		inside(e.Step+".at", e.At)
	}

	// The gauge: the first append was sampled, and RunClockSkew reads it
	// back within ClockSkewEvery.
	scrapeSkew := func() float64 {
		rec := httptest.NewRecorder()
		mx.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		got := parseSamples(t, rec.Body.String())
		return got["booking_event_store_clock_skew_seconds"]
	}
	deadline := time.Now().Add(4 * commands.ClockSkewEvery)
	var skew float64
	for skew = scrapeSkew(); math.Abs(skew-offset.Seconds()) > 1 && time.Now().Before(deadline); skew = scrapeSkew() {
		time.Sleep(100 * time.Millisecond)
	}
	if math.Abs(skew-offset.Seconds()) > 1 {
		t.Errorf("booking_event_store_clock_skew_seconds = %v, want %v ± 1", skew, offset.Seconds())
	}
}
