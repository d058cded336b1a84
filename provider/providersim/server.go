package providersim

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultAddr           = "127.0.0.1:8090"
	DefaultRetention      = 24 * time.Hour
	DefaultSlowDelay      = 2 * time.Second
	DefaultMaxAttempts    = 10
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = time.Minute
	DefaultWebhookTimeout = 10 * time.Second
	DefaultReorderHold    = time.Second
	DefaultSearchLag      = 3 * time.Second
)

// Config configures a Server. The zero value is usable: every zero field
// takes its default.
type Config struct {
	// Addr is where ListenAndServe listens; default DefaultAddr.
	Addr string
	// WebhookURL receives the events. Empty means events are recorded (see
	// Server.Events) but not delivered; SetWebhookURL can set it later.
	WebhookURL string
	// WebhookSecret is the endpoint secret of Stripe-Signature, used
	// whole as the HMAC key as Stripe uses its "whsec_…" secrets; any
	// string works. Empty means events are sent unsigned (and receivers
	// will refuse them).
	WebhookSecret string
	// Retention is how long an idempotency key is remembered, on the
	// simulator's clock; default 24h (Stripe's window).
	Retention time.Duration
	// SlowDelay is how long tok_slow takes; default 2 s.
	SlowDelay time.Duration
	// SearchLag is how long after its creation a PaymentIntent stays
	// invisible to search, on the simulator's clock; default
	// DefaultSearchLag (3 s), negative for none. The fault search_lag_ms
	// overrides it.
	SearchLag time.Duration
	// Webhooks are the delivery defaults; faults (SetFaults) can add to them.
	Webhooks WebhookConfig
	// Seed seeds the random source of probabilistic faults (rates). 0 picks a
	// random seed. Object ids (pi_, ch_, re_, evt_) always come from
	// crypto/rand, so they never repeat across restarts.
	Seed uint64
	// Now is the base clock; default time.Now. Objects' created times and
	// webhook signatures use it. The simulator's clock is Now plus an
	// offset moved by SetClock and AdvanceClock; it drives only key
	// pruning and the search lag.
	Now func() time.Time
	// Logger receives a line per commit and per webhook attempt; default
	// discards. Payment methods and client secrets are never logged.
	Logger *slog.Logger
	// HTTPClient sends webhooks; default a new client. Each attempt is also
	// bounded by Webhooks.Timeout.
	HTTPClient *http.Client
	// DataDir, when set, is the directory of the state file (StateFile) that
	// keeps PaymentIntents, charges, refunds, idempotency records and the
	// clock offset across restarts, and of its lock file (LockFile); Open
	// creates it (mode 0700) and loads it. Empty keeps everything in
	// memory, lost at exit.
	DataDir string
	// APIKey, when not empty, is the secret key every /v1 request must
	// carry as Stripe's API takes it: "Authorization: Bearer <APIKey>", or
	// Basic with APIKey as the user name; others are refused with 401
	// before anything runs. Empty accepts every request. The control API
	// (/_sim) and /healthz never need it. The key is never logged or
	// echoed.
	APIKey string
}

// WebhookConfig configures webhook delivery. Delivery is at least once: each
// copy of an event is retried with exponential backoff (InitialBackoff,
// doubling, capped at MaxBackoff) until the receiver answers 2xx, for at most
// MaxAttempts attempts, and stops when the server closes.
type WebhookConfig struct {
	Delay          time.Duration // before the first attempt; default 0
	Duplicates     int           // extra copies of every event (same event id), sent after the original
	DuplicateRate  float64       // probability in [0,1] of one more extra copy
	Reorder        bool          // hold every other event back until the next one overtakes it
	ReorderHold    time.Duration // longest hold of a held-back event; default 1 s
	MaxAttempts    int           // per copy; default 10
	InitialBackoff time.Duration // default 1 s
	MaxBackoff     time.Duration // default 1 min
	Timeout        time.Duration // per attempt; default 10 s
}

