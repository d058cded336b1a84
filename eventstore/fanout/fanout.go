// Package fanout shares one catch-up subscription to the global log among
// every log follower of a process.
//
// A Log wraps an eventstore.Store and is one itself: every method but
// SubscribeAll is the store's. Its SubscribeAll has the store's contract
// (batches of the events after a position, in log order, first catching up
// and then following new appends, until ctx is done or fn fails), but all
// the subscriptions of a Log are served by ONE subscription of the
// underlying store, which fills a bounded in-memory window of the most
// recent events:
//
//   - a consumer whose position is inside the window (or ahead of it) is
//     served from memory;
//   - a consumer behind the window catches up by reading the store itself
//     (ReadAll, a page at a time) until its position enters the window, then
//     joins it;
//   - the underlying subscription never waits for a consumer: a consumer too
//     slow to keep up finds its position evicted from the window and falls
//     back to reading the store, so it holds back nobody else.
//
// Each consumer keeps its own position (its checkpoint and its lease are
// the caller's, as with the store's own SubscribeAll): delivery stays
// at-least-once, in log order, with no gap and no reordering. This holds
// because the window is always one contiguous stretch of the log — every
// event after its start position up to its last event, exactly as the
// underlying subscription delivered them — and positions are compared only
// with eventstore.Position.Less, so it works on every backend.
//
// The underlying subscription starts with the first consumer (at that
// consumer's position), stops when the last one leaves, and is restarted
// after an error from the window's last event, after a delay that doubles
// from RetryMin to RetryMax; consumers wait meanwhile.
package fanout

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// Defaults of Config.
const (
	// DefaultMaxEvents is the most events the window keeps.
	DefaultMaxEvents = 8192
	// DefaultMaxBytes is the most bytes the window keeps, as counted by
	// eventSize.
	DefaultMaxBytes = 16 << 20
	// DefaultBatchSize is the most events handed to a consumer at once,
	// from memory or from a catch-up read (ReadAll's limit).
	DefaultBatchSize = 500
	// DefaultRetryMin and DefaultRetryMax bound the delay before the
	// underlying subscription is restarted after an error.
	DefaultRetryMin = 100 * time.Millisecond
	DefaultRetryMax = 5 * time.Second
)

// eventOverhead approximates the bytes of a RecordedEvent beyond its
// strings and byte slices (the struct and the slice headers).
const eventOverhead = 160

// Config configures a Log. Zero values take the defaults.
type Config struct {
	// MaxEvents bounds the window in events (default DefaultMaxEvents).
	MaxEvents int
	// MaxBytes bounds the window in bytes: the sum over its events of ID,
	// Stream, Type, Data and Metadata lengths plus a fixed overhead of 160
	// bytes per event (default DefaultMaxBytes). The oldest events are
	// evicted first, as soon as either bound is passed; a batch handed to a
	// consumer keeps its events alive until the consumer returns, so the
	// memory held is at most about twice the bound.
	MaxBytes int
	// BatchSize is the most events per call of a consumer's fn (default
	// DefaultBatchSize); it is also the page size of catch-up reads.
	BatchSize int
	// RetryMin and RetryMax bound the delay before the underlying
	// subscription is restarted after it failed (defaults 100 ms and 5 s).
	RetryMin, RetryMax time.Duration
	// ReadGap, when > 0, is the least time between the end of one
	// delivery of the underlying subscription and its next read of the
	// store: while events keep arriving, the store is read at most once
	// per ReadGap, each read taking everything appended meanwhile, instead
	// of once per append (a local append wakes the subscription at once).
	// It adds at most ReadGap to every consumer's delay. 0: no gap.
	ReadGap time.Duration
	// Logger receives a warning for each failure of the underlying
	// subscription; default: discarded.
	Logger *slog.Logger
}

