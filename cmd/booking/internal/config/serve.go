// Package config is the configuration of the booking command's services:
// `booking serve`'s settings (Serve, read once from the environment and
// flags through their struct tags, kong's), how callers authenticate
// (Auth), the API server's limits (HTTPLimits) and logging (Log), with the
// checks that refuse a bad value naming the variable at fault (a
// *configerr.Error: exit status 2).
package config

import (
	"io"
	"log/slog"
	"math"
	"net/url"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/cmd/booking/internal/logging"
	"github.com/retrysafe/booking/cmd/booking/internal/natsrun"
	"github.com/retrysafe/booking/cmd/booking/internal/secrets"
)

// Serve is the configuration of `booking serve`, read once from the
// environment (flags override) with the defaults documented in
// docs/configuration.md.
// Validate checks every value and the safety relations between the windows,
// naming the variable at fault.
type Serve struct {
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL (event store unless BOOKING_EVENT_STORE names KurrentDB; read models, checkpoints, leases, clock)."`
	HTTPAddr    string `name:"http-addr" env:"BOOKING_HTTP_ADDR" default:"127.0.0.1:8080" help:"HTTP listen address of the API."`
	// HTTPLimits are the API server's timeouts and size and connection
	// limits.
	HTTPLimits `embed:""`
	// AdminAddr, when set, serves the operators' endpoints (/metrics,
	// /debug/pprof/) on a listener of its own.
	AdminAddr  string `name:"admin-addr" env:"BOOKING_ADMIN_ADDR" default:"127.0.0.1:9091" help:"Listen address of the operators' endpoints: /metrics and the Go profiler (/debug/pprof/); empty serves none. Never the API's port."`
	EventStore string `name:"event-store" env:"BOOKING_EVENT_STORE" default:"postgres" help:"postgres, or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string (PostgreSQL keeps read models, checkpoints, leases and the clock)."`

	NATSURL               string        `name:"nats-url" env:"BOOKING_NATS_URL" help:"External NATS server URL; empty starts an embedded server."`
	NATSAddr              string        `name:"nats-addr" env:"BOOKING_NATS_ADDR" default:"127.0.0.1:4222" help:"Listen address of the embedded NATS server."`
	NATSDuplicateWindow   time.Duration `name:"nats-duplicate-window" env:"BOOKING_NATS_DUPLICATE_WINDOW" default:"10m" help:"JetStream duplicate window of stream BOOKING."`
	ProviderURL           string        `name:"provider-url" env:"BOOKING_PROVIDER_URL" help:"Base URL of the simulator, or of a proxy in front of Stripe; empty: Stripe's API with BOOKING_STRIPE_SECRET_KEY, else the simulator in-process (dev mode)."`
	ProviderSimAddr       string        `name:"provider-sim-addr" env:"BOOKING_PROVIDER_SIM_ADDR" default:"127.0.0.1:8090" help:"Listen address of the in-process provider simulator."`
	ProviderWebhookSecret string        `name:"provider-webhook-secret" env:"BOOKING_PROVIDER_WEBHOOK_SECRET" help:"Signing secret of the provider's webhooks (Stripe's whsec_…; any string is used as the HMAC key as is; dev default: whsec_dev)."`
	// StripeIgnoreAPIVersion accepts webhook events rendered in another API
	// version than the adapter's (stripe.APIVersion).
	StripeIgnoreAPIVersion bool   `name:"stripe-ignore-api-version" env:"BOOKING_STRIPE_IGNORE_API_VERSION" help:"Accept webhook events of another Stripe API version than the pinned one (only while moving the endpoint to it)."`
	APITokens              string `name:"api-tokens" env:"BOOKING_API_TOKENS" help:"With --auth=tokens: the bearer tokens, name=token[:admin],... (the name is the actor id)."`
	DataDir                string `name:"data-dir" env:"BOOKING_DATA_DIR" default:".data" help:"Data directory (embedded NATS storage; in dev mode the provider simulator's state in provider-sim/ and the generated master key)."`
	Deployment             string `name:"deployment" env:"BOOKING_DEPLOYMENT" help:"Prefix of provider idempotency keys; empty in dev."`

	Log `embed:""`

	// Auth chooses how callers authenticate (BOOKING_AUTH) and configures
	// JWT verification.
	Auth Auth `embed:""`

	// Secrets: each from its variable or from the file its _FILE variable
	// names (never both); never logged.
	Secrets secrets.Config `embed:""`

	IntentRetention time.Duration `name:"intent-retention" env:"BOOKING_INTENT_RETENTION" default:"24h" help:"How long intents (idempotency keys) are kept."`
	IntentLease     time.Duration `name:"intent-lease" env:"BOOKING_INTENT_LEASE" default:"5s" help:"How long a request owns its intent before the commit point."`
	ReservationHold time.Duration `name:"reservation-hold" env:"BOOKING_RESERVATION_HOLD" default:"10m" help:"How long a reservation holds its seats."`
	PaymentLease    time.Duration `name:"payment-lease" env:"BOOKING_PAYMENT_LEASE" default:"30s" help:"Lease of a payment attempt's sender."`
	ProviderTimeout time.Duration `name:"provider-timeout" env:"BOOKING_PROVIDER_TIMEOUT" default:"10s" help:"Timeout of one provider call."`
	ProviderWindow  time.Duration `name:"provider-retention" env:"BOOKING_PROVIDER_RETENTION" default:"24h" help:"The provider's idempotency-key retention window."`
	// ProviderClockSkew pads the time range in which an attempt's payment
	// is looked for in the provider's list of payments.
	ProviderClockSkew time.Duration `name:"provider-clock-skew" env:"BOOKING_PROVIDER_CLOCK_SKEW" default:"2m" help:"Bound on the difference between the database clock and the provider's; pads the range of an attempt's payments in reconciliation."`
	PaymentDeadline   time.Duration `name:"payment-deadline" env:"BOOKING_PAYMENT_DEADLINE" default:"15m" help:"How long an order may still be paid, counted from its claim (the commit point of POST /v1/orders)."`
	RecoveryInterval  time.Duration `name:"recovery-interval" env:"BOOKING_RECOVERY_INTERVAL" default:"30s" help:"Bound on the delay before background jobs finish interrupted work."`
	InUseWait         time.Duration `name:"in-use-wait" env:"BOOKING_IN_USE_WAIT" default:"2s" help:"How long a repeat waits for an in-flight first request before 409."`
	ShutdownTimeout   time.Duration `name:"shutdown-timeout" env:"BOOKING_SHUTDOWN_TIMEOUT" default:"15s" help:"Grace period for in-flight requests and background payment steps at shutdown (the waiting key deletes then get up to 5s more)."`

	RetryBudgetRate  float64 `name:"retry-budget-rate" env:"BOOKING_RETRY_BUDGET_RATE" default:"20" help:"Per-actor request budget: sustained requests per second."`
	RetryBudgetBurst int     `name:"retry-budget-burst" env:"BOOKING_RETRY_BUDGET_BURST" default:"40" help:"Per-actor request budget: burst size."`
}

