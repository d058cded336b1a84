package fanout

import (
	"context"
	"errors"
	"slices"
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
// round, unless Linger stops first. Neither slice may be modified or
// used after fn returns: Linger reuses their array for the next round
// (an event copied out of them stays valid; its Data and Metadata are
// never written).
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	w := &lingerBuffer{limit: 4 * cfg.Max, arrived: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	subDone := make(chan error, 1)
	go func() { subDone <- log.SubscribeAll(ctx, after, w.add) }()
	stop := func(err error) error {
		cancel()
		<-subDone
		return err
	}
	var out []eventstore.RecordedEvent // the round's events, reused from round to round
	for {
		n, oldest := w.waiting()
		if wait := cfg.Delay - time.Since(oldest); n == 0 || (n < cfg.Max && wait > 0) {
			if ended, err := w.await(ctx, n > 0, wait, subDone); ended {
				return err
			} else if err != nil {
				return stop(err)
			}
			continue
		}
		var k int
		out, k = w.round(out[:0], cfg.Max, cfg.Age)
		err := fn(ctx, out[:k:k], out[k:len(out):len(out)])
		clear(out) // the buffer keeps no event alive between rounds
		if err != nil {
			return stop(err)
		}
	}
}

// lingerBuffer holds the events Linger received and has not handed over
// as ready, each with when it arrived, at most limit of them (the
// subscription waits for room beyond). Safe for concurrent use.
type lingerBuffer struct {
	limit   int
	arrived chan struct{} // an event joined buf
	room    chan struct{} // buf shrank

	mu  sync.Mutex
	buf []lingering
}

// lingering is an event waiting in a lingerBuffer since at.
type lingering struct {
	e  eventstore.RecordedEvent
	at time.Time
}

// signal wakes the one waiter of c, if any, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// add is the subscription's callback: it waits until the buffer has room
// (or ctx is done), then appends batch and signals its arrival.
func (w *lingerBuffer) add(ctx context.Context, batch []eventstore.RecordedEvent) error {
	for {
		w.mu.Lock()
		if len(w.buf) < w.limit {
			break
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.room:
		}
	}
	now := time.Now()
	for i := range batch {
		w.buf = append(w.buf, lingering{e: batch[i], at: now})
	}
	w.mu.Unlock()
	signal(w.arrived)
	return nil
}

// waiting returns how many events wait and when the oldest arrived (the
// zero time when none).
func (w *lingerBuffer) waiting() (n int, oldest time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		oldest = w.buf[0].at
	}
	return len(w.buf), oldest
}

// await waits for an event to arrive, for wait to pass (only when timed),
// for ctx to end (its error) or for the subscription to end: ended, with
// ctx's error when ctx is done, else the subscription's (an error when it
// returned none).
func (w *lingerBuffer) await(ctx context.Context, timed bool, wait time.Duration, subDone <-chan error) (ended bool, err error) {
	var fire <-chan time.Time
	if timed {
		t := time.NewTimer(wait)
		defer t.Stop()
		fire = t.C
	}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case err := <-subDone:
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		if err == nil {
			err = errors.New("fanout: linger: subscription ended without an error")
		}
		return true, err
	case <-w.arrived:
	case <-fire:
	}
	return false, nil
}

// round takes the events of a round out of the buffer and appends them to
// out: first, as ready (the first k), those received at least age ago (no
// more than most; the first most when so many wait, however young), then a
// copy of the rest (ahead), which stay in the buffer.
func (w *lingerBuffer) round(out []eventstore.RecordedEvent, most int, age time.Duration) (_ []eventstore.RecordedEvent, k int) {
	w.mu.Lock()
	cut := time.Now().Add(-age)
	for k < len(w.buf) && k < most && !w.buf[k].at.After(cut) {
		k++
	}
	if k == 0 {
		k = min(len(w.buf), most)
	}
	out = slices.Grow(out, len(w.buf))
	for i := range w.buf {
		out = append(out, w.buf[i].e)
	}
	rest := copy(w.buf, w.buf[k:])
	clear(w.buf[rest:])
	w.buf = w.buf[:rest]
	w.mu.Unlock()
	signal(w.room)
	return out, k
}
