package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestPprof: BOOKING_PPROF_ADDR is off by default (the serve configuration
// has no address, and no address serves nothing); set, it serves
// /debug/pprof/ (the index and a heap profile) on its own listener; an
// address that is not host:port is a configuration error naming the
// variable (exit status 2), and a busy one a listen error naming it.
func TestPprof(t *testing.T) {
	t.Setenv("BOOKING_PPROF_ADDR", "")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "--pprof-addr=STRING") || !strings.Contains(stdout.String(), "$BOOKING_PPROF_ADDR") {
		t.Errorf("serve --help does not list --pprof-addr ($BOOKING_PPROF_ADDR):\n%s", stdout.String())
	}
	if c := validServeConfig(); c.PprofAddr != "" {
		t.Errorf("the default BOOKING_PPROF_ADDR = %q, want empty (off)", c.PprofAddr)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr, stop, err := startPprof("", log)
	if err != nil || addr != "" {
		t.Errorf(`startPprof("") = %q, %v; want no listener`, addr, err)
	}
	stop()

	addr, stop, err = startPprof("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, want := range map[string]string{"/debug/pprof/": "heap", "/debug/pprof/heap?debug=1": "heap profile:"} {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d %.200q, want 200 containing %q", path, res.StatusCode, body, want)
		}
	}
	if res, err := http.Get("http://" + addr + "/v1/shows"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/shows on the pprof listener = %v, %v; want 404 (the API is not served there)", res, err)
	} else {
		res.Body.Close()
	}

	c := validServeConfig()
	c.PprofAddr = "localhost"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "BOOKING_PPROF_ADDR") || exitCode(err) != exitUsage {
		t.Errorf("Validate() with BOOKING_PPROF_ADDR=localhost = %v (exit %d), want an error naming it, exit %d", err, exitCode(err), exitUsage)
	}
	_, _, err = startPprof(addr, log)
	var busy *net.OpError
	if err == nil || !strings.Contains(err.Error(), "(BOOKING_PPROF_ADDR)") || !errors.As(err, &busy) {
		t.Errorf("startPprof on a busy address = %v, want a listen error naming BOOKING_PPROF_ADDR", err)
	}
}