// DevWebhookSecret is the webhook secret of dev mode (the provider
// simulator in-process) when BOOKING_PROVIDER_WEBHOOK_SECRET is not set.
const DevWebhookSecret = "whsec_dev"

// Prepare returns c ready to run, with dev mode's webhook secret
// (DevWebhookSecret) when none is set, and checks it (Validate).
func (c Serve) Prepare() (Serve, error) {
	if c.DevMode() && c.ProviderWebhookSecret == "" {
		c.ProviderWebhookSecret = DevWebhookSecret
	}
	return c, c.Validate()
}

// Log is the logging configuration of the commands that run a
// service (serve, provider-sim, notifications tail).
type Log struct {
	LogFormat string `name:"log-format" env:"BOOKING_LOG_FORMAT" default:"text" help:"Log format on stderr: text (key=value) or json (one object a line)."`
	LogLevel  string `name:"log-level" env:"BOOKING_LOG_LEVEL" default:"info" help:"Lowest level logged: debug, info, warn or error."`
}

// Logger returns the logger of c writing to w (see logging.New), or a
// configuration error naming BOOKING_LOG_FORMAT or BOOKING_LOG_LEVEL.
func (c Log) Logger(w io.Writer) (*slog.Logger, error) {
	if _, err := logging.ParseFormat(c.LogFormat); err != nil {
		return nil, configerr.New("BOOKING_LOG_FORMAT", "%v", err)
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return nil, configerr.New("BOOKING_LOG_LEVEL", "%v", err)
	}
	return logging.New(w, c.LogFormat, c.LogLevel)
}

