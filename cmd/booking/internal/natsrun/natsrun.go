// Package natsrun is the NATS side of the booking command. For `booking
// serve` (Start) it runs the embedded NATS server with JetStream (unless
// BOOKING_NATS_URL names an external one), connects, makes sure of stream
// BOOKING and its duplicate window, and builds the notification relay of
// projections/notify, which publishes every event once per Nats-Msg-Id (see
// ARCHITECTURE.md, Key lineage). For `booking notifications tail` (Tail) it
// runs the reference subscriber. Errors are *configerr.Error values naming
// the variable at fault.
//
// The JetStream duplicate window must outlast the relay's fail-over time:
// a relay that takes over republishes what its predecessor may have
// published without saving its checkpoint, and JetStream drops those
// repeats only inside the window (NATS docs, JetStream "Message
// Deduplication").
package natsrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/projections/notify"
)

// StartTimeout bounds the start of the embedded server, the first
// connection to an external one and the stream check.
const StartTimeout = 10 * time.Second

// Config is what the NATS side needs from the serve configuration.
type Config struct {
	// URL is BOOKING_NATS_URL, an external server; empty starts the
	// embedded one.
	URL string
	// Addr is BOOKING_NATS_ADDR, host:port of the embedded server (port 0:
	// any free port; a service name resolves as net.LookupPort does).
	Addr string
	// DuplicateWindow is BOOKING_NATS_DUPLICATE_WINDOW, stream BOOKING's
	// JetStream duplicate window.
	DuplicateWindow time.Duration
	// RecoveryInterval is BOOKING_RECOVERY_INTERVAL; the relay's lease lasts
	// half of it (at least 1 s).
	RecoveryInterval time.Duration
	// DataDir is BOOKING_DATA_DIR; the embedded server stores its streams in
	// DataDir/nats.
	DataDir string
	// Backend is the event store backend ("postgres" or "kurrentdb"), kept
	// as stream BOOKING's marker (notify.StreamSpec.Backend).
	Backend string
	// TracerProvider records the relay's publish spans; nil: none.
	TracerProvider trace.TracerProvider
}

// Notifications is the running NATS side: the embedded server (nil with an
// external one), the client connection, and the relay. Run the relay with
// RunRelay and call Close after it has stopped.
type Notifications struct {
	server *server.Server
	nc     *nats.Conn
	relay  *notify.Relay
	url    string
	log    *slog.Logger
}

// RelayConfig derives the relay's windows from cfg: the lease lasts half the
// recovery interval (at least 1 s), the wait for a publish acknowledgement
// is notify.DefaultAckTimeout or the lease if that is shorter, and the
// checkpoint is saved at most every RelayCheckpointEvery. The relay's
// fail-over time (notify.RelayConfig.FailoverTime: those three plus a
// standby's retry, a third of the lease; 26 s with the default 30 s
// recovery interval) is what BOOKING_NATS_DUPLICATE_WINDOW must exceed.
func RelayConfig(cfg Config, log *slog.Logger) notify.RelayConfig {
	ttl := max(cfg.RecoveryInterval/2, time.Second)
	return notify.RelayConfig{
		LeaseTTL:        ttl,
		AckTimeout:      min(notify.DefaultAckTimeout, ttl),
		CheckpointEvery: RelayCheckpointEvery,
		Logger:          log.With("component", "relay"),
		TracerProvider:  cfg.TracerProvider,
	}
}

// RelayCheckpointEvery is how often, at most, the relay of `booking serve`
// saves its checkpoint while it publishes: one statement per second instead
// of one per 100 ms (ARCHITECTURE.md, "Performance"). A fail-over
// republishes at most this much more, which JetStream's duplicate window
// drops (it is part of notify.RelayConfig.FailoverTime, which the window
// must exceed).
const RelayCheckpointEvery = time.Second

// Connect connects to the NATS server at serverURL (one URL or a
// comma-separated list) as client name, reconnecting for ever after the first
// connection. A URL that does not parse is a *configerr.Error naming
// BOOKING_NATS_URL; a server that cannot be reached within StartTimeout is
// "cannot reach NATS at URL (BOOKING_NATS_URL): cause", the URL shown without
// its password. A lost connection is logged to log as a warning, and the
// reconnection after it as info.
func Connect(serverURL, name string, log *slog.Logger) (*nats.Conn, error) {
	shown, err := CheckURL(serverURL)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(serverURL, nats.Name(name), nats.Timeout(StartTimeout), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed by this process
				log.Warn("lost the connection to NATS; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "server", c.ConnectedUrlRedacted()) }))
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s (BOOKING_NATS_URL): %w", strings.Join(shown, ","), err)
	}
	return nc, nil
}

// CheckURL returns a *configerr.Error naming BOOKING_NATS_URL unless every
// comma-separated entry of serverURL is a URL with a host, and else the
// entries with their passwords redacted. It does not connect.
func CheckURL(serverURL string) ([]string, error) {
	shown := make([]string, 0, 1)
	for _, s := range strings.Split(serverURL, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" {
			return nil, configerr.New("BOOKING_NATS_URL", "want nats://host:port[,nats://host:port...], got an entry that is not such a URL")
		}
		shown = append(shown, u.Redacted())
	}
	return shown, nil
}

