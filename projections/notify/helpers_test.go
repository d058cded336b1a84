package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// testAppendBound bounds each append of the tests' event store: far above
// the production default (5 s), because the tests append bursts on machines
// that may be fully busy.
const testAppendBound = time.Minute

// natsBackend starts a NATS server with JetStream for one test and returns
// its client URL; the server stops at the test's cleanup.
type natsBackend struct {
	name  string
	start func(tb testing.TB) string
}

// backends are the servers every scenario runs against: the embedded server
// (as `booking serve` runs it) and the module's nats-server as a separate
// process (an external server).
var backends = []natsBackend{
	{"embedded", startEmbedded},
	{"process", startProcess},
}

// forEachBackend runs f as a subtest per NATS backend.
func forEachBackend(t *testing.T, f func(t *testing.T, natsURL string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			f(t, b.start(t))
		})
	}
}

// startEmbedded runs an in-process nats-server with JetStream file storage.
func startEmbedded(tb testing.TB) string {
	tb.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: tb.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		tb.Fatalf("nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats server not ready")
	}
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// TestMain removes the nats-server binary built for the process backend.
func TestMain(m *testing.M) {
	code := m.Run()
	if serverBin != "" {
		os.RemoveAll(filepath.Dir(serverBin))
	}
	os.Exit(code)
}

// mustEmbedded starts an embedded server for a test that needs only one.
func mustEmbedded(tb testing.TB) string { return startEmbedded(tb) }

var (
	buildOnce sync.Once
	serverBin string
	buildErr  error
)

// natsServerBinary builds the module's nats-server once per test binary.
func natsServerBinary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "notify-nats-server-")
		if err != nil {
			buildErr = err
			return
		}
		serverBin = filepath.Join(dir, "nats-server")
		cmd := exec.Command("go", "build", "-o", serverBin, "github.com/nats-io/nats-server/v2")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build nats-server: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return serverBin
}

// startProcess runs the module's nats-server as its own process:
// nats-server -js -sd DIR -a 127.0.0.1 -p PORT.
func startProcess(tb testing.TB) string {
	tb.Helper()
	bin := natsServerBinary(tb)
	dir := tb.TempDir()
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(tb)
		cmd := exec.Command(bin, "-js", "-sd", dir, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			tb.Fatalf("start nats-server: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		url := fmt.Sprintf("nats://127.0.0.1:%d", port)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				deadline = time.Time{} // port taken, say: try another
				continue
			default:
			}
			if nc, err := nats.Connect(url, nats.Timeout(200*time.Millisecond)); err == nil {
				nc.Close()
				tb.Cleanup(func() {
					cmd.Process.Signal(os.Interrupt)
					select {
					case <-exited:
					case <-time.After(10 * time.Second):
						cmd.Process.Kill()
						<-exited
					}
				})
				return url
			}
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Kill()
		<-exited
	}
	tb.Fatal("nats-server process did not start")
	return ""
}

// freePort returns a free TCP port below the kernel's ephemeral range
// (32768–60999), so no outgoing connection can take it before the server
// binds it, and below pg.sh's range (20000–32000).
func freePort(tb testing.TB) int {
	tb.Helper()
	for range 1000 {
		p := 10000 + mrand.IntN(10000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		return p
	}
	tb.Fatal("no free TCP port found")
	return 0
}

// env is one scenario's world: a fresh database with its event store, a
// NATS connection and stream BOOKING.
type env struct {
	tb     testing.TB
	ctx    context.Context
	pool   *pgxpool.Pool
	store  *pgstore.Store
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	log    *slog.Logger
	url    string
}

// newEnvWithOrders returns a new env (newEnv) whose store holds a workload
// of n orders (appendOrders), and that workload.
func newEnvWithOrders(tb testing.TB, natsURL string, window time.Duration, n int) (*env, *workload) {
	tb.Helper()
	e := newEnv(tb, natsURL, window)
	w := &workload{}
	w.appendOrders(tb, e.ctx, e.store, n)
	return e, w
}

func newEnv(tb testing.TB, natsURL string, window time.Duration) *env {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	pool := pgtest.NewPool(tb, pgtest.NewDatabase(tb))
	e := &env{tb: tb, ctx: ctx, pool: pool, url: natsURL,
		store: pgstore.New(pool, pgstore.WithPollInterval(time.Millisecond, 20*time.Millisecond), pgstore.WithAppendTimeout(testAppendBound)),
		log:   slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	e.nc = mustConnect(tb, natsURL)
	var err error
	if e.js, err = jetstream.New(e.nc); err != nil {
		tb.Fatal(err)
	}
	// Subtests share a server: start from an empty stream.
	if err := e.js.DeleteStream(ctx, StreamName); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		tb.Fatal(err)
	}
	if e.stream, err = EnsureStream(ctx, e.js, StreamSpec{Duplicates: window}); err != nil {
		tb.Fatal(err)
	}
	return e
}

func mustConnect(tb testing.TB, url string) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		tb.Fatalf("nats connect %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// testWriter sends log lines to the test log.
type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(p))
	return len(p), nil
}

