package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/cmd/booking/internal/faults"
	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/cmd/booking/internal/memlimit"
	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
	"github.com/retrysafe/booking/cmd/booking/internal/natsrun"
	"github.com/retrysafe/booking/cmd/booking/internal/storage"
	"github.com/retrysafe/booking/cmd/booking/internal/tracing"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/commands/webhookstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/projections"
	"github.com/retrysafe/booking/provider/providersim"
	"github.com/retrysafe/booking/provider/stripe"
)

// The pace of the process's one log subscription (ARCHITECTURE.md,
// "Performance"): while events arrive it reads the log at most once per
// readGap (fanout.Config.ReadGap); once idle it polls for other replicas'
// appends at most every idlePoll (pgstore.WithPollInterval), while this
// process's own appends wake it at once.
const (
	readGap  = 100 * time.Millisecond
	idlePoll = time.Second
)

// limitMemory sets the default soft memory limit unless GOMEMLIMIT is set
// (memlimit.Apply); none when the simulator or NATS run in the process.
func (s *Server) limitMemory(context.Context) error {
	memlimit.Apply(os.LookupEnv, s.dev || s.cfg.NATSURL == "").Log(s.log)
	return nil
}

// openDatabase migrates the database and opens its pool. Positions stored
// by another backend would make the workers skip or repeat events: it
// refuses to start and says what to rebuild or reset.
func (s *Server) openDatabase(ctx context.Context) error {
	pool, err := storage.OpenMigrated(ctx, s.cfg.DatabaseURL, 32, s.backend, faults.SQLCounter())
	if err != nil {
		return err
	}
	s.pool = pool
	s.onClose(func() {
		if !s.leavePool {
			pool.Close()
		}
	})
	return pgcoord.CheckBackend(ctx, pool, s.backend)
}

// openEventLog opens the event log, whose one subscription (the log
// reader) polls for other replicas' appends at most every idlePoll once
// idle. On KurrentDB it checks that the server answers — not fatal: the
// store connects on its first call and every later call tries again, so
// the service comes up when KurrentDB does — and that no stored position
// lies beyond its head (checkHead).
func (s *Server) openEventLog(ctx context.Context) error {
	elog, err := storage.OpenEventLog(s.cfg.EventStore, s.pool, s.log, pgstore.WithPollInterval(0, idlePoll))
	if err != nil {
		return err
	}
	s.elog = elog
	s.onClose(elog.Close)
	if elog.Ping == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := elog.Ping(pctx); err != nil {
		s.log.Error("KurrentDB is not reachable yet (BOOKING_EVENT_STORE); requests answer 503 and the workers retry until it is",
			"err", err)
		s.log.Warn("the stored log positions could not be checked against the head of the event log (KurrentDB unreachable at start); " +
			"if BOOKING_EVENT_STORE now names another log, restart once it is reachable to have them checked")
		return nil
	}
	s.log.Info("event store", "backend", s.backend)
	return checkHead(pctx, s.pool, elog)
}

// openKeys opens the key table under the master keys and checks that they
// unwrap the keys already stored.
func (s *Server) openKeys(ctx context.Context) error {
	s.keys = keystore.New(s.pool, s.opts.MasterKeys)
	if err := s.keys.CheckMasterKeys(ctx); err != nil {
		return configerr.New("BOOKING_MASTER_KEYS", "%v", err)
	}
	s.log.Info("secrets at rest", "master_key_ids", s.opts.MasterKeys.IDs(), "master_keys_from", s.opts.MasterKeysFrom.String(),
		"provider_api_key_from", s.opts.ProviderAPIKeyFrom.String())
	return nil
}

// listen binds the API's listener — before the simulator starts, so that
// it knows where to send webhooks — and makes the service's metrics.
func (s *Server) listen(context.Context) error {
	ln, err := s.cfg.HTTPLimits.Listen(s.cfg.HTTPAddr)
	if err != nil {
		return err
	}
	s.ln = ln
	s.onClose(func() { ln.Close() })
	s.apiURL = "http://" + ln.Addr().String()
	s.mx = serveMetrics(s.opts.Version, s.cfg, s.pool, ln)
	return nil
}