// Stats are counters of a Log since it was made.
type Stats struct {
	// Subscriptions is how many times the underlying subscription started.
	Subscriptions int64
	// Received is how many events the underlying subscription delivered.
	Received int64
	// FromMemory is how many events consumers got from the window;
	// FromStore how many they read themselves while catching up.
	FromMemory, FromStore int64
	// CatchUpReads is how many ReadAll calls consumers made.
	CatchUpReads int64
}

// Log is an eventstore.Store whose SubscribeAll is served from one shared
// subscription of the store it wraps (see the package documentation). Make
// it with New. It is safe for concurrent use.
type Log struct {
	eventstore.Store
	cfg Config

	mu sync.Mutex
	// window holds the events after start up to last, in log order: every
	// event of the log in that stretch, none missing.
	window []eventstore.RecordedEvent
	bytes  int
	start  eventstore.Position // events after start are in window (up to last)
	last   eventstore.Position // the last event received, or start
	// changed is closed and replaced whenever the window changes.
	changed   chan struct{}
	consumers int
	running   bool
	stop      context.CancelFunc // stops the underlying subscription
	stopped   chan struct{}      // closed when it has stopped
	stats     Stats
}

var _ eventstore.Store = (*Log)(nil)

// New returns a Log over store with cfg (zero values take the defaults).
// Nothing runs until the first SubscribeAll.
func New(store eventstore.Store, cfg Config) *Log {
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(DefaultRetryMax, cfg.RetryMin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Log{Store: store, cfg: cfg, changed: make(chan struct{})}
}

// Stats returns the Log's counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// aheadPoll is how often a consumer ahead of the shared subscription (see
// next) reads the store while it waits for new events: the store's own
// longest poll interval (pgstore.DefaultPollMax), as when it subscribed
// on its own.
const aheadPoll = 100 * time.Millisecond

// SubscribeAll calls fn with batches of at most Config.BatchSize events
// after position after, in log order, never an empty batch, first catching
// up and then following new appends (eventstore.Store.SubscribeAll). It
// blocks until ctx is done (returns ctx.Err()) or fn fails (returns its
// error as is), or a catch-up read fails (returns the wrapped error; the
// caller restarts from its checkpoint, as with the store's own
// subscription). A failure of the shared subscription is not returned: it
// is retried (logged at each attempt, RetryMin to RetryMax apart), and this
// call waits for it — unlike the store's own SubscribeAll, whose caller
// would restart it; the service's readiness check reports the store down
// meanwhile.
func (l *Log) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error {
	l.join(ctx, after)
	defer l.leave()
	pos := after
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, outside, changed := l.next(pos)
		if outside {
			page, err := l.Store.ReadAll(ctx, pos, l.cfg.BatchSize)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
			l.mu.Lock()
			l.stats.CatchUpReads++
			l.stats.FromStore += int64(len(page))
			joined := false
			if len(page) == 0 && pos.Less(l.start) {
				// Nothing readable after pos, so nothing exists between
				// pos and the window (the window only holds readable
				// events): the consumer joins it.
				pos, joined = l.start, true
			}
			l.mu.Unlock()
			if len(page) == 0 {
				if !joined {
					// Ahead of the shared subscription and at the log's
					// readable end: look again when the subscription
					// moves (it may pass pos) or after aheadPoll, since
					// new events reach the subscription only after its
					// backlog.
					t := time.NewTimer(aheadPoll)
					select {
					case <-ctx.Done():
						t.Stop()
						return ctx.Err()
					case <-changed:
					case <-t.C:
					}
					t.Stop()
				}
				continue
			}
			batch = page
		} else if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-changed:
			}
			continue
		}
		if err := fn(ctx, batch); err != nil {
			return err
		}
		pos = batch[len(batch)-1].Position
	}
}