// testRelayConfig is a relay with short windows that a busy machine still
// keeps (a renewal or an ack late by a second or two costs nothing):
// fail-over about 8.2 s, so a duplicate window must be longer (testWindow).
func testRelayConfig(e *env) RelayConfig {
	return RelayConfig{
		LeaseTTL: 3 * time.Second, RenewEvery: 500 * time.Millisecond, RetryInterval: 100 * time.Millisecond,
		AckTimeout: 5 * time.Second, CheckpointEvery: 50 * time.Millisecond, MaxInFlight: 256,
		Logger: e.log,
	}
}

// testWindow is the shortest duplicate window the tests use with
// testRelayConfig: just above its fail-over time.
const testWindow = 10 * time.Second

// running is a relay or subscriber running in its own goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned
	err    error
}

// stop cancels the run, waits for it and fails the test on its error.
func (r *running) stop(tb testing.TB) {
	tb.Helper()
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			tb.Errorf("run: %v", r.err)
		}
	case <-time.After(20 * time.Second):
		tb.Fatal("run did not stop")
	}
}

func start(tb testing.TB, parent context.Context, run func(ctx context.Context) error) *running {
	ctx, cancel := context.WithCancel(parent)
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() { r.err = run(ctx); close(r.done) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			tb.Error("run did not stop")
		}
	})
	return r
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// workload appends realistic order flows: per order a show stream
// (ShowScheduled, SeatsHeld), a reservation (ReservationHeld,
// ReservationOrdered), the uniqueness claim and an intent (not published),
// and the order (OrderPlaced with a private payment token,
// PaymentAttemptStarted with a private request body, PaymentSucceeded,
// OrderConfirmed). Appends of different orders interleave in rounds.
type workload struct {
	mu     sync.Mutex
	public int // published events appended so far
	orders []string
	last   eventstore.Position // position of the last append
}

