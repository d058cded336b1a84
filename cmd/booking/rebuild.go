package main

import (
	"errors"
	"fmt"
	"log/slog"
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
	SwitchBackend   bool          `name:"switch-backend" help:"Rebuild from the event store even though the database holds log positions written on the other backend (moving the service to this one; docs/kurrentdb.md, Switching backends)."`
	Names           []string      `arg:"" optional:"" help:"Read models to rebuild: orders, reservations, shows, intents (default: all)."`
}

// Run rebuilds the read models from the event log and swaps them in (see
// projections.Rebuild and readmodels.Rebuild). It needs only the database:
// it applies the migrations, never calls the payment provider and
// publishes nothing. While a service runs, it takes each projector's lock
// (the live projector hands it over when it sees the rebuild waiting),
// catches up and swaps; the live projector then resumes from the swapped
// checkpoint. It refuses (exit 2, naming BOOKING_EVENT_STORE) before any
// work while the database holds positions written on the other backend,
// unless --switch-backend. A signal after the swap has begun lets the swap
// finish; every message says whether it was swapped, or how to find out.
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
	// Guards and locks hold a connection each; the bulk fill one for the
	// log reader and one per table writer (COPY), at most 7 tables. The
	// swapped checkpoints are stamped with backend (openMigrated).
	pool, err := openMigrated(ctx, c.DatabaseURL, int32(2*len(ps)+12), backend, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := readmodels.CheckBackend(ctx, pool, backend, c.SwitchBackend); err != nil {
		return err
	}

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
	bar, err := readmodels.StartProgress(ctx, e.stderr, c.Progress, elog.Counter, names)
	if err != nil {
		return err
	}
	res, err := readmodels.Rebuild(ctx, pool, elog.Store, ps, c.LockTimeout, bar.Set)
	bar.End(err == nil)
	if unknown := (*projections.SwapUnknownError)(nil); errors.As(err, &unknown) {
		return fmt.Errorf("projections rebuild: %w", err) // says how to tell whether it was swapped
	}
	if err != nil {
		return fmt.Errorf("projections rebuild: %w (nothing was swapped)", err)
	}
	if ctx.Err() != nil { // the swap had begun: it was finished
		fmt.Fprintln(e.stderr, "booking: interrupted after the swap had begun; the swap was finished: the read models were swapped in")
	}
	fmt.Fprintln(e.stdout, readmodels.Summary(names, res))
	return nil
}