// Start starts the embedded NATS server with JetStream (file storage in
// DataDir/nats, listening on Addr) unless cfg.URL names an external server,
// connects to it, makes sure stream BOOKING exists with the configured
// duplicate window (an external stream is checked, never changed) and
// builds the relay over events, keeping its lease and checkpoint in pool.
// Errors name the variable at fault.
func Start(ctx context.Context, cfg Config, log *slog.Logger, pool *pgxpool.Pool, events notify.Log) (*Notifications, error) {
	rcfg := RelayConfig(cfg, log)
	if err := rcfg.CheckDuplicateWindow(cfg.DuplicateWindow); err != nil {
		return nil, configerr.New("BOOKING_NATS_DUPLICATE_WINDOW", "%s must exceed the relay's fail-over time %s (lease %s, from BOOKING_RECOVERY_INTERVAL %s)",
			cfg.DuplicateWindow, rcfg.FailoverTime(), rcfg.LeaseTTL, cfg.RecoveryInterval)
	}
	n := &Notifications{log: log.With("component", "nats"), url: cfg.URL}
	var err error
	if cfg.URL == "" {
		if n.server, err = startEmbedded(cfg, n.log); err != nil {
			return nil, err
		}
		n.url = n.server.ClientURL()
		if n.nc, err = nats.Connect(n.url, nats.Name("booking serve"), nats.InProcessServer(n.server),
			nats.Timeout(StartTimeout), nats.MaxReconnects(-1)); err != nil {
			n.Close()
			return nil, fmt.Errorf("nats: connect to the embedded server: %w", err)
		}
	} else if n.nc, err = Connect(cfg.URL, "booking serve", n.log); err != nil {
		return nil, err
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	spec := notify.StreamSpec{Duplicates: cfg.DuplicateWindow, Backend: cfg.Backend}
	if n.server != nil {
		_, err = notify.EnsureStream(sctx, js, spec)
	} else {
		_, err = notify.CheckStream(sctx, js, spec)
	}
	var cfgErr *notify.StreamConfigError
	var backendErr *notify.StreamBackendError
	switch {
	case errors.As(err, &backendErr):
		n.Close()
		return nil, configerr.New("BOOKING_EVENT_STORE", "%v", backendErr)
	case errors.As(err, &cfgErr) && cfgErr.Field == "duplicates":
		n.Close()
		return nil, configerr.New("BOOKING_NATS_DUPLICATE_WINDOW", "is %s but stream %s on BOOKING_NATS_URL has duplicate window %s; change one of them",
			cfg.DuplicateWindow, cfgErr.Stream, cfgErr.Got)
	case errors.As(err, &cfgErr):
		n.Close()
		return nil, configerr.New("BOOKING_NATS_URL", "stream %s has subjects %s, want %s", cfgErr.Stream, cfgErr.Got, cfgErr.Want)
	case err != nil:
		n.Close()
		if n.server != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		return nil, configerr.New("BOOKING_NATS_URL", "%v", err)
	}
	n.relay = notify.NewRelay(events, pool, n.nc, rcfg)
	n.log.Info("notifications ready", "url", n.url, "embedded", n.server != nil, "stream", notify.StreamName,
		"duplicate_window", cfg.DuplicateWindow, "relay_failover", rcfg.FailoverTime())
	return n, nil
}

// Limits of the embedded server (NATS server options jetstream
// max_memory_store, and the per-stream ingest queue limits
// StreamMaxBufferedMsgs and StreamMaxBufferedSize).
const (
	// EmbeddedMaxMemory caps JetStream memory storage, in bytes (stream
	// BOOKING is file storage and uses none).
	EmbeddedMaxMemory = 16 << 20
	// EmbeddedMaxBufferedMsgs bounds the messages queued for a stream
	// before they are stored: 8 × notify.DefaultMaxInFlight.
	EmbeddedMaxBufferedMsgs = 8192
	// EmbeddedMaxBufferedBytes bounds the bytes queued for a stream before
	// they are stored.
	EmbeddedMaxBufferedBytes = 8 << 20
)

// startEmbedded runs a NATS server with JetStream in this process.
func startEmbedded(cfg Config, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, configerr.New("BOOKING_NATS_ADDR", "must be host:port: %v", err)
	}
	// The port as net.Listen reads it (a number or a service name), as the
	// serve configuration checked it.
	port, err := net.LookupPort("tcp", portStr)
	if err != nil {
		return nil, configerr.New("BOOKING_NATS_ADDR", "%q is not a port: %v", portStr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// Fail fast and clearly on a port in use (the server would only log it).
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			// Not a configuration error (exit 1): the address parsed,
			// another process holds it.
			reason := err
			var se *os.SyscallError
			if errors.As(err, &se) {
				reason = se.Err
			}
			return nil, fmt.Errorf("cannot listen on %s (BOOKING_NATS_ADDR): %w (set BOOKING_NATS_URL to use a running server)", cfg.Addr, reason)
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
		// Sized for one service in dev (see ARCHITECTURE.md, Performance):
		// stream BOOKING is file-backed, so memory storage gets only a
		// small cap, and a stream's ingest queue (server default 100,000
		// messages or 128 MiB) is bounded at 8 × what the relay may have
		// unacknowledged (notify.DefaultMaxInFlight publishes of a few
		// hundred bytes), which it never exceeds.
		JetStreamMaxMemory:    EmbeddedMaxMemory,
		StreamMaxBufferedMsgs: EmbeddedMaxBufferedMsgs,
		StreamMaxBufferedSize: EmbeddedMaxBufferedBytes,
	})
	if err != nil {
		return nil, configerr.New("BOOKING_DATA_DIR", "embedded NATS server: %v", err)
	}
	ns.SetLoggerV2(logger{log}, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(StartTimeout) {
		ns.Shutdown()
		return nil, configerr.New("BOOKING_NATS_ADDR", "embedded NATS server did not start within %s (storage %s)", StartTimeout, dir)
	}
	log.Info("embedded NATS server started", "url", ns.ClientURL(), "store", dir)
	return ns, nil
}

// RunRelay runs the relay until ctx is done, logging why it stopped if not
// for ctx. It blocks.
func (n *Notifications) RunRelay(ctx context.Context) {
	if err := n.relay.Run(ctx); err != nil {
		n.log.Error("relay stopped", "err", err)
	}
}

// Close drains the connection (pending publishes and acks finish, within
// StartTimeout), then stops the embedded server. Call it after the relay has
// stopped.
func (n *Notifications) Close() {
	if n.nc != nil {
		closed := make(chan struct{})
		n.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
		if err := n.nc.Drain(); err != nil {
			n.nc.Close()
		} else {
			select {
			case <-closed:
			case <-time.After(StartTimeout):
				n.nc.Close()
			}
		}
	}
	if n.server != nil {
		n.server.Shutdown()
		n.server.WaitForShutdown()
	}
}

// logger sends the embedded server's log to slog; its notices are debug
// output (the server is chatty at start).
type logger struct{ log *slog.Logger }

func (l logger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l logger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l logger) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l logger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l logger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l logger) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }

