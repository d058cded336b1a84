package natsrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/eventstore/storetest"
	"github.com/retrysafe/booking/internal/syncbuf"

	"github.com/retrysafe/booking/projections/notify"
)

// quiet is a logger that drops everything.
var quiet = slog.New(slog.DiscardHandler)

// TestStart: the embedded server creates stream BOOKING with the configured
// duplicate window; a second process on it as an external server checks the
// stream and refuses a different window; a window within the relay's
// fail-over time and an unreachable server are refused, each naming the
// variable at fault.
func TestStart(t *testing.T) {
	t.Parallel()
	cfg := Config{Addr: "127.0.0.1:0", DuplicateWindow: 10 * time.Minute, RecoveryInterval: 30 * time.Second, DataDir: t.TempDir()}
	n, err := Start(t.Context(), cfg, quiet, nil, nil)
	if err != nil {
		t.Fatalf("Start(embedded) = %v", err)
	}
	defer n.Close()
	js, err := jetstream.New(n.nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), notify.StreamName)
	if err != nil {
		t.Fatalf("stream %s after Start: %v", notify.StreamName, err)
	}
	if got := s.CachedInfo().Config.Duplicates; got != cfg.DuplicateWindow {
		t.Errorf("stream %s duplicate window = %s, want %s", notify.StreamName, got, cfg.DuplicateWindow)
	}

	external := Config{URL: n.server.ClientURL(), DuplicateWindow: cfg.DuplicateWindow, RecoveryInterval: cfg.RecoveryInterval}
	m, err := Start(t.Context(), external, quiet, nil, nil)
	if err != nil {
		t.Fatalf("Start(external, same window) = %v", err)
	}
	m.Close()

	for _, tt := range []struct {
		name    string
		cfg     Config
		wantVar string
	}{
		{"another window than the external stream's", Config{URL: external.URL, DuplicateWindow: 20 * time.Minute, RecoveryInterval: 30 * time.Second}, "BOOKING_NATS_DUPLICATE_WINDOW"},
		{"a window within the relay's fail-over", Config{URL: external.URL, DuplicateWindow: 2 * time.Second, RecoveryInterval: 30 * time.Second}, "BOOKING_NATS_DUPLICATE_WINDOW"},
		{"an address without a port", Config{Addr: "127.0.0.1", DuplicateWindow: 10 * time.Minute, RecoveryInterval: 30 * time.Second, DataDir: t.TempDir()}, "BOOKING_NATS_ADDR"},
		{"a port that is neither a number nor a service", Config{Addr: "127.0.0.1:4222x", DuplicateWindow: 10 * time.Minute, RecoveryInterval: 30 * time.Second, DataDir: t.TempDir()}, "BOOKING_NATS_ADDR"},
	} {
		_, err := Start(t.Context(), tt.cfg, quiet, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "invalid configuration: "+tt.wantVar+":") {
			t.Errorf("Start with %s = %v, want an error naming %s", tt.name, err, tt.wantVar)
		}
	}

	// A busy BOOKING_NATS_ADDR is a failure while running, not a
	// configuration error: the message names the address and the reason.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, err = Start(t.Context(), Config{Addr: busy.Addr().String(), DuplicateWindow: 10 * time.Minute, RecoveryInterval: 30 * time.Second, DataDir: t.TempDir()}, quiet, nil, nil)
	var ce *configerr.Error
	if want := "cannot listen on " + busy.Addr().String() + " (BOOKING_NATS_ADDR): address already in use"; err == nil || !strings.HasPrefix(err.Error(), want) || errors.As(err, &ce) {
		t.Errorf("Start on a busy BOOKING_NATS_ADDR = %v, want %q… (not a configuration error)", err, want)
	}

	// A server that is down is not a configuration error: the message says
	// which server could not be reached, without its password.
	_, err = Start(t.Context(), Config{URL: "nats://booking:s3cret@127.0.0.1:1", DuplicateWindow: 10 * time.Minute, RecoveryInterval: 30 * time.Second}, quiet, nil, nil)
	want := "cannot reach NATS at nats://booking:xxxxx@127.0.0.1:1 (BOOKING_NATS_URL): "
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Start with no server at BOOKING_NATS_URL = %v, want %q…", err, want)
	}
}

// TestConnectLogsLostAndRegainedConnection: a client of Connect logs a
// warning when its server goes away and an info line when it reconnects to
// the server started again on the same address; closing it logs nothing.
func TestConnectLogsLostAndRegainedConnection(t *testing.T) {
	t.Parallel()
	cfg := Config{Addr: "127.0.0.1:0", DataDir: t.TempDir()}
	ns, err := startEmbedded(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	nc, err := Connect(ns.ClientURL(), "test", slog.New(slog.NewTextHandler(&out, nil)))
	if err != nil {
		ns.Shutdown()
		t.Fatal(err)
	}
	cfg.Addr = ns.Addr().String()
	ns.Shutdown()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	logged := func(msg string) func() error {
		return func() error {
			if !strings.Contains(out.String(), msg) {
				return fmt.Errorf("not logged yet: %q; log so far:\n%s", msg, out.String())
			}
			return nil
		}
	}
	storetest.Eventually(t, ctx, logged(`level=WARN msg="lost the connection to NATS; reconnecting"`))
	if ns, err = startEmbedded(cfg, quiet); err != nil {
		t.Fatalf("start the server again on %s: %v", cfg.Addr, err)
	}
	defer ns.Shutdown()
	storetest.Eventually(t, ctx, logged(`level=INFO msg="reconnected to NATS"`))
	nc.Close()
	if n := strings.Count(out.String(), "lost the connection"); n != 1 {
		t.Errorf("%d warnings of a lost connection after Close, want the 1 before it:\n%s", n, out.String())
	}
}
