package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/connlimit"
	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
	"github.com/retrysafe/booking/cmd/booking/internal/storage"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/projections"
	"github.com/retrysafe/booking/projections/notify"
)

// checkHead refuses positions beyond the head of the event log
// (pgcoord.CheckHead): the log is another one than the positions were read
// from. Nothing to check on PostgreSQL (elog.Head is nil).
func checkHead(ctx context.Context, pool *pgxpool.Pool, elog *storage.EventLog) error {
	if elog.Head == nil {
		return nil
	}
	head, err := elog.Head(ctx)
	if err != nil {
		return fmt.Errorf("check the stored log positions against the event log: %w", err)
	}
	return pgcoord.CheckHead(ctx, pool, head)
}

// ready is the readiness check of /readyz: PostgreSQL answers and, on
// KurrentDB, so does the event store.
func ready(pool *pgxpool.Pool, elog *storage.EventLog) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return err
		}
		if elog.Ping != nil {
			if err := elog.Ping(ctx); err != nil {
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

// serveMetrics returns the service's metrics for version, with the
// collectors of the database pool, of this replica's share of the retry
// budget and of the API listener ln.
func serveMetrics(version string, cfg config.Serve, pool *pgxpool.Pool, ln *connlimit.Listener) *metrics.Metrics {
	mx := metrics.New(version)
	mx.MustRegister(append(metrics.NewRetryBudgetGauges(cfg.RetryBudgetRate, cfg.RetryBudgetBurst),
		metrics.NewPoolCollector(pool), metrics.NewListenerCollector("api", ln))...)
	return mx
}

// adminMaxConns bounds the admin listener's open connections (connlimit):
// its clients are a few scrapers and an operator's profiler.
const adminMaxConns = 32

// adminServer is the operators' listener (BOOKING_ADMIN_ADDR).
type adminServer struct {
	// Addr is the address it listens on, "" when off.
	Addr string
	// Listener is its connection-limited listener; nil when off.
	Listener *connlimit.Listener
	srv      *http.Server
	done     chan struct{}
}

// startAdmin serves the endpoints for operators on addr (BOOKING_ADMIN_ADDR),
// on a listener and mux of their own, never the API's; an empty addr serves
// nothing. It serves
//
//	GET /metrics          mx, the Prometheus exposition format
//	GET /debug/pprof/...  the Go runtime's profiles (net/http/pprof:
//	                      heap, goroutine, allocs, CPU profile, trace, ...)
//
// and answers 404 to anything else. Nothing there asks for credentials, and
// the profiles show the program's internals (/debug/pprof/cmdline its
// arguments): bind it to a loopback or otherwise private address. Headers
// must arrive within readHeaderTimeout; there is no write timeout, so a CPU
// profile may run as long as asked (?seconds=N). A listen error names
// BOOKING_ADMIN_ADDR (see config.ListenError). The admin listener's connections
// are added to mx (metrics.ListenerCollector, listener "admin"). Stop it
// with stop.
func startAdmin(addr string, mx *metrics.Metrics, readHeaderTimeout time.Duration, log *slog.Logger) (*adminServer, error) {
	a := &adminServer{done: make(chan struct{})}
	if addr == "" {
		close(a.done)
		return a, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, config.ListenError(addr, "BOOKING_ADMIN_ADDR", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", mx.Handler())
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also every named profile: heap, goroutine, allocs, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	a.Addr = ln.Addr().String()
	a.Listener = connlimit.New(ln, adminMaxConns)
	mx.MustRegister(metrics.NewListenerCollector("admin", a.Listener))
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(a.Listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", "err", err)
		}
	}()
	log.Info("admin listening", "metrics", "http://"+a.Addr+"/metrics", "pprof", "http://"+a.Addr+"/debug/pprof/")
	return a, nil
}

// stop stops the admin server, waiting at most a second for requests in
// progress (a running CPU profile is cut short). It is a no-op when off.
func (a *adminServer) stop() {
	if a.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if a.srv.Shutdown(ctx) != nil {
			a.srv.Close()
		}
	}
	<-a.done
}
