package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/loadgen"
	"github.com/retrysafe/booking/migrations"
	"github.com/retrysafe/booking/provider/providersim"
)

type migrateCmd struct {
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL."`
}

// Run applies the migrations; safe to run concurrently with another migrate or serve.
func (c *migrateCmd) Run(e *env) error {
	if c.DatabaseURL == "" {
		return configError("DATABASE_URL", "required (a postgres:// URL)")
	}
	if err := migrations.Up(e.ctx, c.DatabaseURL); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "booking: migrations applied")
	return nil
}

type providerSimCmd struct {
	Addr          string        `name:"addr" env:"BOOKING_PROVIDER_SIM_ADDR" default:"127.0.0.1:8090" help:"Listen address."`
	WebhookURL    string        `name:"webhook-url" env:"BOOKING_PROVIDER_WEBHOOK_URL" help:"Where to deliver signed webhooks (empty: none)."`
	WebhookSecret string        `name:"webhook-secret" env:"BOOKING_PROVIDER_WEBHOOK_SECRET" default:"whsec_dev" help:"HMAC secret of webhook signatures."`
	Retention     time.Duration `name:"retention" env:"BOOKING_PROVIDER_RETENTION" default:"24h" help:"Idempotency-key retention window."`
	SlowDelay     time.Duration `name:"slow-delay" env:"BOOKING_PROVIDER_SLOW_DELAY" default:"2s" help:"Delay of tok_slow."`
	APIKey        string        `name:"api-key" env:"BOOKING_PROVIDER_SIM_API_KEY" help:"When set, /v1 requests must carry Authorization: Bearer <key> (401 otherwise); never logged."`
	DataDir       string        `name:"data-dir" env:"BOOKING_DATA_DIR" help:"Keep charges, refunds and idempotency keys in DIR/provider-sim across restarts (empty: in memory only)."`
	LogConfig     `embed:""`
}

// simDataDir is where the provider simulator keeps its state inside a data
// directory: the same place for the in-process simulator of dev mode and for
// `booking provider-sim`, so either can pick up the other's charges.
func simDataDir(dataDir string) string {
	if dataDir == "" {
		return ""
	}
	return filepath.Join(dataDir, "provider-sim")
}

// Run serves the provider simulator until the context is done.
func (c *providerSimCmd) Run(e *env) error {
	if c.Retention <= 0 {
		return configError("BOOKING_PROVIDER_RETENTION", "must be a positive duration")
	}
	log, err := c.LogConfig.Logger(e.stderr)
	if err != nil {
		return err
	}
	cfg := providersim.Config{Addr: c.Addr, WebhookURL: c.WebhookURL, WebhookSecret: c.WebhookSecret,
		Retention: c.Retention, SlowDelay: c.SlowDelay, Logger: log,
		DataDir: simDataDir(c.DataDir), APIKey: strings.TrimSpace(c.APIKey)}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("provider-sim: %w", err)
	}
	sim, err := providersim.Open(cfg)
	if err != nil {
		return fmt.Errorf("provider-sim (BOOKING_DATA_DIR): %w", err)
	}
	if err := sim.Start(e.ctx, c.Addr); err != nil {
		sim.Close()
		return configError("BOOKING_PROVIDER_SIM_ADDR", "%v", err)
	}
	fmt.Fprintf(e.stdout, "booking: provider simulator on %s\n", sim.URL())
	<-e.ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return sim.Shutdown(sctx)
}

type projectionsCmd struct {
	Rebuild rebuildCmd `cmd:"" help:"Rebuild read models from the event log and swap them in."`
}

// loadgenCmd is `booking loadgen`: its flags, read into a loadgen.Config.
type loadgenCmd struct {
	URL         string        `name:"url" env:"BOOKING_LOADGEN_URL" default:"http://127.0.0.1:8080" help:"Base URL of the API."`
	SimURL      string        `name:"sim-url" env:"BOOKING_LOADGEN_SIM_URL" default:"http://127.0.0.1:8090" help:"Provider simulator URL, to count charges (empty: skip)."`
	Tokens      string        `name:"tokens" env:"BOOKING_API_TOKENS" help:"name=token[:admin],... (one admin token creates the show)."`
	Clients     int           `name:"clients" default:"16" help:"Concurrent clients."`
	Orders      int           `name:"orders" default:"200" help:"Orders to attempt in all (bounded run)."`
	Rate        float64       `name:"rate" default:"200" help:"Most new intents per second, all clients together."`
	Timeout     time.Duration `name:"timeout" default:"2s" help:"Client timeout of one request."`
	LoseRate    float64       `name:"lose-rate" default:"0.1" help:"Share of order requests sent with a 50 ms timeout, so the answer is lost after commit."`
	DeclineRate float64       `name:"decline-rate" default:"0.1" help:"Share of orders paid with tok_decline."`
	DupRate     float64       `name:"dup-rate" default:"0.1" help:"Share of order requests sent twice at once."`
	MaxDuration time.Duration `name:"max-duration" default:"5m" help:"Upper bound on the load; the audit runs after it."`
	Settle      time.Duration `name:"settle" default:"30s" help:"How long the audit waits for the service to settle after the load."`
	DatabaseURL string        `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL of the service's database (event store unless --event-store names KurrentDB), read by the audit (empty: the audit is skipped)."`
	EventStore  string        `name:"event-store" env:"BOOKING_EVENT_STORE" default:"postgres" help:"The service's event store the audit reads: postgres, or a kurrentdb://, esdb:// or esdb+discover:// connection string."`
}

// Run parses the tokens and runs the load generator.
func (c *loadgenCmd) Run(e *env) error {
	tokens, err := parseTokens(c.Tokens)
	if err != nil {
		return configError("BOOKING_API_TOKENS", "%v", err)
	}
	cfg := loadgen.Config{URL: c.URL, SimURL: c.SimURL, Clients: c.Clients, Orders: c.Orders, Rate: c.Rate,
		Timeout: c.Timeout, LoseRate: c.LoseRate, DeclineRate: c.DeclineRate, DupRate: c.DupRate,
		MaxDuration: c.MaxDuration, Settle: c.Settle, Out: e.stdout}
	for tok, a := range tokens {
		if a.Admin {
			cfg.Admin = tok
		} else {
			cfg.Users = append(cfg.Users, tok)
		}
	}
	if cfg.Admin == "" || len(cfg.Users) == 0 {
		return configError("BOOKING_API_TOKENS", "loadgen needs one admin token and at least one other")
	}
	sort.Strings(cfg.Users)
	if err := checkEventStore(c.EventStore); err != nil {
		return err
	}
	if c.DatabaseURL != "" {
		pool, err := pgxpool.New(e.ctx, c.DatabaseURL)
		if err != nil {
			return configError("DATABASE_URL", "%v", err)
		}
		defer pool.Close()
		elog, err := openEventLog(c.EventStore, pool, slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		defer elog.close()
		cfg.Log = elog.Store
	}
	return loadgen.Run(e.ctx, cfg)
}