// SendMargin is the safety margin of the payment send fence.
const SendMargin = 2 * time.Second

// Validate checks every field and the relations between windows that keep
// retries safe. The error names the environment variable at fault.
func (c *Serve) Validate() error {
	if err := CheckDatabaseURL(c.DatabaseURL); err != nil {
		return err
	}
	if err := CheckListenAddr("BOOKING_HTTP_ADDR", c.HTTPAddr, ""); err != nil {
		return err
	}
	if c.AdminAddr != "" {
		if err := CheckListenAddr("BOOKING_ADMIN_ADDR", c.AdminAddr, " (or empty: no metrics or profiler)"); err != nil {
			return err
		}
	}
	if c.NATSURL == "" {
		if err := CheckListenAddr("BOOKING_NATS_ADDR", c.NATSAddr, " (or set BOOKING_NATS_URL to use a running server)"); err != nil {
			return err
		}
	} else if _, err := natsrun.CheckURL(c.NATSURL); err != nil {
		return err
	}
	if err := CheckEventStore(c.EventStore); err != nil {
		return err
	}
	if err := c.validateProvider(); err != nil {
		return err
	}
	if err := CheckDistinctAddrs(c.listeners()); err != nil {
		return err
	}
	if c.DataDir == "" && (c.NATSURL == "" || c.DevMode()) {
		// Empty would put the embedded NATS server's storage and dev mode's
		// master key in the working directory, and keep the simulator's
		// charges in memory only.
		return configerr.New("BOOKING_DATA_DIR", "must not be empty: the embedded NATS server's storage and, in dev mode, the simulator's state and master key live there (default .data)")
	}
	if _, err := c.Log.Logger(io.Discard); err != nil {
		return err
	}
	if err := c.Auth.Validate(c.APITokens); err != nil {
		return err
	}
	if err := c.validateWindows(); err != nil {
		return err
	}
	if !(c.RetryBudgetRate > 0) || math.IsInf(c.RetryBudgetRate, 1) { // NaN and +Inf too: they turn the budget off
		return configerr.New("BOOKING_RETRY_BUDGET_RATE", "must be a positive number of requests per second, got %v", c.RetryBudgetRate)
	}
	if c.RetryBudgetBurst < 1 {
		return configerr.New("BOOKING_RETRY_BUDGET_BURST", "must be at least 1")
	}
	return nil
}

// validateWindows checks the durations and the relations between the
// windows that keep retries safe, naming the variable at fault.
func (c *Serve) validateWindows() error {
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"BOOKING_INTENT_RETENTION", c.IntentRetention}, {"BOOKING_INTENT_LEASE", c.IntentLease},
		{"BOOKING_RESERVATION_HOLD", c.ReservationHold}, {"BOOKING_PAYMENT_LEASE", c.PaymentLease},
		{"BOOKING_PROVIDER_TIMEOUT", c.ProviderTimeout}, {"BOOKING_PROVIDER_RETENTION", c.ProviderWindow},
		{"BOOKING_PAYMENT_DEADLINE", c.PaymentDeadline}, {"BOOKING_RECOVERY_INTERVAL", c.RecoveryInterval},
		{"BOOKING_NATS_DUPLICATE_WINDOW", c.NATSDuplicateWindow}, {"BOOKING_SHUTDOWN_TIMEOUT", c.ShutdownTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return configerr.New(p.name, "must be a positive duration such as 30s")
		}
	}
	if c.InUseWait < 0 {
		return configerr.New("BOOKING_IN_USE_WAIT", "must not be negative")
	}
	if err := c.HTTPLimits.Validate(c.InUseWait); err != nil {
		return err
	}
	if c.ProviderClockSkew < 0 {
		return configerr.New("BOOKING_PROVIDER_CLOCK_SKEW", "must not be negative")
	}
	if c.IntentRetention < 10*c.RecoveryInterval {
		return configerr.New("BOOKING_INTENT_RETENTION", "%s must be at least 10 × BOOKING_RECOVERY_INTERVAL (%s) so recovery finishes intents long before they expire",
			c.IntentRetention, c.RecoveryInterval)
	}
	if c.PaymentLease <= c.ProviderTimeout+SendMargin {
		return configerr.New("BOOKING_PAYMENT_LEASE", "%s must exceed BOOKING_PROVIDER_TIMEOUT (%s) + %s so a fenced send can finish inside its lease",
			c.PaymentLease, c.ProviderTimeout, SendMargin)
	}
	if c.ProviderWindow <= c.PaymentDeadline {
		return configerr.New("BOOKING_PROVIDER_RETENTION", "%s must exceed BOOKING_PAYMENT_DEADLINE (%s): retries of an attempt must stay inside the provider's idempotency window",
			c.ProviderWindow, c.PaymentDeadline)
	}
	if c.NATSDuplicateWindow < 2*c.RecoveryInterval {
		return configerr.New("BOOKING_NATS_DUPLICATE_WINDOW", "%s must be at least 2 × BOOKING_RECOVERY_INTERVAL (%s), so a relay that takes over within the recovery interval republishes inside the window",
			c.NATSDuplicateWindow, c.RecoveryInterval)
	}
	// The relay's own check (natsrun.Start), here so that it refuses the
	// window before anything starts: for a short recovery interval the
	// fail-over time exceeds 2 × the interval.
	relay := natsrun.RelayConfig(natsrun.Config{RecoveryInterval: c.RecoveryInterval}, slog.New(slog.DiscardHandler))
	if err := relay.CheckDuplicateWindow(c.NATSDuplicateWindow); err != nil {
		return configerr.New("BOOKING_NATS_DUPLICATE_WINDOW", "%s must exceed the relay's fail-over time %s (from BOOKING_RECOVERY_INTERVAL %s)",
			c.NATSDuplicateWindow, relay.FailoverTime(), c.RecoveryInterval)
	}
	return nil
}