// startAdmin serves the operators' endpoints (startAdmin).
func (s *Server) startAdmin(context.Context) error {
	admin, err := startAdmin(s.cfg.AdminAddr, s.mx, s.cfg.HTTPReadHeaderTimeout, s.log)
	if err != nil {
		return err
	}
	s.onClose(admin.stop)
	return nil
}

// startProvider makes the payment adapter the service uses and notes
// where it sends (for the start log line): every payment goes through the
// Stripe adapter, to Stripe's API (no BOOKING_PROVIDER_URL), a proxy, or
// the simulator, which dev mode starts in-process first (its webhooks to
// the API). Errors name the variable at fault.
func (s *Server) startProvider(ctx context.Context) error {
	cfg := s.cfg
	s.providerURL = cfg.ProviderURL
	if s.dev {
		// The simulator keeps its PaymentIntents in the data directory, so a
		// restart of dev mode can still refund what it charged before.
		sim, err := providersim.Open(providersim.Config{WebhookURL: s.apiURL + "/v1/provider/webhooks",
			WebhookSecret: cfg.ProviderWebhookSecret, Retention: cfg.ProviderWindow, Logger: s.log.With("component", "provider-sim"),
			DataDir: SimDataDir(cfg.DataDir), APIKey: s.opts.ProviderAPIKey})
		if err != nil {
			return fmt.Errorf("provider simulator (BOOKING_DATA_DIR): %w", err)
		}
		if err := sim.Start(ctx, cfg.ProviderSimAddr); err != nil {
			sim.Close()
			return config.ListenError(cfg.ProviderSimAddr, "BOOKING_PROVIDER_SIM_ADDR", err)
		}
		s.providerURL = sim.URL()
		s.onClose(func() { sim.Close() })
	}
	payments, err := stripe.New(stripe.Config{SecretKey: s.opts.ProviderAPIKey, BaseURL: s.providerURL,
		HTTPClient:               &http.Client{Timeout: cfg.ProviderTimeout + time.Second, Transport: tracing.Transport(providerTransport(), s.opts.TracerProvider)},
		WebhookSecrets:           []string{cfg.ProviderWebhookSecret},
		IgnoreAPIVersionMismatch: cfg.StripeIgnoreAPIVersion})
	if err != nil {
		return configerr.New("BOOKING_PROVIDER_URL", "%v", err)
	}
	if s.providerURL == "" {
		s.providerURL = "Stripe's API"
	}
	s.payments = payments
	return nil
}

// SimDataDir is where the provider simulator keeps its state inside a data
// directory: the same place for the in-process simulator of dev mode and for
// `booking provider-sim`, so either can pick up the other's charges.
func SimDataDir(dataDir string) string {
	if dataDir == "" {
		return ""
	}
	return filepath.Join(dataDir, "provider-sim")
}