// next returns the window's events after pos (at most BatchSize), or
// outside = true if pos is before the window or after its last event (the
// consumer must read the store: behind the window it catches up; ahead of
// it — the shared subscription started at a consumer further back, and is
// still reading towards this one — it does not wait for the subscription),
// or an empty batch. changed is closed when the window moves.
func (l *Log) next(pos eventstore.Position) (batch []eventstore.RecordedEvent, outside bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pos.Less(l.start) || l.last.Less(pos) {
		return nil, true, l.changed
	}
	i := sort.Search(len(l.window), func(i int) bool { return pos.Less(l.window[i].Position) })
	j := min(len(l.window), i+l.cfg.BatchSize)
	if i == j {
		return nil, false, l.changed
	}
	l.stats.FromMemory += int64(j - i)
	// A full slice expression: a consumer that appends to its batch
	// cannot write into the window.
	return l.window[i:j:j], false, nil
}

// join registers a consumer at after, starting the underlying subscription
// if it is not running.
func (l *Log) join(ctx context.Context, after eventstore.Position) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.consumers++
	if l.running {
		return
	}
	if l.stopped != nil {
		// The previous subscription is stopping (its last consumer just
		// left); wait for it so two never fill the window at once.
		stopped := l.stopped
		l.mu.Unlock()
		<-stopped
		l.mu.Lock()
		if l.running {
			return
		}
	}
	// A fresh start: the window restarts at this consumer's position, so
	// it is served from memory at once; consumers behind it catch up.
	l.window, l.bytes = nil, 0
	l.start, l.last = after, after
	l.notifyLocked()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.running, l.stop, l.stopped = true, cancel, make(chan struct{})
	go l.run(sctx, l.stopped)
}

// leave unregisters a consumer, stopping the underlying subscription when
// it was the last.
func (l *Log) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.consumers--
	if l.consumers == 0 && l.running {
		l.running = false
		l.stop()
	}
}

// run is the underlying subscription: it follows the store from the
// window's last event, restarting after errors, until ctx is done.
func (l *Log) run(ctx context.Context, stopped chan struct{}) {
	defer func() {
		l.mu.Lock()
		if l.stopped == stopped {
			l.stopped = nil
		}
		l.mu.Unlock()
		close(stopped)
	}()
	delay := l.cfg.RetryMin
	for {
		l.mu.Lock()
		from := l.last
		l.stats.Subscriptions++
		l.mu.Unlock()
		got := false
		err := l.Store.SubscribeAll(ctx, from, func(ctx context.Context, batch []eventstore.RecordedEvent) error {
			got = true
			l.receive(batch)
			if l.cfg.ReadGap > 0 {
				// The store's subscription reads again when this returns:
				// events appended meanwhile wait for that one read.
				t := time.NewTimer(l.cfg.ReadGap)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-t.C:
				}
			}
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if got {
			delay = l.cfg.RetryMin
		}
		if err == nil {
			err = errors.New("subscription ended without an error")
		}
		l.cfg.Logger.Warn("log subscription failed; restarting", "after", from.String(), "retry_in", delay.String(), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, l.cfg.RetryMax)
	}
}

// receive appends a batch of the underlying subscription to the window,
// evicting the oldest events beyond the bounds, and wakes the consumers.
func (l *Log) receive(batch []eventstore.RecordedEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range batch {
		if !l.last.Less(e.Position) {
			continue // already in the window (a resubscription's repeat)
		}
		l.window = append(l.window, e)
		l.bytes += eventSize(&e)
		l.last = e.Position
		l.stats.Received++
	}
	n := 0
	for n < len(l.window) && (len(l.window)-n > l.cfg.MaxEvents || l.bytes > l.cfg.MaxBytes) {
		l.bytes -= eventSize(&l.window[n])
		l.start = l.window[n].Position
		n++
	}
	// The evicted events are not cleared: a consumer may still be reading
	// them in a batch. They go with the array when append outgrows it.
	l.window = l.window[n:]
	l.notifyLocked()
}

// notifyLocked wakes every consumer waiting for the window; l.mu is held.
func (l *Log) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// eventSize is the bytes an event is counted for in Config.MaxBytes.
func eventSize(e *eventstore.RecordedEvent) int {
	return eventOverhead + len(e.ID) + len(e.Stream) + len(e.Type) + len(e.Data) + len(e.Metadata)
}
