package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/projections/notify"
)

// natsStartTimeout bounds the start of the embedded server and the first
// connection to an external one.
const natsStartTimeout = 10 * time.Second

// notifications is the NATS side of `booking serve` (DESIGN §8): the embedded
// server (nil with BOOKING_NATS_URL), the client connection, stream BOOKING
// and the relay.
type notifications struct {
	server *server.Server
	nc     *nats.Conn
	relay  *notify.Relay
	url    string
	log    *slog.Logger
}

// relayConfig derives the relay's windows from the serve configuration: the
// lease lasts half the recovery interval (at least 1 s), so the relay's
// fail-over stays within BOOKING_RECOVERY_INTERVAL.
func relayConfig(cfg ServeConfig, log *slog.Logger) notify.RelayConfig {
	ttl := max(cfg.RecoveryInterval/2, time.Second)
	return notify.RelayConfig{
		LeaseTTL:   ttl,
		AckTimeout: min(notify.DefaultAckTimeout, ttl),
		Logger:     log.With("component", "relay"),
	}
}

// startNotifications starts the embedded NATS server with JetStream (file
// storage in BOOKING_DATA_DIR/nats, listening on BOOKING_NATS_ADDR) unless
// BOOKING_NATS_URL names an external server, connects to it, makes sure
// stream BOOKING exists with the configured duplicate window (an external
// stream is checked, never changed) and builds the relay. Errors name the
// variable at fault. The caller runs the relay and calls close.
func startNotifications(ctx context.Context, cfg ServeConfig, log *slog.Logger, pool *pgxpool.Pool, events notify.Log) (*notifications, error) {
	rcfg := relayConfig(cfg, log)
	if err := rcfg.CheckDuplicateWindow(cfg.NATSDuplicateWindow); err != nil {
		return nil, configError("BOOKING_NATS_DUPLICATE_WINDOW", "%s must exceed the relay's fail-over time %s (lease %s, from BOOKING_RECOVERY_INTERVAL %s)",
			cfg.NATSDuplicateWindow, rcfg.FailoverTime(), rcfg.LeaseTTL, cfg.RecoveryInterval)
	}
	n := &notifications{log: log.With("component", "nats"), url: cfg.NATSURL}
	var err error
	if cfg.NATSURL == "" {
		if n.server, err = startEmbeddedNATS(cfg, n.log); err != nil {
			return nil, err
		}
		n.url = n.server.ClientURL()
		n.nc, err = nats.Connect(n.url, nats.Name("booking serve"), nats.InProcessServer(n.server), nats.MaxReconnects(-1))
	} else {
		n.nc, err = nats.Connect(cfg.NATSURL, nats.Name("booking serve"), nats.Timeout(natsStartTimeout), nats.MaxReconnects(-1))
		if err != nil {
			return nil, configError("BOOKING_NATS_URL", "connect: %v", err)
		}
	}
	if err != nil {
		n.close()
		return nil, fmt.Errorf("nats: connect to the embedded server: %w", err)
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		n.close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, natsStartTimeout)
	defer cancel()
	spec := notify.StreamSpec{Duplicates: cfg.NATSDuplicateWindow}
	if n.server != nil {
		_, err = notify.EnsureStream(sctx, js, spec)
	} else {
		_, err = notify.CheckStream(sctx, js, spec)
	}
	var cfgErr *notify.StreamConfigError
	switch {
	case errors.As(err, &cfgErr) && cfgErr.Field == "duplicates":
		n.close()
		return nil, configError("BOOKING_NATS_DUPLICATE_WINDOW", "is %s but stream %s on BOOKING_NATS_URL has duplicate window %s; change one of them",
			cfg.NATSDuplicateWindow, cfgErr.Stream, cfgErr.Got)
	case errors.As(err, &cfgErr):
		n.close()
		return nil, configError("BOOKING_NATS_URL", "stream %s has subjects %s, want %s", cfgErr.Stream, cfgErr.Got, cfgErr.Want)
	case err != nil:
		n.close()
		if n.server != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		return nil, configError("BOOKING_NATS_URL", "%v", err)
	}
	n.relay = notify.NewRelay(events, pool, n.nc, rcfg)
	n.log.Info("notifications ready", "url", n.url, "embedded", n.server != nil, "stream", notify.StreamName,
		"duplicate_window", cfg.NATSDuplicateWindow, "relay_failover", rcfg.FailoverTime())
	return n, nil
}

// startEmbeddedNATS runs a NATS server with JetStream in this process.
func startEmbeddedNATS(cfg ServeConfig, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(cfg.NATSAddr)
	if err != nil {
		return nil, configError("BOOKING_NATS_ADDR", "must be host:port: %v", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, configError("BOOKING_NATS_ADDR", "invalid port %q", portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// Fail fast and clearly on a port in use (the server would only log it).
		ln, err := net.Listen("tcp", cfg.NATSAddr)
		if err != nil {
			return nil, configError("BOOKING_NATS_ADDR", "listen: %v (set BOOKING_NATS_URL to use a running server)", err)
		}
		ln.Close()
	}
	dir := filepath.Join(cfg.DataDir, "nats")
	ns, err := server.NewServer(&server.Options{
		ServerName: "booking",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
	})
	if err != nil {
		return nil, configError("BOOKING_DATA_DIR", "embedded NATS server: %v", err)
	}
	ns.SetLoggerV2(natsLogger{log}, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(natsStartTimeout) {
		ns.Shutdown()
		return nil, configError("BOOKING_NATS_ADDR", "embedded NATS server did not start within %s (storage %s)", natsStartTimeout, dir)
	}
	log.Info("embedded NATS server started", "url", ns.ClientURL(), "store", dir)
	return ns, nil
}

// runRelay runs the relay until ctx is done. It blocks.
func (n *notifications) runRelay(ctx context.Context) {
	if err := n.relay.Run(ctx); err != nil {
		n.log.Error("relay stopped", "err", err)
	}
}

// close drains the connection (pending publishes and acks finish), then
// stops the embedded server. Call it after the relay has stopped.
func (n *notifications) close() {
	if n.nc != nil {
		closed := make(chan struct{})
		n.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
		if err := n.nc.Drain(); err != nil {
			n.nc.Close()
		} else {
			select {
			case <-closed:
			case <-time.After(natsStartTimeout):
				n.nc.Close()
			}
		}
	}
	if n.server != nil {
		n.server.Shutdown()
		n.server.WaitForShutdown()
	}
}

// natsLogger sends the embedded server's log to slog; its notices are debug
// output (the server is chatty at start).
type natsLogger struct{ log *slog.Logger }

func (l natsLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l natsLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l natsLogger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l natsLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l natsLogger) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
