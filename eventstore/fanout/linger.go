package fanout

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// Follower is what Linger follows: a log with the store's SubscribeAll
// (a *Log, or any eventstore.Store).
type Follower interface {
	SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error
}

// LingerConfig configures Linger. Delay, Age and Max are bounds on the
// process's monotonic clock and in events; none of them decides anything
// about the log's content.
type LingerConfig struct {
	// Delay is how long the oldest waiting event waits before a round
	// starts: events received meanwhile join the round, so a follower
	// that writes per round writes once per Delay while events keep
	// coming. 0: a round starts as soon as an event arrives (what
	// SubscribeAll does).
	Delay time.Duration
	// Age is how long an event waits at least before it is handed over as
	// ready (at most Delay; 0: every waiting event is ready). Events
	// received less than Age ago are handed over as ahead, a read-only
	// look at the log after the ready events, and again as ready in a
	// later round.
	Age time.Duration
	// Max is the most events handed over as ready in one round (default
	// DefaultBatchSize); a round starts at once when Max events wait. At
	// most 4 × Max events wait: the subscription pauses beyond that (a
	// *Log's shared subscription does not: this follower falls behind its
	// window and catches up from the store).
	Max int
}

// Linger follows log from after like SubscribeAll, but hands the events over
// in rounds (see LingerConfig): fn gets the ready events — in log order, the
// next ones after the previous round's, never empty, at most Max — and the
// events already received after them (ahead; possibly empty). ahead is only
// a look further along the log: those events come again as ready in a later
// round, unless Linger stops first. Neither slice may be modified.
//
// Delivery is what the caller's checkpoint makes it: Linger keeps no
// position of its own, so a caller that saves, in or after fn, only
// positions of ready events it has handled keeps at-least-once delivery —
// events still waiting when Linger returns were never handed over as ready
// and are read again from the caller's checkpoint.
//
// It blocks until ctx is done (returns ctx.Err()), fn fails (returns its
// error as is) or the subscription fails (returns its error). The added
// delay of an event is at most Delay plus the rounds before it (with Age,
// between Age and Delay), as the ARCHITECTURE.md section "Performance"
// describes for each follower that uses it.
func Linger(ctx context.Context, log Follower, after eventstore.Position, cfg LingerConfig, fn func(ctx context.Context, ready, ahead []eventstore.RecordedEvent) error) error {
	if cfg.Max <= 0 {
		cfg.Max = DefaultBatchSize
	}
	cfg.Age = min(max(cfg.Age, 0), max(cfg.Delay, 0))
	limit := 4 * cfg.Max
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type waiting struct {
		e  eventstore.RecordedEvent
		at time.Time
	}
	var (
		mu      sync.Mutex
		buf     []waiting
		arrived = make(chan struct{}, 1) // an event joined buf
		room    = make(chan struct{}, 1) // buf shrank
	)
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	subDone := make(chan error, 1)
	go func() {
		subDone <- log.SubscribeAll(ctx, after, func(ctx context.Context, batch []eventstore.RecordedEvent) error {
			for {
				mu.Lock()
				if len(buf) < limit {
					break
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-room:
				}
			}
			now := time.Now()
			for i := range batch {
				buf = append(buf, waiting{e: batch[i], at: now})
			}
			mu.Unlock()
			signal(arrived)
			return nil
		})
	}()
	stop := func(err error) error {
		cancel()
		<-subDone
		return err
	}
	subscriptionEnded := func(err error) error {
		if err == nil {
			err = errors.New("fanout: linger: subscription ended without an error")
		}
		return err
	}

	for {
		mu.Lock()
		n := len(buf)
		var oldest time.Time
		if n > 0 {
			oldest = buf[0].at
		}
		mu.Unlock()
		if wait := cfg.Delay - time.Since(oldest); n == 0 || (n < cfg.Max && wait > 0) {
			var fire <-chan time.Time
			var t *time.Timer
			if n > 0 {
				t = time.NewTimer(wait)
				fire = t.C
			}
			select {
			case <-ctx.Done():
				return stop(ctx.Err())
			case err := <-subDone:
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return subscriptionEnded(err)
			case <-arrived:
			case <-fire:
			}
			if t != nil {
				t.Stop()
			}
			continue
		}

		// A round: the events received at least Age ago (at most Max; all
		// of the first Max when so many wait, however young), and a look at
		// the rest.
		mu.Lock()
		cut := time.Now().Add(-cfg.Age)
		k := 0
		for k < len(buf) && k < cfg.Max && !buf[k].at.After(cut) {
			k++
		}
		if k == 0 {
			k = min(len(buf), cfg.Max)
		}
		ready := make([]eventstore.RecordedEvent, k)
		for i := range k {
			ready[i] = buf[i].e
		}
		ahead := make([]eventstore.RecordedEvent, len(buf)-k)
		for i := range ahead {
			ahead[i] = buf[k+i].e
		}
		rest := copy(buf, buf[k:])
		clear(buf[rest:])
		buf = buf[:rest]
		mu.Unlock()
		signal(room)
		if err := fn(ctx, ready, ahead); err != nil {
			return stop(err)
		}
	}
}
