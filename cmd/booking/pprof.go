package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves the Go runtime profiles of net/http/pprof under
// /debug/pprof/ on addr (BOOKING_PPROF_ADDR), on a listener and mux of its
// own, never the API's; an empty addr serves nothing. It returns the
// address it listens on ("" when off) and a function that stops the server
// (waiting at most a second for requests in progress; a running CPU profile
// is cut short). A listen error names BOOKING_PPROF_ADDR (see listenError).
// The profiles show the program's internals (and /debug/pprof/cmdline its
// arguments): bind it to a loopback or otherwise private address.
func startPprof(addr string, log *slog.Logger) (string, func(), error) {
	if addr == "" {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, listenError(addr, "BOOKING_PPROF_ADDR", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also every named profile: heap, goroutine, allocs, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof server stopped", "err", err)
		}
	}()
	log.Info("pprof listening", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		<-done
	}, nil
}
