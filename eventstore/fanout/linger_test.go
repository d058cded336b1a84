package fanout_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/memstore"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// round is one call of a Linger consumer.
type round struct {
	ready, ahead []string
	at           time.Time
}

// lingerRounds runs fanout.Linger over l from after and records its
// rounds; stop cancels it and returns Linger's error.
func lingerRounds(ctx context.Context, l eventstore.Store, after eventstore.Position, cfg fanout.LingerConfig,
	fail func(ready []eventstore.RecordedEvent) error) (get func() []round, stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var rounds []round
	done := make(chan error, 1)
	go func() {
		done <- fanout.Linger(ctx, l, after, cfg, func(_ context.Context, ready, ahead []eventstore.RecordedEvent) error {
			mu.Lock()
			rounds = append(rounds, round{ready: storetest.IDs(ready), ahead: storetest.IDs(ahead), at: time.Now()})
			mu.Unlock()
			if fail != nil {
				return fail(ready)
			}
			return nil
		})
	}()
	get = func() []round {
		mu.Lock()
		defer mu.Unlock()
		return append([]round(nil), rounds...)
	}
	return get, func() error { cancel(); return <-done }
}

// readyOf concatenates the ready events of rounds.
func readyOf(rounds []round) []string {
	var out []string
	for _, r := range rounds {
		out = append(out, r.ready...)
	}
	return out
}

// TestLinger_GathersEventsIntoRoundsInLogOrder: events appended one by one
// within the delay are handed over in one round, the rounds together are
// exactly the log in order, and Max splits a larger backlog.
func TestLinger_GathersEventsIntoRoundsInLogOrder(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	store := memstore.New()
	l := fanout.New(store, fanout.Config{})
	get, stop := lingerRounds(ctx, l, eventstore.Position{}, fanout.LingerConfig{Delay: 400 * time.Millisecond, Max: 4}, nil)
	for i := range 3 {
		if _, err := l.Append(ctx, "s-a", eventstore.Any(), newEvent(i)); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Eventually(t, ctx, func() error {
		if n := len(readyOf(get())); n < 3 {
			return errors.New("waiting for 3 events")
		}
		return nil
	})
	if rs := get(); len(rs) != 1 {
		t.Errorf("3 events appended within the delay came in %d rounds, want 1: %v", len(rs), rs)
	}
	// A backlog of 10 is handed over in rounds of at most Max.
	data := make([]eventstore.EventData, 10)
	for i := range data {
		data[i] = newEvent(i)
	}
	if _, err := l.Append(ctx, "s-b", eventstore.Any(), data...); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, ctx, func() error {
		if n := len(readyOf(get())); n < 13 {
			return errors.New("waiting for 13 events")
		}
		return nil
	})
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Linger = %v, want context.Canceled", err)
	}
	rs := get()
	for _, r := range rs {
		if len(r.ready) == 0 || len(r.ready) > 4 {
			t.Errorf("a round of %d ready events, want 1 to 4", len(r.ready))
		}
	}
	if diff := cmp.Diff(readLog(t, ctx, store, eventstore.Position{}), readyOf(rs)); diff != "" {
		t.Errorf("ready events differ from the log (-log +ready):\n%s", diff)
	}
}

// TestLinger_AgeHoldsYoungEventsAsAhead: with an Age, an event is handed
// over as ready only once it has waited that long; younger events come as
// ahead first, then as ready in a later round.
//
// The scene: the first event is appended, and the second once the first is
// older than Age; the second makes Max events wait, so a round starts at
// once, with the first ready and the second (just arrived) ahead; the
// second is ready a Delay later. A machine that stalls for more than Age
// between the second's arrival and that round, or the first's append and
// its arrival, makes another scene (the round then rightly hands both over
// as ready), so it is tried again, at most five times.
func TestLinger_AgeHoldsYoungEventsAsAhead(t *testing.T) {
	t.Parallel()
	const (
		age   = 1500 * time.Millisecond
		delay = 5 * time.Second
	)
	for attempt := 1; ; attempt++ {
		ctx := testContext(t)
		store := memstore.New()
		l := fanout.New(store, fanout.Config{})
		get, stop := lingerRounds(ctx, l, eventstore.Position{}, fanout.LingerConfig{Delay: delay, Age: age, Max: 2}, nil)
		first := newEvent(0)
		appended := time.Now()
		if _, err := l.Append(ctx, "s-a", eventstore.Any(), first); err != nil {
			t.Fatal(err)
		}
		time.Sleep(age + time.Second) // the condition under test, not a wait for state: the first event is old, the second young
		second := newEvent(1)
		if _, err := l.Append(ctx, "s-a", eventstore.Any(), second); err != nil {
			t.Fatal(err)
		}
		storetest.Eventually(t, ctx, func() error {
			if n := len(readyOf(get())); n < 2 {
				return errors.New("waiting for 2 events")
			}
			return nil
		})
		stop()
		rs := get()
		if diff := cmp.Diff([]string{first.ID, second.ID}, readyOf(rs)); diff != "" {
			t.Fatalf("ready events differ from the log (-log +ready):\n%s", diff)
		}
		if waited := rs[0].at.Sub(appended); waited < age {
			t.Errorf("the first event was handed over after %s, want at least the age %s", waited, age)
		}
		if len(rs) != 2 || len(rs[0].ahead) == 0 {
			if attempt < 5 {
				t.Logf("attempt %d: rounds %+v: the machine stalled past the scene; trying again", attempt, rs)
				continue
			}
			t.Fatalf("rounds = %+v after %d attempts, want 2 with the second event ahead in the first", rs, attempt)
		}
		if !cmp.Equal(rs[0].ready, []string{first.ID}) || !cmp.Equal(rs[0].ahead, []string{second.ID}) {
			t.Errorf("first round: ready %v ahead %v, want ready [%s] ahead [%s]", rs[0].ready, rs[0].ahead, first.ID, second.ID)
		}
		if !cmp.Equal(rs[1].ready, []string{second.ID}) {
			t.Errorf("second round: ready %v, want [%s]", rs[1].ready, second.ID)
		}
		return
	}
}

// TestLinger_ErrorStopsAndNothingIsLost: fn's error is returned as is, and
// a new Linger from the last position fn accepted gets every later event
// (what the caller's checkpoint relies on).
func TestLinger_ErrorStopsAndNothingIsLost(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	store := memstore.New()
	l := fanout.New(store, fanout.Config{})
	for i := range 6 {
		if _, err := l.Append(ctx, "s-a", eventstore.Any(), newEvent(i)); err != nil {
			t.Fatal(err)
		}
	}
	errBoom := errors.New("boom")
	var accepted eventstore.Position
	calls := 0
	err := fanout.Linger(ctx, l, eventstore.Position{}, fanout.LingerConfig{Max: 2}, func(_ context.Context, ready, _ []eventstore.RecordedEvent) error {
		calls++
		if calls == 2 {
			return errBoom
		}
		accepted = ready[len(ready)-1].Position
		return nil
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Linger = %v, want the consumer's error", err)
	}
	get, stop := lingerRounds(ctx, l, accepted, fanout.LingerConfig{}, nil)
	storetest.Eventually(t, ctx, func() error {
		if n := len(readyOf(get())); n < 4 {
			return errors.New("waiting for the 4 events after the accepted position")
		}
		return nil
	})
	stop()
	if diff := cmp.Diff(readLog(t, ctx, store, accepted), readyOf(get())); diff != "" {
		t.Errorf("after a restart from the accepted position (-log +ready):\n%s", diff)
	}
}
