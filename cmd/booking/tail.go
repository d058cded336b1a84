package main

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/natsrun"
	"github.com/retrysafe/booking/migrations"
	"github.com/retrysafe/booking/projections/notify"
)

type notificationsCmd struct {
	Tail tailCmd `cmd:"" help:"Reference subscriber: durable pull consumer with dedup and per-entity ordering."`
}

// tailCmd is `booking notifications tail`, the reference subscriber of
// stream BOOKING: see notify.Subscriber for what it guarantees (duplicates
// dropped by Nats-Msg-Id, per-entity order by stream revision, gaps
// reported).
type tailCmd struct {
	Durable          string        `name:"durable" default:"booking-tail" help:"Durable consumer name (instances sharing it share the work)."`
	Subject          string        `name:"subject" default:"booking.v1.>" help:"Subject filter."`
	JSON             bool          `name:"json" help:"Print each notification's payload as one line of JSON."`
	NATSURL          string        `name:"nats-url" env:"BOOKING_NATS_URL" default:"nats://127.0.0.1:4222" help:"NATS server URL."`
	DatabaseURL      string        `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL (processed set and effect table)."`
	AckWait          time.Duration `name:"ack-wait" env:"BOOKING_NOTIFY_ACK_WAIT" default:"30s" help:"Redelivery timeout of an unacknowledged notification."`
	ProcessedHorizon time.Duration `name:"processed-horizon" env:"BOOKING_NOTIFY_PROCESSED_HORIZON" default:"24h" help:"How long message ids stay in the processed set."`
	config.Log       `embed:""`
}

// validate checks the flags; errors name the variable or flag at fault.
func (c *tailCmd) validate() error {
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		return err
	}
	if c.NATSURL == "" {
		return configError("BOOKING_NATS_URL", "required")
	}
	if _, err := natsrun.CheckURL(c.NATSURL); err != nil {
		return err
	}
	if c.Durable == "" || strings.ContainsAny(c.Durable, ".*> \t") {
		return configError("--durable", "must be a non-empty name without '.', '*', '>' or white space")
	}
	if c.Subject != notify.SubjectAll && !strings.HasPrefix(c.Subject, notify.SubjectPrefix) {
		return configError("--subject", "must be under %s", notify.SubjectAll)
	}
	if c.AckWait < time.Second {
		return configError("BOOKING_NOTIFY_ACK_WAIT", "must be at least 1s")
	}
	if c.ProcessedHorizon <= 0 {
		return configError("BOOKING_NOTIFY_PROCESSED_HORIZON", "must be a positive duration")
	}
	return nil
}

// Run consumes notifications until the context is done (SIGINT, SIGTERM),
// printing one line per applied notification on stdout; reports (gaps,
// stale revisions, a summary at the end) go to stderr.
func (c *tailCmd) Run(e *env) error {
	if err := c.validate(); err != nil {
		return err
	}
	ctx := e.ctx
	log, err := e.logger(c.Log)
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, c.DatabaseURL); err != nil {
		return databaseError(err)
	}
	pool, err := pgxpool.New(ctx, c.DatabaseURL)
	if err != nil {
		return configError("DATABASE_URL", "%v", err)
	}
	defer pool.Close()
	tp, stopTracing, err := newTracing(ctx, os.Getenv, e.stderr) // stdout is the notifications'
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTracing(sctx)
	}()
	return natsrun.Tail(ctx, natsrun.TailConfig{URL: c.NATSURL, Durable: c.Durable, Subject: c.Subject, JSON: c.JSON,
		AckWait: c.AckWait, ProcessedHorizon: c.ProcessedHorizon, TracerProvider: tp}, pool, e.stdout, log)
}
