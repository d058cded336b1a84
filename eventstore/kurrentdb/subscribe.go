package kurrentdb

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"

	"github.com/retrysafe/booking/eventstore"
)

// Subscription filter settings: the server skips system streams (the
// stream regex ^[^$]) and reads the log in windows of subscriptionWindow
// events. Checkpoints are ignored (see pump), so they are asked for rarely.
const (
	subscriptionWindow     = 512
	checkpointMultiplier   = 1000
	systemStreamsExclusion = "^[^$]"
)

// resubscribeLogInterval is the least time between two INFO lines
// "kurrentdb: subscription to $all dropped, resubscribing" of one
// subscription while its resubscriptions keep failing (the server is
// down): the first resubscription after a working subscription is logged
// at INFO at once, the next ones at most once per interval, each such line
// with the count of resubscriptions logged at DEBUG only since the
// previous one (suppressed). With the default backoff (at most 1 s between
// attempts) and reconnect window (1 min), an outage logs at most 7 INFO
// lines per subscription instead of about 60.
const resubscribeLogInterval = 10 * time.Second

// SubscribeAll is a catch-up subscription to $all: it calls fn with batches
// of at most the batch size (WithBatchSize) of events after position after,
// in log order, each event exactly once, leaving out system events: first
// catching up, then following new appends. It blocks, calls fn from the
// calling goroutine only, and is safe for concurrent use (each call is an
// independent subscription).
//
// It always subscribes from an explicit position (the client's default
// would be the end of the log). When the subscription drops for a reason
// that may pass (the server restarted or is unreachable, the connection
// broke), it subscribes again from the position of the last event it took
// from the server, so nothing is skipped or repeated; it gives up after the
// server has been unreachable for the reconnect window
// (WithReconnectWindow). It returns ctx.Err() when ctx is done, fn's error
// as is when fn fails, and a wrapped error when subscribing fails for good
// (access denied, an invalid position such as one from another backend, or
// the reconnect window passed): resume from the last position fn handled.
func (s *Store) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(ctx context.Context, batch []eventstore.RecordedEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan eventstore.RecordedEvent, s.batchSize)
	pumped := make(chan error, 1)
	go func() { pumped <- s.pump(ctx, after, events) }()
	for {
		var first eventstore.RecordedEvent
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-pumped:
			return err
		case first = <-events:
		}
		batch := []eventstore.RecordedEvent{first}
	drain:
		for len(batch) < s.batchSize {
			select {
			case e := <-events:
				batch = append(batch, e)
			default:
				break drain
			}
		}
		if err := fn(ctx, batch); err != nil {
			return err
		}
	}
}

// pump feeds events from subscriptions to $all into out, resubscribing
// after drops, until ctx is done (returns ctx.Err()) or it gives up. last
// is the position of the last event taken from the server (delivered, or
// skipped as a system event); a resubscription starts after it, exclusive,
// as KurrentDB's subscriptions do. Checkpoint messages are ignored rather
// than used as resume points: their prepare position can be 0
// (KurrentDB#3989) and resuming from one has skipped events on some servers
// (KurrentDB#4975).
func (s *Store) pump(ctx context.Context, after eventstore.Position, out chan<- eventstore.RecordedEvent) error {
	last := after
	var (
		failing    time.Time // when the current run of failures began
		retries    int
		logged     time.Time // when this run of failures last logged at INFO
		suppressed int       // resubscriptions logged at DEBUG since then
	)
	for {
		confirmed, err := s.subscribeOnce(ctx, &last, out)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if confirmed {
			failing, retries = time.Time{}, 0
			logged, suppressed = time.Time{}, 0
		}
		if !resumable(err) {
			return fmt.Errorf("kurrentdb: subscribe to $all after %s at %s: %w", last, s.where, describe(err))
		}
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) > s.reconnectWindow {
			return fmt.Errorf("kurrentdb: subscribe to $all after %s: %s unreachable for over %s: %w", last, s.where, s.reconnectWindow, err)
		}
		retries++
		const msg = "kurrentdb: subscription to $all dropped, resubscribing"
		if now := time.Now(); logged.IsZero() || now.Sub(logged) >= s.resubscribeLogInterval {
			s.logger.Info(msg, "after", last.String(), "attempt", retries, "suppressed", suppressed, "error", err)
			logged, suppressed = now, 0
		} else {
			s.logger.Debug(msg, "after", last.String(), "attempt", retries, "error", err)
			suppressed++
		}
		if err := s.sleep(ctx, retries); err != nil {
			return err
		}
	}
}

// resumable reports whether a subscription that ended with err should be
// made again: everything but a refusal that would repeat (access denied,
// bad credentials, an invalid request such as a position that is not in
// this log) and a closed Store.
func resumable(err error) bool {
	var p permanentError
	if errors.Is(err, ErrClosed) || errors.As(err, &p) {
		return false
	}
	if code, ok := esdbCode(err); ok {
		switch code {
		case esdb.ErrorCodeAccessDenied, esdb.ErrorCodeUnauthenticated:
			return false
		}
	}
	switch grpcCode(err) {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.Unimplemented:
		return false
	}
	return true
}

// subscribeOnce runs one subscription from *last until it drops, and
// reports whether the server confirmed it. It advances *last past every
// event it takes; events already at or before *last (none, from a correct
// server) are skipped, so a resubscription never repeats one.
func (s *Store) subscribeOnce(ctx context.Context, last *eventstore.Position, out chan<- eventstore.RecordedEvent) (confirmed bool, err error) {
	var from esdb.AllPosition = esdb.Start{}
	if !last.IsZero() {
		from = esdb.Position{Commit: last.Commit, Prepare: last.Prepare}
	}
	// The subscription lives on sctx, so opening it cannot have a
	// deadline: a watchdog cancels it if the client does not answer within
	// the append timeout (a client whose connection loop ended never
	// does), and call then replaces the client.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var opened atomic.Bool
	watchdog := time.AfterFunc(s.appendTimeout, func() {
		if !opened.Load() {
			cancel(errNoAnswer)
		}
	})
	ctx = sctx
	var sub *esdb.Subscription
	err = s.conn.call(ctx, func(ctx context.Context, c *esdb.Client) error {
		var err error
		sub, err = c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{
			From:               from,
			Filter:             &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Regex: systemStreamsExclusion},
			MaxSearchWindow:    subscriptionWindow,
			CheckpointInterval: checkpointMultiplier,
		})
		return err
	})
	opened.Store(true)
	watchdog.Stop()
	if err != nil {
		if errors.Is(context.Cause(ctx), errNoAnswer) {
			err = fmt.Errorf("%w: %w", errNoAnswer, err)
		}
		return false, err
	}
	defer sub.Close()
	defer func() {
		if r := recover(); r != nil {
			err = &clientPanicError{value: r}
		}
	}()
	for {
		ev := sub.Recv()
		switch {
		case ev.SubscriptionDropped != nil:
			return true, ev.SubscriptionDropped.Error
		case ev.EventAppeared != nil:
			e, err := recorded(ev.EventAppeared)
			if err != nil {
				return true, permanentError{err}
			}
			if !last.Less(e.Position) {
				continue
			}
			if !systemEvent(e) {
				select {
				case out <- e:
				case <-ctx.Done():
					return true, ctx.Err()
				}
			}
			*last = e.Position
		}
	}
}

// permanentError is a subscription failure that resubscribing would repeat.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }
