package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/readmodels"
	"github.com/retrysafe/booking/projections"
)

// rebuildCmd is `booking projections rebuild [NAME...]`.
type rebuildCmd struct {
	DatabaseURL     string        `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL (read models; the event store unless --event-store names KurrentDB)."`
	EventStore      string        `name:"event-store" env:"BOOKING_EVENT_STORE" default:"postgres" help:"The service's event store: postgres, or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string."`
	IntentRetention time.Duration `name:"intent-retention" env:"BOOKING_INTENT_RETENTION" default:"24h" help:"Intent retention the intents view applies (the service's value)."`
	LockTimeout     time.Duration `name:"lock-timeout" default:"2m" help:"How long to wait for a running service's projectors to hand over their locks."`
	Progress        string        `name:"progress" default:"auto" enum:"auto,always,never" help:"Progress bar on stderr: auto (only on a terminal), always, never."`
	Names           []string      `arg:"" optional:"" help:"Read models to rebuild: orders, reservations, shows, intents (default: all)."`
}

// Run rebuilds the read models from the event log and swaps them in (see
// projections.Rebuild and readmodels.Rebuild). It needs only the database:
// it applies the migrations, never calls the payment provider and
// publishes nothing. While a service runs, it takes each projector's lock
// (the live projector hands it over when it sees the rebuild waiting),
// catches up and swaps; the live projector then resumes from the swapped
// checkpoint.
func (c *rebuildCmd) Run(e *env) error {
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		return err
	}
	if c.IntentRetention <= 0 {
		return configError("BOOKING_INTENT_RETENTION", "must be a positive duration such as 24h")
	}
	if c.LockTimeout <= 0 { // the lock would be refused only after the whole replay
		return configError("--lock-timeout", "must be a positive duration such as 2m")
	}
	if err := config.CheckEventStore(c.EventStore); err != nil {
		return err
	}
	backend, _ := config.EventStoreBackend(c.EventStore)
	ps, err := projections.Select(c.Names, c.IntentRetention)
	if err != nil {
		return &usageError{err} // a NAME argument no read model has
	}
	ctx := e.ctx
	// Guards and locks hold a connection each; the bulk fill uses one for
	// the log reader and one per table writer (COPY) and read back, at
	// most 7 tables (it waits for a connection beyond the pool).
	// The swapped checkpoints are stamped with backend (openMigrated), so
	// a rebuild is how read models move to another event store.
	pool, err := openMigrated(ctx, c.DatabaseURL, int32(2*len(ps)+12), backend, nil)
	if err != nil {
		return err
	}
	defer pool.Close()

	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	elog, err := openEventLog(c.EventStore, pool, log)
	if err != nil {
		return err
	}
	defer elog.close()
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name()
	}
	var bar *readmodels.Progress
	if readmodels.ShowProgress(e.stderr, c.Progress) {
		// The total only sizes the progress bar; on KurrentDB counting
		// reads the whole log once more, so it is read only for a bar.
		total, err := elog.Counter.EventCount(ctx)
		if err != nil {
			return err
		}
		bar = readmodels.NewProgress(e.stderr, total, strings.Join(names, ", "))
	}
	res, err := readmodels.Rebuild(ctx, pool, elog.Store, ps, c.LockTimeout, bar.Set)
	bar.End(err == nil)
	if err != nil {
		return fmt.Errorf("projections rebuild: %w (nothing was swapped)", err)
	}
	// The rate is the replay's; the total adds the lock handover with the
	// live projectors and the swap.
	rate := float64(res.Events) / max(res.Replay.Seconds(), 1e-9)
	fmt.Fprintf(e.stdout, "booking: rebuilt %s from %d events in %s (replay %s, %.0f events/s); checkpoint %s\n",
		strings.Join(names, ", "), res.Events, res.Total.Round(time.Millisecond), res.Replay.Round(time.Millisecond), rate, res.Position)
	return nil
}
