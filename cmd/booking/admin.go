package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/connlimit"
	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
)

// defaultAdminAddr is BOOKING_ADMIN_ADDR's default: loopback, so that the
// operators' endpoints of `make run` answer on the machine only.
const defaultAdminAddr = "127.0.0.1:9091"

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
// BOOKING_ADMIN_ADDR (see listenError). The admin listener's connections
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
		return nil, listenError(addr, "BOOKING_ADMIN_ADDR", err)
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
