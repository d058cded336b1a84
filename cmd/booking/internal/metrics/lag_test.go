package metrics

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retrysafe/booking/eventstore"
)

// fakeLog is a log whose events are at positions 1..n (commit = prepare).
type fakeLog struct{ n uint64 }

func (l fakeLog) EventsAfter(_ context.Context, after eventstore.Position, limit int64) (int64, error) {
	if after.Commit >= l.n {
		return 0, nil
	}
	return min(int64(l.n-after.Commit), limit), nil
}

// TestLagCollector_CheckpointBeyondHeadIsMinusOne: with WithHead, a
// checkpoint beyond the head of the log (another log) reports AheadOfHead
// (-1) and logs a warning naming the consumer; one behind reports its
// distance, one at the head or at the start 0.
func TestLagCollector_CheckpointBeyondHeadIsMinusOne(t *testing.T) {
	t.Parallel()
	log := fakeLog{n: 10}
	pos := func(p uint64) eventstore.Position { return eventstore.Position{Commit: p, Prepare: p} }
	checkpoints := map[string]eventstore.Position{"orders": pos(4), "shows": pos(10), "reservations": pos(1556), "refunds": {}}
	var logs bytes.Buffer
	c := NewLagCollector(log, []string{"orders", "shows", "reservations", "refunds"},
		func(_ context.Context, name string) (eventstore.Position, error) { return checkpoints[name], nil },
		func(context.Context) (eventstore.Position, error) { return pos(1492), nil },
		slog.New(slog.NewTextHandler(&logs, nil))).
		WithHead(func(context.Context) (eventstore.Position, error) { return pos(log.n), nil })
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	want := map[string]float64{`booking_projector_lag_events{projector="orders"}`: 6, `booking_projector_lag_events{projector="refunds"}`: 10,
		`booking_projector_lag_events{projector="reservations"}`: -1, `booking_projector_lag_events{projector="shows"}`: 0, "booking_relay_lag_events": -1}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("lag gauges = %v, want %v", got, want)
	}
	for _, w := range []string{"consumer=reservations", "consumer=relay", "beyond the head of the event log"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log does not say %q:\n%s", w, logs.String())
		}
	}
	if strings.Contains(logs.String(), "consumer=shows") || strings.Contains(logs.String(), "consumer=orders") {
		t.Errorf("log warns about a consumer at or behind the head:\n%s", logs.String())
	}
}