// lastPosition returns the position of the last event appended: the
// relay's checkpoint once it has handled everything. (The store's Head can
// lag behind it while other tests' transactions are open on the server.)
func (w *workload) lastPosition() eventstore.Position {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

const secretToken = "tok_secret_never_published"

func (w *workload) appendOrders(tb testing.TB, ctx context.Context, s eventstore.Store, n int) {
	tb.Helper()
	type flow struct {
		show, res, order string
		steps            []func() (string, eventstore.EventData)
	}
	enc := func(e domain.Event) eventstore.EventData {
		d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), e, eventstore.Metadata{OccurredAt: time.Now().UTC(), SchemaVersion: 1})
		if err != nil {
			tb.Fatal(err)
		}
		return d
	}
	flows := make([]*flow, n)
	price := domain.Money{Amount: 4500, Currency: "EUR"}
	for i := range flows {
		f := &flow{show: uuid.Must(uuid.NewV7()).String(), res: uuid.Must(uuid.NewV7()).String(), order: uuid.Must(uuid.NewV7()).String()}
		show, res, order := domain.ShowStream(f.show), domain.ReservationStream(f.res), domain.OrderStream(f.order)
		at := time.Now().UTC().Truncate(time.Second)
		f.steps = []func() (string, eventstore.EventData){
			func() (string, eventstore.EventData) {
				return show, enc(domain.ShowScheduled{ShowID: f.show, Name: "Concert", StartsAt: at.Add(24 * time.Hour), Capacity: 10, Price: price})
			},
			func() (string, eventstore.EventData) {
				return show, enc(domain.SeatsHeld{ShowID: f.show, ReservationID: f.res, Actor: "alice", Quantity: 2, Amount: price.Times(2), ExpiresAt: at.Add(10 * time.Minute)})
			},
			func() (string, eventstore.EventData) {
				return res, enc(domain.ReservationHeld{ReservationID: f.res, ShowID: f.show, Actor: "alice", Quantity: 2, Amount: price.Times(2), ExpiresAt: at.Add(10 * time.Minute)})
			},
			func() (string, eventstore.EventData) {
				return "intent-" + uuid.NewString(), enc(domain.IntentRecorded{Actor: "alice", Operation: "POST /v1/orders", TargetID: f.order, Private: map[string]any{"token": secretToken}})
			},
			func() (string, eventstore.EventData) {
				return domain.ClaimStream(f.res), enc(domain.OrderClaimed{ReservationID: f.res, OrderID: f.order, ShowID: f.show, Actor: "alice", Quantity: 2, Amount: price.Times(2)})
			},
			func() (string, eventstore.EventData) {
				return order, enc(domain.OrderPlaced{OrderID: f.order, ReservationID: f.res, ShowID: f.show, Actor: "alice", Quantity: 2, Amount: price.Times(2),
					PaymentDeadline: at.Add(15 * time.Minute), Private: &domain.OrderPrivate{PaymentToken: secretToken}})
			},
			func() (string, eventstore.EventData) {
				return res, enc(domain.ReservationOrdered{ReservationID: f.res, OrderID: f.order})
			},
			func() (string, eventstore.EventData) {
				return order, enc(domain.PaymentAttemptStarted{OrderID: f.order, Attempt: 1, ProviderKey: "order-" + f.order + "-1", Owner: "x", Amount: price.Times(2),
					Private: &domain.AttemptPrivate{RequestBody: `{"token":"` + secretToken + `"}`}})
			},
			func() (string, eventstore.EventData) {
				return order, enc(domain.PaymentSucceeded{OrderID: f.order, Attempt: 1, ChargeID: "ch_" + f.order, Amount: price.Times(2)})
			},
			func() (string, eventstore.EventData) {
				return order, enc(domain.OrderConfirmed{OrderID: f.order, Tickets: []domain.Ticket{{ID: uuid.NewString()}, {ID: uuid.NewString()}}})
			},
		}
		flows[i] = f
	}
	for step := range flows[0].steps {
		for _, f := range flows {
			stream, ev := f.steps[step]()
			res, err := s.Append(ctx, stream, eventstore.Any(), ev)
			if err != nil {
				tb.Fatalf("append %s: %v", stream, err)
			}
			w.mu.Lock()
			if _, _, ok := Category(stream); ok {
				w.public++
			}
			if w.last.Less(res.Position) {
				w.last = res.Position
			}
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	for _, f := range flows {
		w.orders = append(w.orders, f.order)
	}
	w.mu.Unlock()
}

func (w *workload) publicCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.public
}

// streamMsg is one stored message of stream BOOKING.
type streamMsg struct {
	seq     uint64
	subject string
	header  nats.Header
	payload Payload
	raw     []byte
}

// readStream returns every message of the stream in sequence order.
func (e *env) readStream(tb testing.TB) []streamMsg {
	tb.Helper()
	info, err := e.stream.Info(e.ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var out []streamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := e.stream.GetMsg(e.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			tb.Fatalf("get msg %d: %v", seq, err)
		}
		sm := streamMsg{seq: seq, subject: m.Subject, header: m.Header, raw: m.Data}
		if err := json.Unmarshal(m.Data, &sm.payload); err != nil {
			tb.Fatalf("msg %d: payload: %v", seq, err)
		}
		out = append(out, sm)
	}
	return out
}

