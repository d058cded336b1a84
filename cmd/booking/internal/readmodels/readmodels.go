// Package readmodels runs the read models' projectors of the booking
// command: the live ones of `booking serve`, each under its lock across
// replicas (LockName), and `booking projections rebuild`, which takes those
// locks over from a running service (Rebuild). A live projector hands its
// lock over when it sees a rebuild waiting for it (Waits).
package readmodels

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/projections"
)

// LockName is the pgcoord.Locks name (and so the advisory lock) of the
// live projector of a read model; the rebuild takes the same lock.
func LockName(name string) string { return "projection:" + name }

// rebuildGuard is the lock that keeps two rebuilds of a read model apart.
func rebuildGuard(name string) string { return "projection-rebuild:" + name }

// Rebuild rebuilds the read models ps from log and swaps them in
// (projections.Rebuild), under each one's rebuild guard, which fails at
// once while another rebuild of it runs, and its live projector's lock,
// which the projector of a running service hands over when it sees the
// rebuild waiting: lockTimeout bounds that wait. progress, when not nil,
// gets the number of events read so far after each batch.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, log projections.LogReader, ps []*projections.Projection, lockTimeout time.Duration,
	progress func(int64)) (projections.RebuildResult, error) {
	locks := pgcoord.NewLocks(pool)
	return projections.Rebuild(ctx, pool, log, ps, projections.RebuildOptions{
		Guard: func(ctx context.Context, name string) (func(), error) {
			l, err := locks.TryAcquire(ctx, rebuildGuard(name))
			if errors.Is(err, pgcoord.ErrLockHeld) {
				return nil, errors.New("another rebuild of it is running")
			}
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		Lock: func(ctx context.Context, name string) (func(), error) {
			lctx, cancel := context.WithTimeout(ctx, lockTimeout)
			defer cancel()
			l, err := locks.Acquire(lctx, LockName(name))
			if err != nil && ctx.Err() == nil && lctx.Err() != nil {
				return nil, fmt.Errorf("the live projector did not hand over its lock within %s (--lock-timeout): %w", lockTimeout, err)
			}
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		Progress: progress,
	})
}

// CheckBackend refuses a rebuild from backend's log (postgres or
// kurrentdb) while the database holds log positions written on the other
// backend (pgcoord.CheckBackend): the service runs on that one, and read
// models built from another log would be swapped in under it. The refusal
// is a configuration error naming BOOKING_EVENT_STORE. switching (the
// --switch-backend flag) allows it, to move the service to backend.
func CheckBackend(ctx context.Context, pool *pgxpool.Pool, backend string, switching bool) error {
	if switching {
		return nil
	}
	err := pgcoord.CheckBackend(ctx, pool, backend)
	var mm *pgcoord.BackendMismatchError
	if !errors.As(err, &mm) {
		return err
	}
	written := slices.Concat(mm.Checkpoints, mm.Projections, mm.Relays)
	return configerr.New("BOOKING_EVENT_STORE", "the rebuild would read the %s log, but the database holds log positions written on another backend (%s): "+
		"set BOOKING_EVENT_STORE (or --event-store) to the service's event store; to move the service to %s instead, add --switch-backend "+
		"(docs/kurrentdb.md, \"Switching backends\"); nothing was rebuilt", backend, strings.Join(written, ", "), backend)
}

// Summary is a finished rebuild's line for its standard output: the read
// models rebuilt (names), the events replayed, the whole time (the replay,
// the lock handover with live projectors and the swap), the replay's time
// and rate in events per second, and the checkpoint swapped in.
func Summary(names []string, res projections.RebuildResult) string {
	rate := float64(res.Events) / max(res.Replay.Seconds(), 1e-9)
	return fmt.Sprintf("booking: rebuilt %s from %d events in %s (replay %s, %.0f events/s); checkpoint %s",
		strings.Join(names, ", "), res.Events, res.Total.Round(time.Millisecond), res.Replay.Round(time.Millisecond), rate, res.Position)
}

// ShowProgress reports whether a rebuild's progress bar goes to w: mode
// "always", or "auto" and w is a terminal ("never": none).
func ShowProgress(w io.Writer, mode string) bool {
	show := mode == "always"
	if mode == "auto" {
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				show = true
			}
		}
	}
	return show
}