// newHandler makes the use cases (commands.Handler) over the event log,
// the database clock and the payment adapter, with the test build's fault
// hooks, and the API's HTTP server and handler; it registers the state
// and lag gauges.
func (s *Server) newHandler(ctx context.Context) error {
	cfg := s.cfg
	hcfg := commands.DefaultConfig()
	hcfg.Executor = uuid.Must(uuid.NewV7()).String()
	hcfg.Deployment = cfg.Deployment
	hcfg.IntentRetention = cfg.IntentRetention
	hcfg.IntentLease = cfg.IntentLease
	hcfg.HoldFor = cfg.ReservationHold
	hcfg.PaymentLease = cfg.PaymentLease
	hcfg.ProviderTimeout = cfg.ProviderTimeout
	hcfg.SendMargin = config.SendMargin
	hcfg.PaymentDeadline = cfg.PaymentDeadline
	hcfg.ProviderWindow = cfg.ProviderWindow // same-key retries only inside the provider's idempotency window
	hcfg.ClockSkew = cfg.ProviderClockSkew
	hcfg.InUseWait = cfg.InUseWait
	s.executor = hcfg.Executor
	s.webhooks = webhookstore.New(s.pool)
	opts := []commands.Option{commands.WithMetrics(s.mx), commands.WithKeys(s.keys), commands.WithProcessedEvents(s.webhooks),
		commands.WithTracerProvider(s.opts.TracerProvider)}
	hooks, testAPI, err := faults.FromEnv(ctx, s.log)
	if err != nil {
		return err
	}
	if hooks.Step != nil {
		opts = append(opts, commands.WithHooks(hooks))
	}
	if events, ok := s.elog.Store.(*pgstore.Store); ok {
		// The events and the key table share one database: a unit of work
		// writes both in one transaction.
		opts = append(opts, commands.WithKeyUnits(keystore.Units{Events: events, Keys: s.keys}))
	}
	s.clock = pgcoord.NewClock(s.pool)
	s.handler = commands.New(hcfg, s.elog.Store, s.clock, s.payments, commands.NewRegistry(), s.log, opts...)

	// The API's server: its timeouts and header limit (HTTPLimits).
	s.srv = cfg.HTTPLimits.Server(httpapi.New(httpapi.Config{Authenticator: s.opts.Auth,
		RetryBudgetRate: cfg.RetryBudgetRate, RetryBudgetBurst: cfg.RetryBudgetBurst,
		Ready: ready(s.pool, s.elog), RateLimited: s.mx.RateLimited, Test: testAPI,
		ObserveRequest: s.mx.ObserveHTTP, ObserveWebhook: s.mx.Webhook, TracerProvider: s.opts.TracerProvider,
		WebhookTimeout: cfg.WebhookTimeout, WebhookConcurrency: cfg.WebhookConcurrency},
		s.handler, projections.NewReader(s.pool), s.log))
	s.mx.MustRegister(metrics.NewStateCollector(s.elog.Lag, projections.NewReader(s.pool), s.clock, cfg.IntentRetention, s.log))
	lagc := newLagCollector(s.pool, s.elog.Distance, s.log)
	if s.elog.Head != nil {
		lagc.WithHead(s.elog.Head) // a checkpoint beyond the head reports -1
	}
	s.mx.MustRegister(lagc)
	return nil
}

// openLogReader makes the one reader of the log for the whole process:
// every follower (process manager, recovery, expiry, projectors, relay)
// subscribes through it, each from its own checkpoint under its own lock or
// lease, and is served from one subscription of the store and its
// in-memory window (ARCHITECTURE.md, "One log reader per process").
func (s *Server) openLogReader(context.Context) error {
	s.followed = fanout.New(s.elog.Store, fanout.Config{Logger: s.log.With("component", "log-reader"), ReadGap: readGap})
	s.onClose(func() { // after the workers stopped (or were abandoned at shutdown)
		st := s.followed.Stats()
		s.log.Info("log reader stopped", "subscriptions", st.Subscriptions, "events_read", st.Received,
			"served_from_memory", st.FromMemory, "caught_up_from_store", st.FromStore, "catch_up_reads", st.CatchUpReads)
	})
	return nil
}

// startNotifications starts the embedded NATS server unless
// BOOKING_NATS_URL names one, and makes the relay, one active instance
// across replicas under its fenced lease, which runs as a worker. Close
// closes them after the workers stopped: the relay has saved its
// checkpoint, then the connection drains and the embedded server stops.
// (A relay abandoned at shutdown saves nothing more; the next one resumes
// after the stream's last notification.)
func (s *Server) startNotifications(ctx context.Context) error {
	cfg := s.cfg
	notif, err := natsrun.Start(ctx, natsrun.Config{URL: cfg.NATSURL, Addr: cfg.NATSAddr, DuplicateWindow: cfg.NATSDuplicateWindow,
		RecoveryInterval: cfg.RecoveryInterval, DataDir: cfg.DataDir, Backend: s.backend, TracerProvider: s.opts.TracerProvider}, s.log, s.pool, s.followed)
	if err != nil {
		return err
	}
	s.notif = notif
	s.onClose(notif.Close)
	return nil
}

// providerIdleConns is how many idle connections to the payment provider
// are kept for reuse: about the concurrent bookings a replica serves, so a
// send does not open (and TLS-handshake) a connection of its own.
// net/http's default keeps 2 per host, which under load closes and reopens
// connections on most calls.
const providerIdleConns = 64

// providerTransport returns net/http's default transport with
// providerIdleConns idle connections kept per host.
func providerTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 2*providerIdleConns, providerIdleConns
	return t
}