// Validate reports an invalid configuration: negative durations or counts, or
// a rate outside [0,1].
func (c Config) Validate() error {
	w := c.Webhooks
	switch {
	case c.Retention < 0, c.SlowDelay < 0:
		return errors.New("providersim: retention and slow delay must not be negative")
	case w.Delay < 0, w.ReorderHold < 0, w.InitialBackoff < 0, w.MaxBackoff < 0, w.Timeout < 0:
		return errors.New("providersim: webhook durations must not be negative")
	case w.Duplicates < 0, w.MaxAttempts < 0:
		return errors.New("providersim: webhook counts must not be negative")
	case w.DuplicateRate < 0 || w.DuplicateRate > 1:
		return errors.New("providersim: webhook duplicate rate must be in [0,1]")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	c.Retention = orDefault(c.Retention, DefaultRetention)
	c.SlowDelay = orDefault(c.SlowDelay, DefaultSlowDelay)
	if c.SearchLag == 0 {
		c.SearchLag = DefaultSearchLag
	}
	w := &c.Webhooks
	w.Delay = max(w.Delay, 0)
	w.Duplicates = max(w.Duplicates, 0)
	w.DuplicateRate = min(max(w.DuplicateRate, 0), 1)
	w.ReorderHold = orDefault(w.ReorderHold, DefaultReorderHold)
	w.MaxAttempts = orDefault(w.MaxAttempts, DefaultMaxAttempts)
	w.InitialBackoff = orDefault(w.InitialBackoff, DefaultInitialBackoff)
	w.MaxBackoff = orDefault(w.MaxBackoff, DefaultMaxBackoff)
	w.Timeout = orDefault(w.Timeout, DefaultWebhookTimeout)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HTTPClient == nil {
		// Webhooks go to one receiver: keep enough idle connections for
		// the deliveries in flight (net/http keeps 2 per host).
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		c.HTTPClient = &http.Client{Transport: t}
	}
	if c.Seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		c.Seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
}

// Server is the provider simulator. All its methods are safe for concurrent
// use. Create it with New; serve Handler yourself (for example with
// httptest.NewServer) or call Start or ListenAndServe. Close (or Shutdown)
// stops the webhook deliveries running in the background.
type Server struct {
	cfg    Config
	log    *slog.Logger
	secret []byte
	router http.Handler

	mu         sync.Mutex
	offset     time.Duration // simulator clock = cfg.Now() + offset
	faults     Faults
	rng        *rand.Rand
	webhookURL string
	intents    []*intent // in creation order
	intentByID map[string]*intent
	chargeByID map[string]*Charge
	refunds    []*Refund // in creation order
	refundByID map[string]*Refund
	keys       map[string]*keyEntry
	inserts    int      // key inserts since the last sweep of expired keys
	journal    *journal // the state file; nil in memory
	events     []*Event
	deliveries []Delivery
	held       *heldEvent    // an event held back for reordering
	resume     chan struct{} // closed while webhooks are not paused
	pending    int           // webhook deliveries not yet finished
	idle       chan struct{} // closed when pending drops to 0
	closed     bool
	srv        *http.Server
	ln         net.Listener
	serveErr   chan error

	done chan struct{} // closed by Close/Shutdown
	wg   sync.WaitGroup
}

// New returns a simulator configured by cfg that keeps its state in memory.
// Zero fields take their defaults; invalid ones (see Config.Validate, which a
// CLI should call first) are replaced by defaults or clamped. It starts no
// goroutine and listens nowhere. It panics if cfg.DataDir is set: a state
// file can fail to load, so use Open then.
func New(cfg Config) *Server {
	if cfg.DataDir != "" {
		panic("providersim: New with Config.DataDir; use Open")
	}
	return newServer(cfg)
}

// Open is New, plus the state file when cfg.DataDir is set: it creates the
// directory, locks it, loads the state file (see StateFile for the format
// and what is kept; a version 1 file is moved aside), drops the
// idempotency records whose retention has passed on the restored clock,
// and compacts the file. Close or Shutdown
// releases the lock. It returns a *CorruptError, naming the file and line,
// if the file does not read back, and an error naming the lock file if
// another process uses the directory.
func Open(cfg Config) (*Server, error) {
	s := newServer(cfg)
	if cfg.DataDir == "" {
		return s, nil
	}
	j, recs, torn, err := openJournal(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.restoreLocked(j.path, recs); err != nil {
		j.close()
		return nil, err
	}
	if torn > 0 {
		s.log.Warn("provider simulator: dropped an incomplete last line of the state file (a write cut short by a crash, never answered)",
			"file", j.path, "bytes", torn)
	}
	if j.movedAside != "" {
		s.log.Warn("provider simulator: the state file holds the earlier charges API's state, which PaymentIntents cannot take up; moved it aside and started empty",
			"file", j.path, "moved_to", j.movedAside)
	}
	if err := j.rewrite(s.snapshotLocked()); err != nil {
		j.close()
		return nil, err
	}
	s.journal = j
	s.log.Info("provider simulator state loaded", "file", j.path, "payment_intents", len(s.intents), "refunds", len(s.refunds),
		"keys", len(s.keys), "clock_offset", s.offset.String())
	return s, nil
}

func newServer(cfg Config) *Server {
	cfg.setDefaults()
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger,
		secret:     []byte(cfg.WebhookSecret),
		rng:        rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		webhookURL: cfg.WebhookURL,
		intentByID: map[string]*intent{},
		chargeByID: map[string]*Charge{},
		refundByID: map[string]*Refund{},
		keys:       map[string]*keyEntry{},
		resume:     closedChan(),
		idle:       closedChan(),
		done:       make(chan struct{}),
	}
	s.router = s.routes()
	return s
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Handler returns the simulator's HTTP handler (the /v1 provider API and the
// /_sim control API).
func (s *Server) Handler() http.Handler { return s.router }

// Start listens on addr (Config.Addr when empty; ":0" picks a port) and
// serves in the background until Shutdown or Close. ctx bounds only the
// listen. It returns an error if the address cannot be bound or the server
// was started or closed before. URL tells the address.
func (s *Server) Start(ctx context.Context, addr string) error {
	if addr == "" {
		addr = s.cfg.Addr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("providersim: listen %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           s.router,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	if s.closed || s.srv != nil {
		s.mu.Unlock()
		ln.Close()
		return errors.New("providersim: already started or closed")
	}
	s.srv, s.ln, s.serveErr = srv, ln, make(chan error, 1)
	s.mu.Unlock()
	s.log.Info("provider simulator listening", "addr", ln.Addr().String())
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serveErr <- err
	}()
	return nil
}

// URL returns the base URL the server listens on, like "http://127.0.0.1:8090",
// or "" before Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// ListenAndServe serves on Config.Addr until ctx is done, then shuts down
// gracefully (in-flight requests get up to 5 s) and stops webhook deliveries.
// It blocks, and returns nil after a clean shutdown or the listen or serve
// error.
func (s *Server) ListenAndServe(ctx context.Context) error {
	if err := s.Start(ctx, s.cfg.Addr); err != nil {
		return err
	}
	s.mu.Lock()
	serveErr := s.serveErr
	s.mu.Unlock()
	select {
	case err := <-serveErr:
		s.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// Shutdown stops the listener started by Start, waits for in-flight requests
// until ctx is done (then closes their connections), and stops the webhook
// deliveries, waiting for their goroutines. Pending deliveries are abandoned.
// It returns ctx's error if in-flight requests did not finish in time.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
	}
	s.stop()
	return err
}

// Close stops the server at once: the listener and its connections (if
// started), sleeping requests (which answer 503 without committing), and the
// webhook deliveries, whose goroutines it waits for. It is idempotent and
// returns nil.
func (s *Server) Close() error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	s.stop()
	return nil
}

func (s *Server) stop() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	if s.journal != nil {
		// A request still finishing after this answers 500 and commits nothing.
		s.journal.close()
	}
	s.mu.Unlock()
}