// Progress is a rebuild's progress bar (events/s and ETA). Its methods do
// nothing on a nil *Progress.
type Progress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	total int64
}

// StartProgress returns the progress bar of a rebuild of the read models
// names on w when mode shows one there (ShowProgress), sized by log's
// event count, and nil (a bar that draws nothing) otherwise: on KurrentDB
// counting reads the whole log once more, so it is read only for a bar.
// The error is the count's.
func StartProgress(ctx context.Context, w io.Writer, mode string, log interface {
	EventCount(context.Context) (int64, error)
}, names []string) (*Progress, error) {
	if !ShowProgress(w, mode) {
		return nil, nil
	}
	total, err := log.EventCount(ctx)
	if err != nil {
		return nil, err
	}
	return NewProgress(w, total, strings.Join(names, ", ")), nil
}

// NewProgress returns a progress bar on w for total events (grown when the
// log turns out longer) of the read models what.
func NewProgress(w io.Writer, total int64, what string) *Progress {
	return &Progress{w: w, total: total, bar: progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("rebuilding "+what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
	)}
}

// Set shows n events read.
func (p *Progress) Set(n int64) {
	if p == nil {
		return
	}
	if n > p.total {
		p.total = n
		p.bar.ChangeMax64(p.total)
	}
	_ = p.bar.Set64(n)
}

// End ends the bar's line, completing the bar first when the rebuild
// succeeded.
func (p *Progress) End(succeeded bool) {
	if p == nil {
		return
	}
	if succeeded {
		_ = p.bar.Finish()
	}
	fmt.Fprintln(p.w)
}

// NewProjector returns the live projector of p for `booking serve`: it
// applies what arrives within projections.DefaultLinger in one transaction,
// and checks every yieldEvery for a waiting rebuild and then hands over its
// lock. Projectors made with one Waits (Waits.Projector) share its check.
func NewProjector(pool *pgxpool.Pool, locks *pgcoord.Locks, p *projections.Projection) *projections.Projector {
	return NewWaits(locks).Projector(pool, p)
}

// Projector is NewProjector with the rebuild check of w.
func (w *Waits) Projector(pool *pgxpool.Pool, p *projections.Projection) *projections.Projector {
	name := LockName(p.Name())
	return projections.NewProjector(pool, p, projections.WithLinger(projections.DefaultLinger),
		projections.WithYield(yieldEvery, func(ctx context.Context) (bool, error) {
			return w.waiting(ctx, name)
		}))
}

// yieldEvery is how often a live projector checks for a waiting rebuild.
const yieldEvery = 2 * time.Second

// Waits answers the live projectors' "does a rebuild wait for my
// lock?" with one statement for all of them (pgcoord.Locks.WaitingAmong of
// every projector lock) at most about once per yieldEvery: an answer less
// than 3/4 of yieldEvery old is reused. It holds one answer (a set of at
// most len(projections.Names()) names), replaced by the next. Safe for
// concurrent use.
type Waits struct {
	locks *pgcoord.Locks
	names []string

	mu  sync.Mutex
	at  time.Time // process clock, only to pace the checks
	ans map[string]bool
}

// NewWaits returns the rebuild check of the live projectors that take
// their locks from locks.
func NewWaits(locks *pgcoord.Locks) *Waits {
	var names []string
	for _, n := range projections.Names() {
		names = append(names, LockName(n))
	}
	return &Waits{locks: locks, names: names}
}

// waiting reports whether a rebuild waits for the projector lock name.
func (w *Waits) waiting(ctx context.Context, name string) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ans == nil || time.Since(w.at) >= yieldEvery*3/4 {
		ans, err := w.locks.WaitingAmong(ctx, w.names)
		if err != nil {
			return false, err
		}
		w.ans, w.at = ans, time.Now()
	}
	return w.ans[name], nil
}
