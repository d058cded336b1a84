// Package test holds the black-box end-to-end tests: they build the real
// binary once (with -race and the faultinject tag), start `booking serve`
// over loopback against a fresh PostgreSQL database per test, and drive it
// only through its HTTP API, the provider simulator's /_sim control API, the
// event log (read through eventstore.Store) and SQL on what the log does not
// hold (checkpoints, read models). Every scenario ends with the invariant
// check of cmd/booking/loadgen/audit (invariants_test.go).
//
// The helpers are split by concern: harness_test.go (the binary, ports,
// processes, hold points), client_test.go (requests, answers, fixtures),
// sim_test.go (the provider simulator), log_test.go (the event store) and
// invariants_test.go (the final check).
//
// The tests need BOOKING_TEST_DATABASE_URL (see migrations/pgtest); run them
// with
//
//	bash test/scripts/pg.sh throwaway -- go test -race -count=1 ./test/...
package test

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/internal/syncbuf"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// Tokens of the test actors (BOOKING_API_TOKENS).
const (
	tokAlice  = "tok-alice"
	tokBob    = "tok-bob"
	tokAdmin  = "tok-admin"
	apiTokens = "alice=" + tokAlice + ",bob=" + tokBob + ",admin=" + tokAdmin + ":admin"
)

// webhookSecret is the shared webhook secret when the simulator runs as its
// own process (Options.ExternalSim).
const webhookSecret = "whsec_e2e"

// bookingBin is the binary TestMain built; empty when the tests will skip.
var bookingBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// Without a database every test skips (or fails under CI=true) before it
	// needs the binary: don't pay for the build then.
	if os.Getenv(pgtest.EnvURL) == "" && os.Getenv("CI") != "true" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "booking-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := buildBinary(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	bookingBin = bin
	if err := buildBackend(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := m.Run()
	fmt.Fprintf(os.Stderr, "e2e: %d scenario(s) ended with the invariant check\n", checkedEnds.Load())
	return code
}

// buildBinary runs `go build -race -tags faultinject -o DIR/booking
// ./cmd/booking` from the module root and returns the binary's path.
func buildBinary(dir string) (string, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("module root %s: %w", root, err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		if gr := os.Getenv("GOROOT"); gr != "" {
			goTool = filepath.Join(gr, "bin", "go")
		} else {
			return "", fmt.Errorf("go tool not found: %w", err)
		}
	}
	bin := filepath.Join(dir, "booking")
	cmd := exec.Command(goTool, "build", "-race", "-tags", "faultinject", "-o", bin, "./cmd/booking")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build -race -tags faultinject ./cmd/booking: %v\n%s", err, out)
	}
	return bin, nil
}

// ---------------------------------------------------------------------------
// Ports

var (
	portMu    sync.Mutex
	portsUsed = map[int]bool{}
)