// sleep waits d, or until the server closes; it reports whether d passed.
func (s *Server) sleep(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// Now returns the simulator's clock: the base clock plus the offset set by
// SetClock and AdvanceClock. It governs idempotency-key pruning and the
// search lag only. Objects' created times and webhook signatures use the
// base clock, so a caller's list ranges and signature tolerance keep
// working after the clock was advanced.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nowLocked()
}

func (s *Server) nowLocked() time.Time { return s.cfg.Now().Add(s.offset) }

// SetClock sets the simulator's clock to t; it keeps ticking from there.
// With a state file the offset is saved; a failure to save is logged (the
// control API answers it as a 500).
func (s *Server) SetClock(t time.Time) {
	s.logErr(s.moveClock(func(time.Duration) time.Duration { return t.Sub(s.cfg.Now()) }))
}

// AdvanceClock moves the simulator's clock by d (which may be negative) and
// returns the new time. Advancing past Config.Retention forgets the keys
// saved before, as Stripe's pruning would; advancing past the search lag
// makes PaymentIntents searchable. Saved as SetClock.
func (s *Server) AdvanceClock(d time.Duration) time.Time {
	s.logErr(s.moveClock(func(off time.Duration) time.Duration { return off + d }))
	return s.Now()
}

// ResetClock puts the simulator's clock back on the base clock. Saved as
// SetClock.
func (s *Server) ResetClock() { s.logErr(s.moveClock(func(time.Duration) time.Duration { return 0 })) }