// DevMode reports whether the provider simulator runs in-process: neither
// BOOKING_PROVIDER_URL nor a Stripe secret key is set.
func (c *Serve) DevMode() bool { return c.ProviderURL == "" && !c.Secrets.StripeKeySet() }

// stripeAPI is Stripe's API host: a BOOKING_PROVIDER_URL naming it needs a
// secret key like Stripe's API itself.
const stripeAPI = "api.stripe.com"

// validateProvider checks how the service reaches its payment provider:
// Stripe's API (a Stripe secret key, no URL), BOOKING_PROVIDER_URL (the
// simulator or a proxy; a key is optional, except for Stripe's own host),
// or dev mode (the simulator in-process); a webhook secret outside dev
// mode; and the secrets (secrets.Config.Check).
func (c *Serve) validateProvider() error {
	dev := c.DevMode()
	if c.ProviderURL != "" {
		u, err := url.Parse(c.ProviderURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return configerr.New("BOOKING_PROVIDER_URL", "must be an http(s) URL")
		}
		if u.Hostname() == stripeAPI && !c.Secrets.ProviderKeySet() {
			return configerr.New("BOOKING_STRIPE_SECRET_KEY", "required for Stripe's API (BOOKING_PROVIDER_URL names %s)", stripeAPI)
		}
	}
	if err := c.Secrets.Check(dev); err != nil {
		return err
	}
	if dev {
		return CheckListenAddr("BOOKING_PROVIDER_SIM_ADDR", c.ProviderSimAddr, "")
	}
	if c.ProviderWebhookSecret == "" {
		return configerr.New("BOOKING_PROVIDER_WEBHOOK_SECRET", "required with Stripe's API or BOOKING_PROVIDER_URL: the webhook endpoint's signing secret (whsec_…)")
	}
	return nil
}

// listeners returns the addresses `booking serve` listens on with c, by
// variable, in the order it binds them: the API, the admin listener (when
// set), the embedded NATS server (without BOOKING_NATS_URL) and the
// in-process simulator (dev mode).
func (c *Serve) listeners() []Listener {
	ls := []Listener{{"BOOKING_HTTP_ADDR", c.HTTPAddr}}
	if c.AdminAddr != "" {
		ls = append(ls, Listener{"BOOKING_ADMIN_ADDR", c.AdminAddr})
	}
	if c.NATSURL == "" {
		ls = append(ls, Listener{"BOOKING_NATS_ADDR", c.NATSAddr})
	}
	if c.DevMode() {
		ls = append(ls, Listener{"BOOKING_PROVIDER_SIM_ADDR", c.ProviderSimAddr})
	}
	return ls
}