// freePort returns a loopback TCP port that was free a moment ago and that no
// other test of this process has been given.
func freePort(tb testing.TB) int {
	tb.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	// Below the kernel's ephemeral range (32768–60999), so no outgoing
	// connection can take the port between this check and the server's
	// bind, and below pg.sh's range (20000–32000) for throwaway servers.
	for range 1000 {
		p := 10000 + mrand.IntN(10000)
		if portsUsed[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		portsUsed[p] = true
		return p
	}
	tb.Fatalf("free port: no unused port found")
	return 0
}

// ---------------------------------------------------------------------------
// Processes

// proc is one run of the binary.
type proc struct {
	name    string
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error // valid once exited is closed
}

func startProc(name string, args, env []string, out io.Writer) (*proc, error) {
	cmd := exec.Command(bookingBin, args...)
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// signalAndWait sends sig and waits up to d for the exit; it reports whether
// the process exited.
func (p *proc) signalAndWait(sig syscall.Signal, d time.Duration) bool {
	if !p.hasExited() {
		_ = p.cmd.Process.Signal(sig)
	}
	select {
	case <-p.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// stop sends SIGTERM and waits up to 60 s for the exit, which must be
// status 0; a process still running then is SIGKILLed. It reports whether
// the process exited on SIGTERM.
func (p *proc) stop(t testing.TB) bool {
	t.Helper()
	if !p.signalAndWait(syscall.SIGTERM, 60*time.Second) {
		p.signalAndWait(syscall.SIGKILL, 10*time.Second)
		t.Errorf("%s did not exit within 60 s of SIGTERM; killed", p.name)
		return false
	}
	if code := p.exitCode(); code != 0 {
		t.Errorf("%s exited with status %d after SIGTERM, want 0", p.name, code)
	}
	return true
}

// runProc runs the binary with args and env to its end, for up to d, and
// returns the process and its output; it SIGKILLs the process and stops
// the test if it still runs after d.
func runProc(t testing.TB, name string, args, env []string, d time.Duration) (*proc, *syncbuf.Buffer) {
	t.Helper()
	out := &syncbuf.Buffer{}
	p, err := startProc(name, args, env, out)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(d):
		p.signalAndWait(syscall.SIGKILL, 10*time.Second)
		t.Fatalf("%s still runs after %s:\n%s", name, d, out)
	}
	return p, out
}

func (p *proc) exitCode() int {
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) {
		return ee.ExitCode()
	}
	if p.exitErr != nil {
		return -1
	}
	return 0
}

// Options configures a booking serve started by mustStart.
type Options struct {
	// CrashAt lists fault-injection steps (BOOKING_TEST_CRASH_AT): the
	// process SIGKILLs itself right after each named step.
	CrashAt []string
	// HoldAt lists steps armed at start (BOOKING_TEST_HOLD_AT): every
	// request or job that reaches one parks there until the test calls
	// releaseHold. armHold arms a step later, once the setup is done.
	HoldAt []string
	// Env sets extra environment variables of booking serve (overriding the
	// harness's defaults).
	Env map[string]string
	// ExternalSim runs the provider simulator as its own process
	// (`booking provider-sim`, BOOKING_PROVIDER_URL set), so it keeps
	// running while booking serve is killed. By default the simulator runs
	// inside booking serve (dev mode) and restarts with it; either way it
	// keeps its state in the data directory (BOOKING_DATA_DIR/provider-sim),
	// so a restart forgets no charge.
	ExternalSim bool
	// PGProxy routes booking serve's database connections through a
	// pgProxy (server.pgProxy) that can cut the answer of a chosen append.
	PGProxy bool
	// KeepLeader keeps the KurrentDB double's leader for the whole test
	// (no election mid-run): for tests that stop or replace the double
	// themselves.
	KeepLeader bool
}

// server is a running `booking serve` with its own database, ports and data
// directory. Its methods are for the test goroutine unless noted.
type server struct {
	t       *testing.T
	opts    Options
	dbURL   string
	db      *pgxpool.Pool
	dataDir string

	// URL is the API's base URL; SimURL the provider simulator's;
	// AdminURL the admin listener's (BOOKING_ADMIN_ADDR: /metrics).
	URL, SimURL, AdminURL string

	httpAddr, simAddr, natsAddr, adminAddr string
	// admins maps the API base URL of every booking serve of the test
	// (this one, its peers) to its admin listener's base URL (adminOf).
	admins sync.Map

	logs   *syncbuf.Buffer // stdout and stderr of every run, in order
	client *http.Client
	runs   int

	// log is the event log of the test database (openLog).
	log eventstore.Store
	// auditOpen exempts orders from the final invariant check's Settled
	// rule (expectOpen).
	auditOpen map[string]string
	// auditToken is the bearer token the audit reads the API with; empty:
	// the static admin token (a JWT when BOOKING_AUTH=jwt).
	auditToken string

	// pgProxy is the database proxy of Options.PGProxy, or nil.
	pgProxy *pgProxy
	// kdb is the KurrentDB double and eventStore its connection string
	// (BOOKING_EVENT_STORE) when the suite runs on KurrentDB
	// (backend_test.go); nil and empty on PostgreSQL.
	kdb        *kurrentdbtest.Process
	eventStore string
	// masterKeys (BOOKING_MASTER_KEYS, with an external simulator; dev mode
	// generates its own in the data directory) and providerKey (the API key
	// booking serve sends and the simulator requires) are per server.
	masterKeys, providerKey string

	mu  sync.Mutex
	cur *proc
	sim *proc
}

// mustStart creates a fresh database and starts booking serve on free
// loopback ports, waiting until /healthz answers. A cleanup stops it (SIGTERM),
// fails the test if any run reported a data race or a panic, and prints the
// captured output when the test failed.
func mustStart(t *testing.T, opts Options) *server {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	if bookingBin == "" {
		t.Fatal("booking binary not built (TestMain)")
	}
	poolURL := dbURL
	if strings.Contains(poolURL, "?") {
		poolURL += "&pool_max_conns=4"
	} else {
		poolURL += "?pool_max_conns=4"
	}
	s := &server{
		t:       t,
		opts:    opts,
		dbURL:   dbURL,
		db:      pgtest.NewPool(t, poolURL),
		dataDir: t.TempDir(),
		logs:    &syncbuf.Buffer{},
	}
	s.masterKeys = "e2e-1:" + base64.StdEncoding.EncodeToString(randomBytes(32))
	s.providerKey = "sk_test_e2e_" + hex.EncodeToString(randomBytes(12))
	s.httpAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.simAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.natsAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.adminAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.URL = "http://" + s.httpAddr
	s.SimURL = "http://" + s.simAddr
	s.AdminURL = "http://" + s.adminAddr
	s.admins.Store(s.URL, s.AdminURL)
	// Every answer of the API through this client is checked against the
	// OpenAPI document (contractTransport, contract_test.go).
	s.client = s.validated(&http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
	})
	if opts.PGProxy {
		s.pgProxy = startPGProxy(t, dbURL) // closed after the cleanup below stopped booking serve
	}
	s.startBackend(t) // stopped after the cleanup below stopped booking serve
	t.Cleanup(func() {
		s.shutdown()
		s.client.CloseIdleConnections()
		logs := s.logs.String()
		if strings.Contains(logs, "WARNING: DATA RACE") {
			t.Errorf("booking reported a data race (see its output below)")
		}
		if strings.Contains(logs, "panic:") || strings.Contains(logs, "fatal error:") {
			t.Errorf("booking panicked (see its output below)")
		}
		if t.Failed() {
			t.Logf("output of booking (%d run(s)):\n%s", s.runs, tail(logs, 48<<10))
		}
	})
	if opts.ExternalSim {
		s.startSim(t)
	}
	s.start(t)
	s.log = openLog(t, s.db, s.eventStore)
	t.Cleanup(func() { s.checkEnd(t) }) // runs before the cleanup above stops the server
	return s
}

// env returns the environment of booking serve: the test process's minus
// every BOOKING_* and DATABASE_URL, plus the harness's settings.
func (s *server) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BOOKING_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		env = append(env, kv)
	}
	set := map[string]string{
		"DATABASE_URL":              s.serviceDBURL(),
		"BOOKING_HTTP_ADDR":         s.httpAddr,
		"BOOKING_PROVIDER_SIM_ADDR": s.simAddr,
		"BOOKING_NATS_ADDR":         s.natsAddr,
		"BOOKING_ADMIN_ADDR":        s.adminAddr,
		"BOOKING_DATA_DIR":          s.dataDir,
		"BOOKING_API_TOKENS":        apiTokens,
		// The tests send bursts no real client would; the retry budget
		// (429) is not what they are about.
		"BOOKING_RETRY_BUDGET_RATE":  "10000",
		"BOOKING_RETRY_BUDGET_BURST": "10000",
		// The simulator requires it (in-process or external).
		"BOOKING_PROVIDER_API_KEY": s.providerKey,
	}
	if s.eventStore != "" {
		set["BOOKING_EVENT_STORE"] = s.eventStore
	}
	if s.opts.ExternalSim {
		// With a URL the key goes by its name for Stripe (in dev mode that
		// name would select Stripe's API; its older name does not).
		delete(set, "BOOKING_PROVIDER_API_KEY")
		set["BOOKING_STRIPE_SECRET_KEY"] = s.providerKey
		set["BOOKING_PROVIDER_URL"] = s.SimURL
		set["BOOKING_PROVIDER_WEBHOOK_SECRET"] = webhookSecret
		set["BOOKING_MASTER_KEYS"] = s.masterKeys
	}
	if len(s.opts.CrashAt) > 0 {
		set["BOOKING_TEST_CRASH_AT"] = strings.Join(s.opts.CrashAt, ",")
	}
	if len(s.opts.HoldAt) > 0 {
		set["BOOKING_TEST_HOLD_AT"] = strings.Join(s.opts.HoldAt, ",")
	}
	for k, v := range s.opts.Env {
		set[k] = v
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// serviceDBURL is the database URL booking serve gets: through the proxy
// when there is one.
func (s *server) serviceDBURL() string {
	if s.pgProxy != nil {
		return s.pgProxy.proxyURL(s.dbURL)
	}
	return s.dbURL
}

func (s *server) startSim(t *testing.T) {
	t.Helper()
	env := s.env()
	env = append(env, "BOOKING_PROVIDER_WEBHOOK_URL="+s.URL+"/v1/provider/webhooks",
		"BOOKING_PROVIDER_WEBHOOK_SECRET="+webhookSecret, "BOOKING_PROVIDER_SIM_API_KEY="+s.providerKey)
	fmt.Fprintf(s.logs, "=== e2e: starting booking provider-sim on %s\n", s.simAddr)
	p := s.launch(t, &s.sim, "booking provider-sim", []string{"provider-sim"}, env)
	s.waitHealthy(t, p, s.SimURL+"/healthz")
}

// launch starts the binary (startProc) with its output in the server's
// log, stores the process in *slot under s.mu, and stops the test if it
// cannot start.
func (s *server) launch(t *testing.T, slot **proc, name string, args, env []string) *proc {
	t.Helper()
	p, err := startProc(name, args, env, s.logs)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	*slot = p
	s.mu.Unlock()
	return p
}

func (s *server) start(t *testing.T) {
	t.Helper()
	s.runs++
	fmt.Fprintf(s.logs, "=== e2e: starting booking serve (run %d) on %s, crash at %q\n", s.runs, s.httpAddr, s.opts.CrashAt)
	p := s.launch(t, &s.cur, "booking serve", []string{"serve"}, s.env())
	s.waitHealthy(t, p, s.URL+"/healthz")
	if !s.opts.ExternalSim {
		s.waitHealthy(t, p, s.SimURL+"/healthz")
	}
}

// waitHealthy polls url until it answers 200, failing the test if p exits
// or 60 s pass (a -race binary migrating on a loaded 2-core machine).
func (s *server) waitHealthy(t *testing.T, p *proc, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	c := &http.Client{Timeout: time.Second}
	for {
		res, err := c.Get(url)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if p.hasExited() {
			t.Fatalf("%s exited before %s answered (%v)", p.name, url, p.exitErr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s did not answer 200 within 60 s (last error: %v)", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill SIGKILLs booking serve and waits for it to exit.
func (s *server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	if p == nil {
		return
	}
	if !p.signalAndWait(syscall.SIGKILL, 10*time.Second) {
		s.t.Fatalf("booking serve did not exit within 10 s of SIGKILL")
	}
	fmt.Fprintf(s.logs, "=== e2e: booking serve killed (%v)\n", p.exitErr)
	s.client.CloseIdleConnections()
}

// Stop sends SIGTERM and waits for a graceful exit, which must be status 0.
func (s *server) Stop() {
	s.t.Helper()
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	if p == nil || p.hasExited() {
		return
	}
	if p.stop(s.t) {
		fmt.Fprintf(s.logs, "=== e2e: booking serve stopped (%v)\n", p.exitErr)
	}
	s.client.CloseIdleConnections()
}

// WaitExit waits up to d for booking serve to exit on its own (a crash
// injected with Options.CrashAt) and fails the test if it does not.
func (s *server) WaitExit(d time.Duration) {
	s.t.Helper()
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	select {
	case <-p.exited:
		fmt.Fprintf(s.logs, "=== e2e: booking serve exited (%v)\n", p.exitErr)
		s.client.CloseIdleConnections()
	case <-time.After(d):
		s.t.Fatalf("booking serve still runs %s after the injected crash point; want it killed (BOOKING_TEST_CRASH_AT=%s)",
			d, strings.Join(s.opts.CrashAt, ","))
	}
}

// Restart stops booking serve if it runs (SIGTERM), applies mods to its
// options, and starts it again on the same ports, database and data
// directory.
func (s *server) Restart(mods ...func(*Options)) {
	s.t.Helper()
	s.Stop()
	for _, m := range mods {
		m(&s.opts)
	}
	s.start(s.t)
}

// withoutCrash clears Options.CrashAt (for Restart).
func withoutCrash(o *Options) { o.CrashAt = nil }

// ---------------------------------------------------------------------------
// Hold points (faultinject build: /_test/holds/{step})

// holdState is the answer of the hold control API.
type holdState struct {
	Step    string `json:"step"`
	Armed   bool   `json:"armed"`
	Parked  int    `json:"parked"`
	Arrived int    `json:"arrived"`
}

// holdCall makes a request to the hold control API of booking serve and
// fails the test unless it answers 200.
func (s *server) holdCall(t testing.TB, method, step, query string) holdState {
	t.Helper()
	r := s.doCall(t, call{Method: method, Path: "/_test/holds/" + step + query})
	wantStatus(t, r, http.StatusOK)
	var st holdState
	if err := json.Unmarshal(r.Body, &st); err != nil || st.Step != step {
		t.Fatalf("%s: want a hold state of %s (%v)", r, step, err)
	}
	return st
}

// armHold makes booking serve park every request or job that reaches step
// from now on, until releaseHold.
func (s *server) armHold(t testing.TB, step string) {
	t.Helper()
	if st := s.holdCall(t, "PUT", step, ""); !st.Armed {
		t.Fatalf("PUT /_test/holds/%s: %+v, want armed", step, st)
	}
}

// waitHeld waits (up to 60 s) until n arrivals in all have parked at step,
// and returns how many are parked now.
func (s *server) waitHeld(t testing.TB, step string, n int) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := s.holdCall(t, "GET", step, fmt.Sprintf("?arrived=%d&wait=10s", n))
		if st.Arrived >= n {
			return st.Parked
		}
		if time.Now().After(deadline) {
			t.Fatalf("hold %s: %d arrival(s) within 60 s, want %d (%+v)", step, st.Arrived, n, st)
		}
	}
}

// releaseHold disarms step and lets everything parked there go on; it
// returns how many had arrived there in all.
func (s *server) releaseHold(t testing.TB, step string) int {
	t.Helper()
	return s.holdCall(t, "DELETE", step, "").Arrived
}

// shutdown stops whatever still runs, at cleanup.
func (s *server) shutdown() {
	s.mu.Lock()
	cur, sim := s.cur, s.sim
	s.mu.Unlock()
	for _, p := range []*proc{cur, sim} {
		if p != nil && !p.hasExited() {
			p.stop(s.t)
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…(earlier output cut)…\n" + s[len(s)-n:]
}

// fastEnv returns the short windows of the recovery and payment tests,
// valid under Config.Validate (payment lease > provider timeout + 2 s;
// retention ≥ 10 × recovery interval; duplicate window ≥ 2 × recovery
// interval), with kv pairs overriding them.
func fastEnv(kv ...string) map[string]string {
	env := map[string]string{
		"BOOKING_INTENT_LEASE":          "1s",
		"BOOKING_RECOVERY_INTERVAL":     "1s",
		"BOOKING_NATS_DUPLICATE_WINDOW": "10s",
		"BOOKING_PROVIDER_TIMEOUT":      "2s",
		"BOOKING_PAYMENT_LEASE":         "5s",
	}
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}
