package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/natsrun"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/logcopy"
	"github.com/retrysafe/booking/eventstore/pgcoord"
)

// eventstoreCmd is `booking eventstore`.
type eventstoreCmd struct {
	Copy eventstoreCopyCmd `cmd:"" help:"Copy the event log from one backend to the other (postgres, or a KurrentDB connection string) and move the service's positions to it."`
}

// eventstoreCopyCmd is `booking eventstore copy --from SOURCE --to TARGET`.
type eventstoreCopyCmd struct {
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL (checkpoints, the relay's row; the event store when --from or --to is postgres)."`
	From        string `name:"from" required:"" help:"The event store to copy from: postgres, or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string."`
	To          string `name:"to" required:"" help:"The event store to copy to, of the other backend."`
	DataDir     string `name:"data-dir" env:"BOOKING_DATA_DIR" help:"The service's data directory: the embedded NATS server's stream BOOKING is marked for the new backend."`
	NATSURL     string `name:"nats-url" env:"BOOKING_NATS_URL" help:"An external NATS server holding stream BOOKING (instead of the embedded one)."`
	Batch       int    `name:"batch" default:"500" help:"Events per read of the source."`
	Every       int64  `name:"progress-every" default:"10000" help:"Print a progress line on stderr every N events copied."`
}

// Run copies the log and moves the service to the target backend: every
// event (same ids, types, data, metadata and revisions, in log order; run it
// again after a crash, what was copied is recognised), the truncations,
// a verification of every stream (counts and digests; any difference fails
// the command), the worker, read-model and relay checkpoints mapped to the
// same events in the new log and stamped with its backend, stream BOOKING
// marked for it with the relay resuming after its last message, and the
// log index's snapshot dropped. The service must be stopped.
func (c *eventstoreCopyCmd) Run(e *env) error {
	from, to, err := c.backends()
	if err != nil {
		return err
	}
	ctx := e.ctx
	// The pool's sessions stamp the target backend on the positions they
	// write (pgcoord.SetBackend), so the mapped checkpoints are the
	// target's.
	pool, err := openMigrated(ctx, c.DatabaseURL, 8, to, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := serviceStopped(ctx, pool); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	src, err := openEventLog(c.From, pool, log)
	if err != nil {
		return err
	}
	defer src.close()
	dst, err := openEventLog(c.To, pool, log)
	if err != nil {
		return err
	}
	defer dst.close()
	if err := c.copyLog(e, src.Store, dst.Store); err != nil {
		return err
	}
	return c.cutOver(e, pool, src.Store, dst.Store, from, to, log)
}

// backends checks the flags and returns the backends of --from and --to.
// Errors name the flag at fault.
func (c *eventstoreCopyCmd) backends() (from, to string, err error) {
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		return "", "", err
	}
	if from, err = copyBackend("--from", c.From); err != nil {
		return "", "", err
	}
	if to, err = copyBackend("--to", c.To); err != nil {
		return "", "", err
	}
	if c.Batch <= 0 {
		return "", "", configError("--batch", "must be positive, got %d", c.Batch)
	}
	if c.Every <= 0 {
		return "", "", configError("--progress-every", "must be positive, got %d", c.Every)
	}
	if from == to {
		return "", "", configError("--to", "is a %s event store like --from: copy between postgres and KurrentDB", to)
	}
	return from, to, nil
}

// copyLog copies src's log to dst with its truncations and verifies every
// stream, printing progress on stderr (every --progress-every events, and
// once while the source holds back events behind a running transaction)
// and the outcome on stdout. Any difference fails it, naming the streams.
func (c *eventstoreCopyCmd) copyLog(e *env, src, dst eventstore.Store) error {
	ctx := e.ctx
	next, waiting := c.Every, false
	res, err := logcopy.Copy(ctx, src, dst, logcopy.Options{Batch: c.Batch, Progress: func(r logcopy.Result) {
		if r.HeldBack > 0 && !waiting {
			fmt.Fprintf(e.stderr, "booking: waiting for %d events of --from that a transaction still running on its PostgreSQL server holds back\n", r.HeldBack)
		}
		waiting = r.HeldBack > 0
		if r.Read >= next {
			fmt.Fprintf(e.stderr, "booking: copied %d events\n", r.Read)
			next = r.Read + c.Every
		}
	}})
	if err != nil {
		return fmt.Errorf("copy (run it again to resume): %w", err)
	}
	truncated, err := logcopy.MirrorTruncations(ctx, src, dst, res.Streams)
	if err != nil {
		return fmt.Errorf("copy (run it again to resume): %w", err)
	}
	rep, err := logcopy.Verify(ctx, src, dst, res.Streams)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if len(rep.Differ) > 0 {
		for _, d := range rep.Differ {
			fmt.Fprintf(e.stderr, "booking: stream %s differs: %d events (digest %s) in --from, %d (digest %s) in --to\n",
				d.Stream, d.SourceEvents, d.SourceDigest, d.TargetEvents, d.Target)
		}
		return fmt.Errorf("verify: %d of %d streams differ; nothing else was changed", len(rep.Differ), rep.Streams)
	}
	fmt.Fprintf(e.stdout, "booking: copied %d events of %d streams (%d placeholders for purged revisions, %d streams truncated); verified: %d events, every stream's digest equal (log digest %s)\n",
		res.Read, len(res.Streams), res.Placeholders, truncated, rep.SourceEvents, logDigest(ctx, src, res.Streams))
	return nil
}

// cutOver moves the service to the copied log: stream BOOKING marked for
// backend to, the positions written on backend from mapped to the same
// events in dst, the log index's snapshots dropped; it prints what it did
// and how to start the service.
func (c *eventstoreCopyCmd) cutOver(e *env, pool *pgxpool.Pool, src, dst eventstore.Store, from, to string, log *slog.Logger) error {
	ctx := e.ctx
	last, notified, usedNATS, err := natsrun.CutOver(ctx, natsrun.Config{URL: c.NATSURL, DataDir: c.DataDir}, to, log)
	if err != nil {
		return fmt.Errorf("stream BOOKING: %w", err)
	}
	var after *eventstore.RecordedEvent
	if notified {
		evs, err := dst.ReadStream(ctx, last.Stream, last.Revision, 1)
		if err == nil && len(evs) == 1 && evs[0].ID == last.ID {
			after = &evs[0]
		}
	}
	moved, err := movePositions(ctx, pool, src, dst, from, after)
	if err != nil {
		return err
	}
	if err := pgcoord.DeleteSnapshots(ctx, pool); err != nil {
		return databaseError(err)
	}
	fmt.Fprintf(e.stdout, "booking: %d checkpoints moved to the same events in the new log", moved)
	if usedNATS {
		fmt.Fprintf(e.stdout, "; stream BOOKING marked %s", to)
		if after != nil {
			fmt.Fprintf(e.stdout, ", the relay resumes after its last message (%s@%d)", last.Stream, last.Revision)
		}
	}
	fmt.Fprintf(e.stdout, "\nbooking: start the service with BOOKING_EVENT_STORE=%s\n", redactSpec(c.To))
	return nil
}

// copyBackend returns the backend of the event store flag names: postgres,
// or kurrentdb for a KurrentDB connection string; anything else is a
// configuration error naming the flag.
func copyBackend(flag, spec string) (string, error) {
	switch {
	case spec == "postgres":
		return pgcoord.BackendPostgres, nil
	case kurrentdb.IsConnectionString(spec):
		return pgcoord.BackendKurrentDB, nil
	}
	return "", configError(flag, "must be postgres or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string")
}

// serviceStopped returns an error if a relay holds its lease: a running
// service would keep writing to the log being copied.
func serviceStopped(ctx context.Context, pool *pgxpool.Pool) error {
	until, held, err := pgcoord.NewLeases(pool).HeldUntil(ctx)
	if err != nil {
		return databaseError(err)
	}
	if held {
		return fmt.Errorf("booking serve is running (its relay holds a lease until %s): stop every replica before copying the log", until.Format(time.RFC3339))
	}
	return nil
}

// movePositions maps every stored position written on backend from (worker,
// read-model and relay checkpoints) to the same event in dst's log, in one
// transaction; the pool stamps them with the target backend. Positions
// already on the target's backend (a resumed copy) are left. The relay's
// resumes no earlier than after, the event stream BOOKING's last message
// names, so nothing is published twice. It returns the number of positions
// moved.
func movePositions(ctx context.Context, pool *pgxpool.Pool, src, dst eventstore.Store, from string, after *eventstore.RecordedEvent) (int, error) {
	stored, err := pgcoord.StoredPositions(ctx, pool, from)
	if err != nil {
		return 0, databaseError(err)
	}
	ps := make([]eventstore.Position, len(stored))
	for i, p := range stored {
		ps[i] = p.Position
	}
	m, err := logcopy.MapPositions(ctx, src, dst, ps)
	if err != nil {
		return 0, err
	}
	for i, p := range stored {
		stored[i].Position = m[p.Position]
		if p.Table == pgcoord.TableRelays && after != nil && stored[i].Position.Less(after.Position) {
			stored[i].Position = after.Position
		}
	}
	if err := pgcoord.MovePositions(ctx, pool, stored); err != nil {
		return 0, fmt.Errorf("move the checkpoints: %w", databaseError(err))
	}
	return len(stored), nil
}

// logDigest is a digest of every stream's digest (logcopy.Digest), in
// stream order: the same for two logs that show the same events, whatever
// their positions. A read error gives "unknown".
func logDigest(ctx context.Context, store eventstore.Store, streams []string) string {
	h := sha256.New()
	for _, s := range streams {
		n, d, err := logcopy.Digest(ctx, store, s)
		if err != nil {
			return "unknown"
		}
		fmt.Fprintf(h, "%s %d %s\n", s, n, d)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// userinfo matches the password of a connection string.
var userinfo = regexp.MustCompile(`(://[^:/@]*):[^@/]*@`)

// redactSpec returns a BOOKING_EVENT_STORE value without its password.
func redactSpec(spec string) string {
	if spec == "" || spec == "postgres" {
		return "postgres"
	}
	return userinfo.ReplaceAllString(spec, "${1}:xxxxx@")
}