// moveClock sets the offset to f(offset) and saves it; on a failure to save
// the offset is unchanged.
func (s *Server) moveClock(f func(offset time.Duration) time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.offset
	s.offset = f(old)
	if err := s.persistOffsetLocked(); err != nil {
		s.offset = old
		return err
	}
	return nil
}

func (s *Server) logErr(err error) {
	if err != nil {
		s.log.Error("provider simulator: state not saved", "err", err)
	}
}

// SetWebhookURL changes where webhooks go, for deliveries not yet attempted
// and retries too (dev mode learns its own address after the simulator
// starts). Empty stops sending new events.
func (s *Server) SetWebhookURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhookURL = url
}

// Reset forgets every PaymentIntent, charge, refund, key, event and
// delivery record, and resets the faults and the clock. Deliveries already running continue. With
// a state file it is emptied too (a failure is logged and leaves the state
// as it was; the control API answers it as a 500).
func (s *Server) Reset() { s.logErr(s.reset()) }

func (s *Server) reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal != nil {
		if err := s.journal.rewrite(nil); err != nil {
			return err
		}
	}
	s.intents, s.refunds, s.events, s.deliveries = nil, nil, nil, nil
	s.intentByID = map[string]*intent{}
	s.chargeByID = map[string]*Charge{}
	s.refundByID = map[string]*Refund{}
	s.keys = map[string]*keyEntry{}
	s.offset = 0
	s.setFaultsLocked(Faults{})
	return nil
}

// cloneAll returns clone of each item, in order; the caller holds s.mu.
func cloneAll[T, U any](items []T, clone func(T) U) []U {
	out := make([]U, len(items))
	for i, it := range items {
		out[i] = clone(it)
	}
	return out
}

// newID returns prefix followed by 26 random base32 characters.
func newID(prefix string) string { return prefix + crand.Text() }

// keep bounds the in-memory logs of events and deliveries: they hold at
// least the last keep entries and at most keep + keep/4.
const keep = 10000

// trim drops the oldest entries of s once it holds more than keep + keep/4,
// keeping the last keep. The copy happens once every keep/4 appends, not on
// each one: copying 10 000 pointers per webhook event was the simulator's
// biggest allocation per request.
func trim[T any](s []T) []T {
	if len(s) > keep+keep/4 {
		return slices.Clone(s[len(s)-keep:])
	}
	return s
}

// orDefault returns v if it is positive, def otherwise: the zero value (or
// a negative one) of a setting selects its default.
func orDefault[T ~int | ~int64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