// CutOver connects to the NATS server the service uses (cfg.URL, or the
// embedded one on cfg.DataDir, started here on a free port) and prepares
// stream BOOKING for a log copied to backend (notify.CutOver). It returns
// the event the stream's last message names, ok false if there is none,
// and used false if there is no NATS to look at (no URL and no
// DataDir/nats). The service must be stopped: the embedded server uses the
// same files.
func CutOver(ctx context.Context, cfg Config, backend string, log *slog.Logger) (last notify.Notified, ok, used bool, err error) {
	var nc *nats.Conn
	if cfg.URL == "" {
		if cfg.DataDir == "" {
			return notify.Notified{}, false, false, nil
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "nats")); errors.Is(err, os.ErrNotExist) {
			return notify.Notified{}, false, false, nil
		}
		cfg.Addr = "127.0.0.1:0"
		srv, err := startEmbedded(cfg, log)
		if err != nil {
			return notify.Notified{}, false, false, err
		}
		defer srv.Shutdown()
		if nc, err = nats.Connect(srv.ClientURL(), nats.Name("booking eventstore copy"), nats.InProcessServer(srv), nats.Timeout(StartTimeout)); err != nil {
			return notify.Notified{}, false, false, fmt.Errorf("nats: connect to the embedded server: %w", err)
		}
	} else if nc, err = Connect(cfg.URL, "booking eventstore copy", log); err != nil {
		return notify.Notified{}, false, false, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return notify.Notified{}, false, false, fmt.Errorf("nats: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	last, ok, err = notify.CutOver(cctx, js, notify.StreamName, backend)
	return last, ok, true, err
}
