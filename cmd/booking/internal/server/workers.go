package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/readmodels"
	"github.com/retrysafe/booking/cmd/booking/internal/storage"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/projections"
)

// worker is a background job of the service. With a lock it runs under
// that lock, one instance across replicas (pgcoord.Locks.RunExclusive: a
// replica without it tries again every retry); without one it runs in
// every process.
type worker struct {
	lock  string
	retry time.Duration
	run   func(ctx context.Context) error
}

// workers is the table of the service's background jobs, every one a
// follower of the log reader from its own checkpoint or a periodic job:
// the process manager (follow-ups), recovery, reservation expiry, the
// intent purge, the payment reconciler (unknown outcomes, expired leases,
// deadlines, cancels, refunds), the clock skew measure, one live projector per read model (the
// list endpoints read them; each hands its lock over to a waiting `booking
// projections rebuild`), and the notification relay (its own fenced
// lease).
func (s *Server) workers() []worker {
	h, log, every := s.handler.Workers, s.followed, s.cfg.RecoveryInterval/3
	cps := pgcoord.NewCheckpoints(s.pool)
	ws := []worker{
		{commands.FollowUpsName, every, func(ctx context.Context) error { return h.RunFollowUps(ctx, log, cps) }},
		{commands.RecoveryName, every, func(ctx context.Context) error { return h.RunRecovery(ctx, log, cps, every) }},
		{commands.ExpiryName, every, func(ctx context.Context) error { return h.RunExpiry(ctx, log, cps, every) }},
		{"intent-purge", every, func(ctx context.Context) error {
			return runPurge(ctx, s.elog.Purger, s.cfg.IntentRetention, s.cfg.RecoveryInterval, s.log)
		}},
		{commands.ReconcilerName, every, func(ctx context.Context) error { return s.reconcile(ctx, every) }},
		// Every process compares the event store's clock with the
		// service's on its own appends
		// (booking_event_store_clock_skew_seconds).
		{run: func(ctx context.Context) error { h.RunClockSkew(ctx); return nil }},
	}
	waits := readmodels.NewWaits(pgcoord.NewLocks(s.pool))
	for _, p := range projections.All(s.cfg.IntentRetention) {
		pr := waits.Projector(s.pool, p)
		ws = append(ws, worker{readmodels.LockName(p.Name()), time.Second, func(ctx context.Context) error { return pr.Run(ctx, log) }})
	}
	return append(ws, worker{run: func(ctx context.Context) error { s.notif.RunRelay(ctx); return nil }})
}

// reconcile runs the payment reconciler while the index of its pending
// orders follows the log reader, so a pass reads from the store only the
// events the reader has not delivered yet (storage.EventLog.Follow). A
// follower that fails is logged and started again after the interval
// every (a third of BOOKING_RECOVERY_INTERVAL).
func (s *Server) reconcile(ctx context.Context, every time.Duration) error {
	ctx, stop := context.WithCancel(ctx)
	var following sync.WaitGroup
	following.Go(func() {
		for {
			err := s.elog.Follow(ctx, s.followed)
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("the pending orders' index stopped following the log; its reconciler passes read the store meanwhile", "err", err, "retry_in", every)
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	})
	defer following.Wait()
	defer stop()
	return s.handler.Workers.RunReconciler(ctx, s.elog.Pending, every)
}

// startWorkers starts every worker of the table until ctx ends.
func (s *Server) startWorkers(ctx context.Context) {
	locks := pgcoord.NewLocks(s.pool)
	for _, w := range s.workers() {
		s.running.Go(func() {
			if w.lock == "" {
				_ = w.run(ctx)
				return
			}
			locks.RunExclusive(ctx, s.log, w.lock, w.retry, w.run)
		})
	}
}

// purgeBatch is how many intent streams one purge statement truncates.
const purgeBatch = 1000

// runPurge truncates every interval the intent streams whose first live
// event is older than retention by the database clock (the intent
// retention, BOOKING_INTENT_RETENTION): the whole stream goes, its last revision stays, so a later
// request with the same key appends a new intent at that revision. Requests
// treat an expired intent as absent even before this job runs, so its
// timing only bounds storage. It returns ctx.Err() when ctx is done.
func runPurge(ctx context.Context, store storage.StreamPurger, retention, interval time.Duration, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for {
			n, err := store.PurgeStreams(ctx, domain.CategoryIntent, retention, purgeBatch)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				log.Warn("intent purge failed; retrying", "err", err)
				break
			}
			if n > 0 {
				log.Info("purged expired intents", "count", n)
			}
			if n < purgeBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