func (e *env) streamCount(tb testing.TB) int {
	tb.Helper()
	info, err := e.stream.Info(e.ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return int(info.State.Msgs)
}

// publicEvents returns the log's published events in log order.
func (e *env) publicEvents(tb testing.TB) []eventstore.RecordedEvent {
	tb.Helper()
	var out []eventstore.RecordedEvent
	var after eventstore.Position
	for {
		batch, err := e.store.ReadAll(e.ctx, after, 1000)
		if err != nil {
			tb.Fatal(err)
		}
		if len(batch) == 0 {
			return out
		}
		for _, ev := range batch {
			if _, _, ok := Category(ev.Stream); ok {
				out = append(out, ev)
			}
		}
		after = batch[len(batch)-1].Position
	}
}

// checkStreamOnce checks that the stream holds every public event of the
// log exactly once, in log order, with the right subject and headers.
func (e *env) checkStreamOnce(tb testing.TB) {
	tb.Helper()
	want := e.publicEvents(tb)
	got := e.readStream(tb)
	if len(got) != len(want) {
		counts := map[string]int{}
		for _, m := range got {
			counts[m.header.Get(HeaderMsgID)]++
		}
		dups := 0
		for _, c := range counts {
			if c > 1 {
				dups++
			}
		}
		tb.Fatalf("stream holds %d messages (%d distinct, %d ids more than once), want %d public events once each", len(got), len(counts), dups, len(want))
	}
	for i, ev := range want {
		m := got[i]
		subject, _, _ := Subject(ev.Stream, ev.Type)
		if m.header.Get(HeaderMsgID) != ev.ID || m.subject != subject ||
			m.header.Get(HeaderStream) != ev.Stream || m.header.Get(HeaderRevision) != strconv.FormatUint(ev.Revision, 10) ||
			m.header.Get(HeaderPosition) != ev.Position.String() || m.header.Get(HeaderEventType) != ev.Type {
			tb.Fatalf("stream message %d = %s %v, want event %s %s@%d at %s (%s)", m.seq, m.subject, m.header, ev.ID, ev.Stream, ev.Revision, ev.Position, subject)
		}
	}
}

// logCount returns the subscriber's effect rows, and the number of message
// ids with more than one row.
func (e *env) logCount(tb testing.TB, durable string) (rows, repeated int) {
	tb.Helper()
	err := e.pool.QueryRow(e.ctx, `SELECT count(*), (SELECT count(*) FROM (SELECT msg_id FROM notification_log WHERE consumer = $1 GROUP BY msg_id HAVING count(*) > 1) d)
		FROM notification_log WHERE consumer = $1`, durable).Scan(&rows, &repeated)
	if err != nil {
		tb.Fatal(err)
	}
	return rows, repeated
}

// checkApplied checks the subscriber applied every public event once, with
// revisions in order per entity and no gap, and order_placed before
// order_confirmed for every order.
func (e *env) checkApplied(tb testing.TB, durable string, w *workload) {
	tb.Helper()
	rows, repeated := e.logCount(tb, durable)
	if rows != w.publicCount() || repeated != 0 {
		tb.Fatalf("notification_log: %d rows, %d ids applied more than once; want %d rows, each once", rows, repeated, w.publicCount())
	}
	q, err := e.pool.Query(e.ctx, `SELECT stream, revision, event_type, gap FROM notification_log WHERE consumer = $1 ORDER BY seq`, durable)
	if err != nil {
		tb.Fatal(err)
	}
	defer q.Close()
	last := map[string]int64{}
	placed := map[string]bool{}
	confirmed := 0
	for q.Next() {
		var (
			stream, typ string
			rev         int64
			gap         bool
		)
		if err := q.Scan(&stream, &rev, &typ, &gap); err != nil {
			tb.Fatal(err)
		}
		prev, seen := last[stream]
		if !seen {
			prev = -1
		}
		if rev != prev+1 || gap {
			tb.Fatalf("%s: applied revision %d after %d (gap flag %v), want %d", stream, rev, prev, gap, prev+1)
		}
		last[stream] = rev
		switch typ {
		case "OrderPlaced":
			placed[stream] = true
		case "OrderConfirmed":
			if !placed[stream] {
				tb.Fatalf("%s: order_confirmed applied before order_placed", stream)
			}
			confirmed++
		}
	}
	if err := q.Err(); err != nil {
		tb.Fatal(err)
	}
	if confirmed != len(w.orders) {
		tb.Fatalf("%d orders confirmed, want %d", confirmed, len(w.orders))
	}
}
