package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/term"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/server"
	"github.com/retrysafe/booking/cmd/booking/loadgen"
	"github.com/retrysafe/booking/migrations"
	"github.com/retrysafe/booking/provider/providersim"
)

type migrateCmd struct {
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL."`
}

// Run applies the migrations; safe to run concurrently with another migrate or serve.
func (c *migrateCmd) Run(e *env) error {
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		return err
	}
	if err := migrations.Up(e.ctx, c.DatabaseURL); err != nil {
		return databaseError(err)
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
	SearchLag     time.Duration `name:"search-lag" env:"BOOKING_PROVIDER_SIM_SEARCH_LAG" default:"3s" help:"How long a new PaymentIntent stays invisible to search (Stripe's search is eventually consistent); 0 for none."`
	APIKey        string        `name:"api-key" env:"BOOKING_PROVIDER_SIM_API_KEY" help:"When set, /v1 requests must carry the key as Stripe takes it (Authorization: Bearer <key>, or Basic with it as user name; 401 otherwise); never logged."`
	DataDir       string        `name:"data-dir" env:"BOOKING_DATA_DIR" help:"Keep PaymentIntents, refunds and idempotency keys in DIR/provider-sim across restarts (empty: in memory only)."`
	config.Log    `embed:""`
}

// searchLag is the simulator's Config.SearchLag for a configured lag,
// where 0 means none (Config's zero means its default).
func searchLag(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Run serves the provider simulator until the context is done.
func (c *providerSimCmd) Run(e *env) error {
	if err := config.CheckListenAddr("BOOKING_PROVIDER_SIM_ADDR", c.Addr, ""); err != nil {
		return err
	}
	if c.Retention <= 0 {
		return configError("BOOKING_PROVIDER_RETENTION", "must be a positive duration")
	}
	if c.SearchLag < 0 {
		return configError("BOOKING_PROVIDER_SIM_SEARCH_LAG", "must not be negative")
	}
	if c.SlowDelay < 0 {
		return configError("BOOKING_PROVIDER_SLOW_DELAY", "must not be negative")
	}
	if u, err := url.Parse(c.WebhookURL); c.WebhookURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return configError("BOOKING_PROVIDER_WEBHOOK_URL", "must be an http(s) URL such as http://127.0.0.1:8080/v1/provider/webhooks, or empty for none")
	}
	log, err := e.logger(c.Log)
	if err != nil {
		return err
	}
	cfg := providersim.Config{Addr: c.Addr, WebhookURL: c.WebhookURL, WebhookSecret: c.WebhookSecret,
		Retention: c.Retention, SlowDelay: c.SlowDelay, SearchLag: searchLag(c.SearchLag), Logger: log,
		DataDir: server.SimDataDir(c.DataDir), APIKey: strings.TrimSpace(c.APIKey)}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("provider-sim: %w", err)
	}
	sim, err := providersim.Open(cfg)
	if err != nil {
		return fmt.Errorf("provider-sim (BOOKING_DATA_DIR): %w", err)
	}
	if err := sim.Start(e.ctx, c.Addr); err != nil {
		sim.Close()
		return config.ListenError(c.Addr, "BOOKING_PROVIDER_SIM_ADDR", err)
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
	URL          string        `name:"url" env:"BOOKING_LOADGEN_URL" default:"http://127.0.0.1:8080" help:"Base URL of the API (used when no --target is given)."`
	Targets      []string      `name:"target" help:"Base URL of a replica; repeat (or separate with commas) for several: requests go round robin, a connection error moves to the next."`
	SimURL       string        `name:"sim-url" env:"BOOKING_LOADGEN_SIM_URL" default:"http://127.0.0.1:8090" help:"Provider simulator URL, to count charges and inject faults (empty: neither)."`
	Tokens       string        `name:"tokens" env:"BOOKING_API_TOKENS" help:"name=token[:admin],... (one admin token creates the shows)."`
	Clients      int           `name:"clients" default:"16" help:"Concurrent clients."`
	Orders       int           `name:"orders" default:"200" help:"Bookings to attempt in all (bounded run)."`
	ShowSize     int           `name:"show-size" default:"0" help:"Bookings (and seats) per show; 0: one show for all."`
	Rate         float64       `name:"rate" default:"0" help:"Most new bookings per second, all clients together; 0: a quarter of --retry-budget-rate per user token, under the service's retry budget."`
	BudgetRate   float64       `name:"retry-budget-rate" env:"BOOKING_RETRY_BUDGET_RATE" default:"20" help:"The service's per-actor request budget (requests/s), for the default --rate."`
	Timeout      time.Duration `name:"timeout" default:"2s" help:"Client timeout of one request."`
	LoseRate     float64       `name:"lose-rate" default:"0.1" help:"Share of order requests sent with a 50 ms timeout, so the answer is lost after commit."`
	DeclineRate  float64       `name:"decline-rate" default:"0.1" help:"Share of orders paid with tok_decline."`
	DupRate      float64       `name:"dup-rate" default:"0.1" help:"Share of order requests sent twice at once (double clicks)."`
	FreshRate    float64       `name:"fresh-rate" default:"0.03" help:"Share of orders followed by another order with a fresh key for the same reservation."`
	AbandonRate  float64       `name:"abandon-rate" default:"0.05" help:"Share of reservations never ordered (left to expire)."`
	CancelRate   float64       `name:"cancel-rate" default:"0.1" help:"Share of confirmed orders cancelled."`
	LateRate     float64       `name:"late-rate" default:"0.02" help:"Share of orders sent at the hold's expires_at (when that is at most --late-wait away)."`
	LateWait     time.Duration `name:"late-wait" default:"30s" help:"Longest wait for a late order's expires_at."`
	Faults       []string      `name:"faults" help:"Simulator faults to toggle during the run: error-before-commit, error-after-commit, drop-after-commit, webhook-duplicates, webhook-reorder, latency, or all."`
	FaultRate    float64       `name:"fault-rate" default:"0.05" help:"Probability of each rate-based fault while faults are on."`
	FaultPeriod  time.Duration `name:"fault-period" default:"15s" help:"Faults are on for one period, off for the next, and so on."`
	FaultLatency time.Duration `name:"fault-latency" default:"50ms" help:"Provider latency added while the latency fault is on."`
	FaultMarker  string        `name:"fault-marker" help:"A file that exists while another program injects a fault (make chaos: a replica killed or paused, PostgreSQL down); 502–504 meanwhile are reported as during faults."`
	MaxDuration  time.Duration `name:"max-duration" default:"5m" help:"No booking starts after this; the audit runs after the bookings in flight."`
	Drain        time.Duration `name:"drain" default:"1m" help:"How long bookings in flight at --max-duration may still take."`
	Settle       time.Duration `name:"settle" default:"0s" help:"How long the audit waits for the service to settle after the load; 0: 2 × (--payment-lease + --recovery-interval)."`
	PaymentLease time.Duration `name:"payment-lease" env:"BOOKING_PAYMENT_LEASE" default:"30s" help:"The service's payment lease, for the default --settle."`
	Recovery     time.Duration `name:"recovery-interval" env:"BOOKING_RECOVERY_INTERVAL" default:"30s" help:"The service's recovery interval, for the default --settle."`
	Retention    time.Duration `name:"intent-retention" env:"BOOKING_INTENT_RETENTION" default:"24h" help:"The service's intent retention, which the audit's replay of the intents read model applies."`
	DatabaseURL  string        `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL of the service's database: the audit reads the event log and compares the read models with a replay (empty: those rows are skipped)."`
	NATSURL      string        `name:"nats-url" env:"BOOKING_NATS_URL" help:"NATS server holding stream BOOKING, which the audit reads (empty: that row is skipped)."`
	MinSuccess   float64       `name:"min-success" default:"0.5" help:"Share (0–1) of the bookings meant to succeed (not abandoned, not paid with a declining card) that must end confirmed; fewer, or none at all, makes the run inconclusive (exit 3)."`
	Report       string        `name:"report" help:"Also write the report as JSON to this file."`
	EventStore   string        `name:"event-store" env:"BOOKING_EVENT_STORE" default:"postgres" help:"The service's event store the audit reads: postgres, or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string."`
	NoProgress   bool          `name:"no-progress" help:"No progress bar (there is none unless stderr is a terminal)."`
}

