package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/cmd/booking/internal/connlimit"
	"github.com/retrysafe/booking/cmd/booking/internal/faults"
	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
	"github.com/retrysafe/booking/cmd/booking/internal/natsrun"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/commands/webhookstore"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/projections"
	"github.com/retrysafe/booking/projections/notify"
	"github.com/retrysafe/booking/provider/providersim"
	"github.com/retrysafe/booking/provider/stripe"
)

type serveCmd struct {
	ServeConfig `embed:""`
}

// devWebhookSecret is the webhook secret of dev mode (simulator in-process).
const devWebhookSecret = "whsec_dev"

// The pace of the process's one log subscription (ARCHITECTURE.md,
// "Performance"): while events arrive it reads the log at most once per
// serveReadGap (fanout.Config.ReadGap); once idle it polls for other
// replicas' appends at most every serveIdlePoll (pgstore.WithPollInterval),
// while this process's own appends wake it at once.
const (
	serveReadGap  = 100 * time.Millisecond
	serveIdlePoll = time.Second
)

// Run starts the service and blocks until the context is done, then shuts
// down gracefully: HTTP first (in-flight requests finish), then workers,
// the simulator, and the database pool.
func (c *serveCmd) Run(e *env) error {
	cfg := c.ServeConfig
	dev := cfg.devMode() // dev mode: the provider simulator in-process
	if dev && cfg.ProviderWebhookSecret == "" {
		cfg.ProviderWebhookSecret = devWebhookSecret
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	masterKeys, masterKeysFrom, err := cfg.Secrets.LoadMasterKeys(dev, cfg.DataDir)
	if err != nil {
		return err
	}
	providerAPIKey, providerAPIKeyFrom, err := cfg.Secrets.LoadProviderKey(dev)
	if err != nil {
		return err
	}
	log, auth, err := cfg.loggerAndAuth(e)
	if err != nil {
		return err
	}
	ctx := e.ctx
	applyMemoryLimit(os.LookupEnv, dev || cfg.NATSURL == "").Log(log)

	backend, _ := eventStoreBackend(cfg.EventStore) // checked by Validate
	pool, err := openMigrated(ctx, cfg.DatabaseURL, 32, backend, faults.SQLCounter())
	if err != nil {
		return err
	}
	// leavePool is set at shutdown when abandoned work did not stop:
	// pgxpool's Close would wait for the connections it still holds.
	leavePool := false
	defer func() {
		if !leavePool {
			pool.Close()
		}
	}()
	// Positions stored by another backend would make the workers skip or
	// repeat events: refuse to start and say what to rebuild or reset.
	if err := pgcoord.CheckBackend(ctx, pool, backend); err != nil {
		return err
	}
	// The log's one subscription (below) polls for other replicas' appends
	// at most every serveIdlePoll once idle; this process's own appends
	// wake it at once.
	elog, err := openEventLog(cfg.EventStore, pool, log, pgstore.WithPollInterval(0, serveIdlePoll))
	if err != nil {
		return err
	}
	defer elog.close()
	store := elog.Store
	if elog.ping != nil {
		// Not fatal: the store connects on its first call and every later
		// call tries again, so the service comes up when KurrentDB does.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := elog.ping(pctx); err != nil {
			log.Error("KurrentDB is not reachable yet (BOOKING_EVENT_STORE); requests answer 503 and the workers retry until it is",
				"err", err)
			log.Warn("the stored log positions could not be checked against the head of the event log (KurrentDB unreachable at start); " +
				"if BOOKING_EVENT_STORE now names another log, restart once it is reachable to have them checked")
		} else {
			log.Info("event store", "backend", backend)
			if err := checkHead(pctx, pool, elog); err != nil {
				cancel()
				return err
			}
		}
		cancel()
	}
	registry := commands.NewRegistry()
	keys := keystore.New(pool, masterKeys)
	if err := keys.CheckMasterKeys(ctx); err != nil {
		return configError("BOOKING_MASTER_KEYS", "%v", err)
	}
	log.Info("secrets at rest", "master_key_ids", masterKeys.IDs(), "master_keys_from", masterKeysFrom.String(),
		"provider_api_key_from", providerAPIKeyFrom.String())

	// The HTTP listener comes first so the simulator knows where to send webhooks.
	ln, err := cfg.HTTPLimits.listen(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	apiURL := "http://" + ln.Addr().String()
	mx := serveMetrics(e.version, cfg, pool, ln)
	admin, err := startAdmin(cfg.AdminAddr, mx, cfg.HTTPReadHeaderTimeout, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer admin.stop()

	tp, stopTracing, err := newTracing(ctx, os.Getenv, e.stdout)
	if err != nil {
		ln.Close()
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("tracing: the last spans were not exported", "err", err)
		}
	}()

	payments, providerURL, closeSim, err := startProvider(ctx, cfg, dev, apiURL, providerAPIKey, tp, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer closeSim()

	hcfg := commands.DefaultConfig()
	hcfg.Executor = uuid.Must(uuid.NewV7()).String()
	hcfg.Deployment = cfg.Deployment
	hcfg.IntentRetention = cfg.IntentRetention
	hcfg.IntentLease = cfg.IntentLease
	hcfg.HoldFor = cfg.ReservationHold
	hcfg.PaymentLease = cfg.PaymentLease
	hcfg.ProviderTimeout = cfg.ProviderTimeout
	hcfg.SendMargin = sendMargin
	hcfg.PaymentDeadline = cfg.PaymentDeadline
	hcfg.ProviderWindow = cfg.ProviderWindow // same-key retries only inside the provider's idempotency window
	hcfg.ClockSkew = cfg.ProviderClockSkew
	hcfg.InUseWait = cfg.InUseWait
	opts := []commands.Option{commands.WithMetrics(mx), commands.WithKeys(keys), commands.WithProcessedEvents(webhookstore.New(pool)),
		commands.WithTracerProvider(tp)}
	hooks, testAPI, err := faults.FromEnv(ctx, log)
	if err != nil {
		ln.Close()
		return err
	}
	if hooks.Step != nil {
		opts = append(opts, commands.WithHooks(hooks))
	}
	clock := pgcoord.NewClock(pool)
	h := commands.New(hcfg, store, clock, payments, registry, log, opts...)

	// The API's server: its timeouts and header limit (HTTPLimits); its
	// handler is set once the workers are wired.
	srv := cfg.HTTPLimits.server(nil)

	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	locks := pgcoord.NewLocks(pool)
	startWorker := func(name string, work func(ctx context.Context) error) {
		workers.Add(1)
		go func() {
			defer workers.Done()
			locks.RunExclusive(wctx, log, name, cfg.RecoveryInterval/3, work)
		}()
	}
	cps := pgcoord.NewCheckpoints(pool)
	// One reader of the log for the whole process: every follower below
	// (process manager, recovery, expiry, projectors, relay) subscribes
	// through it, each from its own checkpoint under its own lock or lease,
	// and is served from one subscription of the store and its in-memory
	// window (ARCHITECTURE.md, "One log reader per process").
	followed := fanout.New(store, fanout.Config{Logger: log.With("component", "log-reader"), ReadGap: serveReadGap})
	defer func() { // after the workers stopped (or were abandoned at shutdown)
		st := followed.Stats()
		log.Info("log reader stopped", "subscriptions", st.Subscriptions, "events_read", st.Received,
			"served_from_memory", st.FromMemory, "caught_up_from_store", st.FromStore, "catch_up_reads", st.CatchUpReads)
	}()
	startWorker(commands.FollowUpsName, func(ctx context.Context) error { return h.RunFollowUps(ctx, followed, cps) })
	startWorker(commands.RecoveryName, func(ctx context.Context) error {
		return h.RunRecovery(ctx, followed, cps, cfg.RecoveryInterval/3)
	})
	startWorker(commands.ExpiryName, func(ctx context.Context) error {
		return h.RunExpiry(ctx, followed, cps, cfg.RecoveryInterval/3)
	})
	startWorker("intent-purge", func(ctx context.Context) error {
		return runPurge(ctx, elog.purger, cfg.IntentRetention, cfg.RecoveryInterval, log)
	})
	// Every process compares the event store's clock with the service's on
	// its own appends (booking_event_store_clock_skew_seconds).
	workers.Add(1)
	go func() { defer workers.Done(); h.RunClockSkew(wctx) }()
	// The payment reconciler (unknown outcomes, expired leases, deadlines,
	// cancels, refunds), one instance across replicas.
	startWorker(commands.ReconcilerName, func(ctx context.Context) error {
		return h.RunReconciler(ctx, elog.pending, cfg.RecoveryInterval/3)
	})
	// One live projector per read model, each a single instance across
	// replicas under its lock, handed over to a waiting `booking projections
	// rebuild`; the list endpoints read them.
	waits := newRebuildWaits(locks)
	for _, p := range projections.All(cfg.IntentRetention) {
		pr := newSharedProjector(pool, waits, p)
		workers.Add(1)
		go func() {
			defer workers.Done()
			locks.RunExclusive(wctx, log, projectorLock(p.Name()), time.Second, func(ctx context.Context) error { return pr.Run(ctx, followed) })
		}()
	}
	srv.Handler = httpapi.New(httpapi.Config{Authenticator: auth,
		RetryBudgetRate: cfg.RetryBudgetRate, RetryBudgetBurst: cfg.RetryBudgetBurst,
		Ready: ready(pool, elog), RateLimited: mx.RateLimited, Test: testAPI,
		ObserveRequest: mx.ObserveHTTP, ObserveWebhook: mx.Webhook, TracerProvider: tp,
		WebhookTimeout: cfg.WebhookTimeout, WebhookConcurrency: cfg.WebhookConcurrency},
		h, projections.NewReader(pool), log)
	mx.MustRegister(metrics.NewStateCollector(elog.lag, projections.NewReader(pool), clock, cfg.IntentRetention, log))
	lagc := newLagCollector(pool, elog.distance, log)
	if elog.head != nil {
		lagc.WithHead(elog.head) // a checkpoint beyond the head reports -1
	}
	mx.MustRegister(lagc)
	// Notifications: the embedded NATS server unless BOOKING_NATS_URL, and
	// the relay, one active instance across replicas under its fenced lease.
	// The deferred Close runs after the workers stopped: the relay has saved
	// its checkpoint, then the connection drains and the embedded server
	// stops. (A relay abandoned at shutdown saves nothing more; the next
	// one resumes after the stream's last notification.)
	notif, err := natsrun.Start(ctx, natsrun.Config{URL: cfg.NATSURL, Addr: cfg.NATSAddr, DuplicateWindow: cfg.NATSDuplicateWindow,
		RecoveryInterval: cfg.RecoveryInterval, DataDir: cfg.DataDir, Backend: backend, TracerProvider: tp}, log, pool, followed)
	if err != nil {
		ln.Close()
		stopWorkers()
		workers.Wait()
		return err
	}
	defer notif.Close()
	workers.Add(1)
	go func() {
		defer workers.Done()
		notif.RunRelay(wctx)
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("booking serve listening", "api", apiURL, "provider", providerURL, "executor", hcfg.Executor)
	fmt.Fprintf(e.stdout, "booking: listening on %s\n", apiURL)
	if f, ok := e.stdout.(*os.File); ok {
		f.Sync()
	}

	select {
	case err := <-serveErr:
		stopWorkers()
		workers.Wait()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	stopWorkers()
	// Payment steps run detached from the shutdown (a send cut short would
	// leave its outcome unknown), so they are waited for within the grace
	// period only; then they are abandoned, and what was cut short is
	// finished by the next process's recovery, as after a crash.
	if !waitWithin(sctx, &workers) {
		log.Warn("shutdown timeout passed with background work still running; it is abandoned, and recovery finishes it",
			"shutdown_timeout", cfg.ShutdownTimeout)
		h.Abandon()
		actx, acancel := context.WithTimeout(context.Background(), abandonTimeout)
		if !waitWithin(actx, &workers) {
			log.Error("background work did not stop once abandoned; stopping without it", "waited", abandonTimeout)
			leavePool = true
		}
		acancel()
	}
	// The ended orders' keys waiting to be deleted get a budget of their
	// own: the grace period may be spent by now.
	fctx, fcancel := context.WithTimeout(context.Background(), shredFlushTimeout)
	h.FlushShreds(fctx)
	fcancel()
	return err
}

// abandonTimeout bounds the wait for abandoned background work to see its
// context cancelled and return.
const abandonTimeout = 5 * time.Second

// shredFlushTimeout bounds the key deletes booking serve sends as it stops,
// after the shutdown timeout's grace period (docs/configuration.md,
// BOOKING_SHUTDOWN_TIMEOUT).
const shredFlushTimeout = 5 * time.Second

// waitWithin waits for wg until ctx ends; it reports whether wg finished
// (also when both happened by the time it looks). The goroutine that waits
// for wg outlives a false answer until wg finishes or the process exits.
func waitWithin(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// checkHead refuses positions beyond the head of the event log
// (pgcoord.CheckHead): the log is another one than the positions were read
// from. Nothing to check on PostgreSQL (elog.head is nil).
func checkHead(ctx context.Context, pool *pgxpool.Pool, elog *eventLog) error {
	if elog.head == nil {
		return nil
	}
	head, err := elog.head(ctx)
	if err != nil {
		return fmt.Errorf("check the stored log positions against the event log: %w", err)
	}
	return pgcoord.CheckHead(ctx, pool, head)
}

// ready is the readiness check of /readyz: PostgreSQL answers and, on
// KurrentDB, so does the event store.
func ready(pool *pgxpool.Pool, elog *eventLog) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return err
		}
		if elog.ping != nil {
			if err := elog.ping(ctx); err != nil {
				return &httpapi.DependencyError{Name: "event store (KurrentDB)", Err: err}
			}
		}
		return nil
	}
}

// newLagCollector returns the lag gauges of every projector and of the
// notification relay (metrics.LagCollector), from their checkpoints in the
// database and their distance to the head of the log (dist).
func newLagCollector(pool *pgxpool.Pool, dist metrics.LogDistance, log *slog.Logger) *metrics.LagCollector {
	return metrics.NewLagCollector(dist, projections.Names(), projections.NewReader(pool).Checkpoint,
		func(ctx context.Context) (eventstore.Position, error) {
			st, err := notify.LoadRelayState(ctx, pool, notify.DefaultRelayName)
			if errors.Is(err, pgx.ErrNoRows) {
				return eventstore.Position{}, nil // never ran: everything is to be published
			}
			return st.Checkpoint, err
		}, log)
}

// listenError is a listener that could not be bound: "cannot listen on
// ADDR (VARIABLE): reason", such as "address already in use". It is a
// failure while running (exit 1), not a configuration error: the address
// parsed, another process holds it.
func listenError(addr, variable string, err error) error {
	reason := err
	var se *os.SyscallError
	if errors.As(err, &se) {
		reason = se.Err // "address already in use" without "listen tcp …: bind:"
	}
	return &listenErr{addr: addr, variable: variable, err: err, reason: reason}
}

// listenErr is listenError's error; Unwrap returns the net error.
type listenErr struct {
	addr, variable string
	err, reason    error
}

func (e *listenErr) Error() string {
	return fmt.Sprintf("cannot listen on %s (%s): %v", e.addr, e.variable, e.reason)
}

func (e *listenErr) Unwrap() error { return e.err }

// startProvider returns the payment adapter the service uses and where it
// sends (for the start log line): every payment goes through the Stripe
// adapter, to Stripe's API (no BOOKING_PROVIDER_URL), a proxy, or the
// simulator, which dev mode starts in-process first (its webhooks to
// apiURL). closeSim stops that simulator (a no-op otherwise). Errors name
// the variable at fault.
func startProvider(ctx context.Context, cfg ServeConfig, dev bool, apiURL, key string, tp trace.TracerProvider, log *slog.Logger) (*stripe.Client, string, func(), error) {
	providerURL, closeSim := cfg.ProviderURL, func() {}
	if dev {
		// The simulator keeps its PaymentIntents in the data directory, so a
		// restart of dev mode can still refund what it charged before.
		sim, err := providersim.Open(providersim.Config{WebhookURL: apiURL + "/v1/provider/webhooks",
			WebhookSecret: cfg.ProviderWebhookSecret, Retention: cfg.ProviderWindow, Logger: log.With("component", "provider-sim"),
			DataDir: simDataDir(cfg.DataDir), APIKey: key})
		if err != nil {
			return nil, "", nil, fmt.Errorf("provider simulator (BOOKING_DATA_DIR): %w", err)
		}
		if err := sim.Start(ctx, cfg.ProviderSimAddr); err != nil {
			sim.Close()
			return nil, "", nil, listenError(cfg.ProviderSimAddr, "BOOKING_PROVIDER_SIM_ADDR", err)
		}
		providerURL, closeSim = sim.URL(), func() { sim.Close() }
	}
	payments, err := stripe.New(stripe.Config{SecretKey: key, BaseURL: providerURL,
		HTTPClient:               &http.Client{Timeout: cfg.ProviderTimeout + time.Second, Transport: tracedTransport(nil, tp)},
		WebhookSecrets:           []string{cfg.ProviderWebhookSecret},
		IgnoreAPIVersionMismatch: cfg.StripeIgnoreAPIVersion})
	if err != nil {
		closeSim()
		return nil, "", nil, configError("BOOKING_PROVIDER_URL", "%v", err)
	}
	if providerURL == "" {
		providerURL = "Stripe's API"
	}
	return payments, providerURL, closeSim, nil
}

// serveMetrics returns the service's metrics for version, with the
// collectors of the database pool, of this replica's share of the retry
// budget and of the API listener ln.
func serveMetrics(version string, cfg ServeConfig, pool *pgxpool.Pool, ln *connlimit.Listener) *metrics.Metrics {
	mx := metrics.New(version)
	mx.MustRegister(append(metrics.NewRetryBudgetGauges(cfg.RetryBudgetRate, cfg.RetryBudgetBurst),
		metrics.NewPoolCollector(pool), metrics.NewListenerCollector("api", ln))...)
	return mx
}
