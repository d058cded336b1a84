package notify

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// publishAll runs a relay until every event of the log is published.
func (e *env) publishAll(t *testing.T, w *workload) {
	t.Helper()
	r := NewRelay(e.store, e.pool, e.nc, testRelayConfig(e))
	run := start(t, e.ctx, r.Run)
	head := w.lastPosition()
	waitFor(t, 60*time.Second, "checkpoint at head", func() bool { return r.Stats().Checkpoint == head })
	run.stop(t)
}

// waitConsumerDone waits until the durable consumer has delivered and seen
// the ack of every message.
func (e *env) waitConsumerDone(t *testing.T, durable string) {
	t.Helper()
	waitFor(t, 60*time.Second, "consumer "+durable+" fully acknowledged", func() bool {
		c, err := e.js.Consumer(e.ctx, StreamName, durable)
		if err != nil {
			return false
		}
		info, err := c.Info(e.ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	})
}

// TestSubscriberSlowHandler: handlers slower than the ack wait, in two
// instances sharing the durable; every effect happens once.
func TestSubscriberSlowHandler(t *testing.T) {
	forEachBackend(t, func(t *testing.T, url string) {
		e, w := newEnvWithOrders(t, url, time.Minute, 5)
		e.publishAll(t, w)

		const ackWait = 700 * time.Millisecond
		var calls, slow atomic.Int64
		cfg := SubscriberConfig{Durable: "slow", AckWait: ackWait, Prefetch: 10, GapDelay: 20 * time.Millisecond, GapRetries: 200, Logger: e.log,
			Handler: func(ctx context.Context, tx pgx.Tx, n *Notification) error {
				if calls.Add(1)%8 == 3 && n.Delivered == 1 {
					slow.Add(1)
					time.Sleep(ackWait + 500*time.Millisecond) // inside the transaction
				}
				return nil
			}}
		s1, s2 := NewSubscriber(e.js, e.pool, cfg), NewSubscriber(e.js, e.pool, cfg)
		if _, err := s1.Consumer(e.ctx); err != nil {
			t.Fatal(err)
		}
		run1, run2 := start(t, e.ctx, s1.Run), start(t, e.ctx, s2.Run)
		waitFor(t, 60*time.Second, "all applied", func() bool { rows, _ := e.logCount(t, "slow"); return rows >= w.publicCount() })
		e.waitConsumerDone(t, "slow")
		run1.stop(t)
		run2.stop(t)
		e.checkApplied(t, "slow", w)
		st1, st2 := s1.Stats(), s2.Stats()
		t.Logf("slow handlers: %d; instance 1 %+v; instance 2 %+v", slow.Load(), st1, st2)
		if slow.Load() == 0 || st1.Redelivered+st2.Redelivered == 0 || st1.Duplicates+st2.Duplicates == 0 {
			t.Fatalf("no redelivered duplicate was absorbed (slow %d, stats %+v %+v): the test did not exercise the ack wait", slow.Load(), st1, st2)
		}
	})
}

// TestSubscriberLostAck: the ack of a committed notification is lost; the
// redelivery is absorbed by the processed set.
func TestSubscriberLostAck(t *testing.T) {
	forEachBackend(t, func(t *testing.T, url string) {
		e, w := newEnvWithOrders(t, url, time.Minute, 5)
		e.publishAll(t, w)

		var lost atomic.Int64
		// The ack wait is far longer than handling a message on a busy
		// machine, so the only redeliveries are those of the lost acks.
		s := NewSubscriber(e.js, e.pool, SubscriberConfig{Durable: "lost", AckWait: 10 * time.Second, GapDelay: 20 * time.Millisecond, Logger: e.log})
		s.loseAck = func(n *Notification) bool {
			if n.Delivered == 1 && n.Revision%2 == 0 {
				lost.Add(1)
				return true
			}
			return false
		}
		run := start(t, e.ctx, s.Run)
		waitFor(t, 60*time.Second, "all applied", func() bool { rows, _ := e.logCount(t, "lost"); return rows >= w.publicCount() })
		e.waitConsumerDone(t, "lost")
		run.stop(t)
		e.checkApplied(t, "lost", w)
		if st := s.Stats(); lost.Load() == 0 || st.Duplicates != lost.Load() {
			t.Fatalf("lost acks %d, stats %+v; want every lost ack's redelivery counted as a duplicate", lost.Load(), st)
		}
	})
}

// TestSubscriberOrderUnderRedeliveries: failed attempts and lost acks make
// the server redeliver out of order; every order's order_placed is still
// applied before its order_confirmed, and revisions apply in order.
func TestSubscriberOrderUnderRedeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, url string) {
		e, w := newEnvWithOrders(t, url, time.Minute, 15)
		e.publishAll(t, w)

		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(1, 2))
		chance := func(p float64) bool { mu.Lock(); defer mu.Unlock(); return rng.Float64() < p }
		errInjected := errors.New("injected failure")
		cfg := SubscriberConfig{Durable: "order", AckWait: 500 * time.Millisecond, Prefetch: 50, ErrorDelay: 10 * time.Millisecond,
			GapDelay: 20 * time.Millisecond, GapRetries: 200, Logger: e.log,
			Handler: func(ctx context.Context, tx pgx.Tx, n *Notification) error {
				if n.Delivered == 1 && chance(0.3) {
					return errInjected
				}
				return nil
			}}
		subs := []*Subscriber{NewSubscriber(e.js, e.pool, cfg), NewSubscriber(e.js, e.pool, cfg)}
		if _, err := subs[0].Consumer(e.ctx); err != nil {
			t.Fatal(err)
		}
		var runs []*running
		for _, s := range subs {
			s.loseAck = func(n *Notification) bool { return n.Delivered == 1 && chance(0.2) }
			runs = append(runs, start(t, e.ctx, s.Run))
		}
		waitFor(t, 60*time.Second, "all applied", func() bool { rows, _ := e.logCount(t, "order"); return rows >= w.publicCount() })
		e.waitConsumerDone(t, "order")
		for _, r := range runs {
			r.stop(t)
		}
		e.checkApplied(t, "order", w)
		var deferred, redelivered int64
		for _, s := range subs {
			deferred += s.Stats().Deferred
			redelivered += s.Stats().Redelivered
		}
		t.Logf("stats %+v %+v", subs[0].Stats(), subs[1].Stats())
		if deferred == 0 || redelivered == 0 {
			t.Fatalf("deferred %d, redelivered %d: the test did not reorder deliveries", deferred, redelivered)
		}
	})
}