// DefaultSettle is the audit's default wait for the service to settle:
// 2 × (payment lease + recovery interval), long enough for an expired
// payment lease to be taken over and the recovery after it to finish.
func DefaultSettle(paymentLease, recoveryInterval time.Duration) time.Duration {
	return 2 * (paymentLease + recoveryInterval)
}

// Run parses the tokens and runs the load generator.
func (c *loadgenCmd) Run(e *env) error {
	cfg := loadgen.Config{URL: c.URL, Targets: c.Targets, SimURL: c.SimURL, Clients: c.Clients, Orders: c.Orders,
		ShowSize: c.ShowSize, Rate: c.Rate, Timeout: c.Timeout, LoseRate: c.LoseRate, DeclineRate: c.DeclineRate,
		DupRate: c.DupRate, FreshRate: c.FreshRate, AbandonRate: c.AbandonRate, CancelRate: c.CancelRate,
		LateRate: c.LateRate, LateWait: c.LateWait, Faults: c.Faults, FaultRate: c.FaultRate, FaultPeriod: c.FaultPeriod,
		FaultLatency: c.FaultLatency, FaultMarker: c.FaultMarker, MaxDuration: c.MaxDuration, Drain: c.Drain, Settle: c.Settle,
		DatabaseURL: c.DatabaseURL, NATSURL: c.NATSURL, IntentRetention: c.Retention, Out: e.stdout, ReportFile: c.Report,
		MinSuccess: c.MinSuccess}
	// A bad flag is named before the tokens are looked for.
	if err := loadgen.CheckFlags(cfg); err != nil {
		return err
	}
	tokens, err := config.ParseTokens(c.Tokens)
	if err != nil {
		return configError("BOOKING_API_TOKENS", "%v", err)
	}
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
	// The service's settings the defaults are derived from; loadgen.Run
	// checks the rest of the flags.
	switch {
	case !(c.BudgetRate > 0) || math.IsInf(c.BudgetRate, 1): // NaN too
		return configError("--retry-budget-rate (BOOKING_RETRY_BUDGET_RATE)", "must be positive, got %v", c.BudgetRate)
	case c.PaymentLease <= 0:
		return configError("--payment-lease (BOOKING_PAYMENT_LEASE)", "must be positive, got %v", c.PaymentLease)
	case c.Recovery <= 0:
		return configError("--recovery-interval (BOOKING_RECOVERY_INTERVAL)", "must be positive, got %v", c.Recovery)
	}
	if cfg.Rate == 0 {
		cfg.Rate = max(1, c.BudgetRate*float64(len(cfg.Users))/4)
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle(c.PaymentLease, c.Recovery)
	}
	if f, ok := e.stderr.(*os.File); ok && !c.NoProgress && term.IsTerminal(int(f.Fd())) {
		cfg.Progress = f
	}
	if err := config.CheckEventStore(c.EventStore); err != nil {
		return err
	}
	if c.DatabaseURL != "" {
		if err := checkDatabaseURL(c.DatabaseURL); err != nil {
			return err
		}
		pool, err := pgxpool.New(e.ctx, c.DatabaseURL)
		if err != nil {
			return configError("DATABASE_URL", "%v", err)
		}
		defer pool.Close()
		if err := pool.Ping(e.ctx); err != nil { // before the load, not at the audit after it
			return databaseError(err)
		}
		elog, err := openEventLog(c.EventStore, pool, slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		defer elog.close()
		cfg.Log = elog.Store
	}
	return loadgen.Run(e.ctx, cfg)
}
