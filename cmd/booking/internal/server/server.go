// Package server is `booking serve`: a Server opens its parts in order —
// the database, the event log, the keys, the API's listener and metrics,
// the admin listener, the payment provider, the use cases and their HTTP
// adapter, the one log reader and the notifications — starts the API and
// the background workers (a table: each runs under its lock, one instance
// across replicas), waits for the context to end, shuts down gracefully
// and closes its parts in reverse order.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/connlimit"
	"github.com/retrysafe/booking/cmd/booking/internal/identity"
	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
	"github.com/retrysafe/booking/cmd/booking/internal/natsrun"
	"github.com/retrysafe/booking/cmd/booking/internal/secrets"
	"github.com/retrysafe/booking/cmd/booking/internal/storage"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/commands/webhookstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/provider/stripe"
)

// Options are what a Server needs besides its configuration: the secrets
// loaded from it (secrets.Config) and where each came from, the logger,
// the authenticator of the API's callers, the build's version (for the
// metrics) and the tracer provider its spans are recorded with (nil: none).
type Options struct {
	MasterKeys         *envelope.Keyring
	MasterKeysFrom     secrets.Source
	ProviderAPIKey     string
	ProviderAPIKeyFrom secrets.Source
	Log                *slog.Logger
	Auth               identity.Authenticator
	Version            string
	TracerProvider     trace.TracerProvider
}

// Server is a running `booking serve`. Open opens its parts; Run serves
// until its context ends and shuts down; Close closes the parts.
type Server struct {
	cfg     config.Serve
	dev     bool // dev mode: the provider simulator in-process
	opts    Options
	log     *slog.Logger
	backend string

	pool        *pgxpool.Pool
	elog        *storage.EventLog
	keys        *keystore.Store
	webhooks    *webhookstore.Store // processed webhook events, marks written in batches
	ln          *connlimit.Listener
	apiURL      string
	mx          *metrics.Metrics
	payments    *stripe.Client
	providerURL string
	executor    string
	clock       *pgcoord.Clock
	handler     *commands.Handler
	srv         *http.Server
	followed    *fanout.Log
	notif       *natsrun.Notifications

	// closers close the parts opened so far; Close runs them last first.
	closers []func()
	// running waits for the workers started; stopWorkers ends their
	// context.
	running     sync.WaitGroup
	stopWorkers context.CancelFunc
	// leavePool is set at shutdown when abandoned work did not stop:
	// pgxpool's Close would wait for the connections it still holds.
	leavePool bool
}

// Open opens the parts of the service configured by cfg (checked by
// config.Serve.Prepare) in order; on an error it closes what it opened.
// Errors name the variable at fault.
func Open(ctx context.Context, cfg config.Serve, opts Options) (*Server, error) {
	s := &Server{cfg: cfg, dev: cfg.DevMode(), opts: opts, log: opts.Log}
	s.backend, _ = config.EventStoreBackend(cfg.EventStore) // checked by Validate
	for _, open := range []func(context.Context) error{
		s.limitMemory,
		s.openDatabase,
		s.openEventLog,
		s.openKeys,
		s.listen,
		s.startAdmin,
		s.startProvider,
		s.newHandler,
		s.openLogReader,
		s.startNotifications,
	} {
		if err := open(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// onClose adds close to what Close runs.
func (s *Server) onClose(close func()) { s.closers = append(s.closers, close) }

// Close closes the parts opened, the last opened first: after Run, the
// notifications (the relay has saved its checkpoint), the simulator, the
// admin listener, the event log and the database pool (unless abandoned
// work still holds connections).
func (s *Server) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Run starts the background workers and serves the API until ctx is done,
// then shuts down gracefully: HTTP first (in-flight requests finish), then
// the workers. The line "booking: listening on URL" on stdout says the API
// is up. It returns the error of a server that stopped by itself, or of
// the shutdown.
func (s *Server) Run(ctx context.Context, stdout io.Writer) error {
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopWorkers = stop
	s.startWorkers(wctx)

	serveErr := make(chan error, 1)
	go func() { serveErr <- s.srv.Serve(s.ln) }()
	s.log.Info("booking serve listening", "api", s.apiURL, "provider", s.providerURL, "executor", s.executor)
	fmt.Fprintf(stdout, "booking: listening on %s\n", s.apiURL)
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}

	select {
	case err := <-serveErr:
		s.stopWorkers()
		s.running.Wait()
		return err
	case <-ctx.Done():
	}
	return s.shutdown()
}

// abandonTimeout bounds the wait for abandoned background work to see its
// context cancelled and return.
const abandonTimeout = 5 * time.Second

// shredFlushTimeout bounds the key deletes booking serve sends as it stops,
// after the shutdown timeout's grace period (docs/configuration.md,
// BOOKING_SHUTDOWN_TIMEOUT).
const shredFlushTimeout = 5 * time.Second

// shutdown stops the API (in-flight requests finish within the shutdown
// timeout; those still running then are cut off, their connections
// closed) and the workers, then sends the waiting key deletes and the
// processed webhook events' marks.
func (s *Server) shutdown() error {
	s.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Requests still running are cut off as a crash would cut them:
		// closing their connections ends their contexts, nothing was
		// acknowledged to their clients, and a repeat under the same key
		// gets the outcome. Like abandoned background work, this is part
		// of a graceful stop, not a failure.
		s.log.Warn("shutdown timeout passed with requests still running; their connections are closed, and a repeat of each gets its outcome",
			"shutdown_timeout", s.cfg.ShutdownTimeout)
		_ = s.srv.Close()
		err = nil
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	s.stopWorkers()
	// Payment steps run detached from the shutdown (a send cut short would
	// leave its outcome unknown), so they are waited for within the grace
	// period only; then they are abandoned, and what was cut short is
	// finished by the next process's recovery, as after a crash.
	if !waitWithin(sctx, &s.running) {
		s.log.Warn("shutdown timeout passed with background work still running; it is abandoned, and recovery finishes it",
			"shutdown_timeout", s.cfg.ShutdownTimeout)
		s.handler.Workers.Abandon()
		actx, acancel := context.WithTimeout(context.Background(), abandonTimeout)
		if !waitWithin(actx, &s.running) {
			s.log.Error("background work did not stop once abandoned; stopping without it", "waited", abandonTimeout)
			s.leavePool = true
		}
		acancel()
	}
	// The ended orders' keys waiting to be deleted get a budget of their
	// own: the grace period may be spent by now.
	fctx, fcancel := context.WithTimeout(context.Background(), shredFlushTimeout)
	s.handler.Workers.FlushShreds(fctx)
	if err := s.webhooks.Flush(fctx); err != nil {
		s.log.Warn("processed webhook events not recorded; their redeliveries are processed again", "err", err)
	}
	fcancel()
	return err
}

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