// TestSubscriberPrunedLateCopy: after the processed set is pruned, a late
// copy of an applied notification (stored again once the duplicate window
// passed) is stopped by the per-entity revision check.
func TestSubscriberPrunedLateCopy(t *testing.T) {
	t.Parallel()
	const window = testWindow
	e := newEnv(t, mustEmbedded(t), window)
	var w workload
	w.appendOrders(t, e.ctx, e.store, 2)
	e.publishAll(t, &w)
	s := NewSubscriber(e.js, e.pool, SubscriberConfig{Durable: "prune", ProcessedHorizon: time.Hour, GapDelay: 20 * time.Millisecond, Logger: e.log})
	run := start(t, e.ctx, s.Run)
	waitFor(t, 60*time.Second, "all applied", func() bool { return s.Stats().Applied == int64(w.publicCount()) })

	if _, err := e.pool.Exec(e.ctx, `UPDATE notify_processed SET processed_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(e.ctx); err != nil || n != int64(w.publicCount()) {
		t.Fatalf("Prune = %d, %v, want %d", n, err, w.publicCount())
	}
	time.Sleep(window + 500*time.Millisecond)
	first := e.readStream(t)[0]
	msg, _, err := NewMessage(e.publicEvents(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	ack, err := e.js.PublishMsg(e.ctx, msg)
	if err != nil || ack.Duplicate {
		t.Fatalf("republish of %s = %+v, %v; want it stored again", first.header.Get(HeaderMsgID), ack, err)
	}
	waitFor(t, 60*time.Second, "late copy handled", func() bool { return s.Stats().Stale == 1 })
	run.stop(t)
	e.checkApplied(t, "prune", &w)
}
