// Package test holds the black-box end-to-end tests: they build the real
// binary once (with -race and the faultinject tag), start `booking serve`
// over loopback against a fresh PostgreSQL database per test, and drive it
// only through its HTTP API, the provider simulator's /_sim control API and
// direct SQL on the event store (DESIGN §11).
//
// The tests need BOOKING_TEST_DATABASE_URL (see migrations/pgtest); run them
// with
//
//	bash test/scripts/pg.sh throwaway -- go test -race -count=1 ./test/...
package test

import (
	"bytes"
	"context"
	"crypto/rand"
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

	"github.com/retrysafe/booking/commands"
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
	return m.Run()
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

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

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
}

// server is a running `booking serve` with its own database, ports and data
// directory. Its methods are for the test goroutine unless noted.
type server struct {
	t       *testing.T
	opts    Options
	dbURL   string
	db      *pgxpool.Pool
	dataDir string

	// URL is the API's base URL; SimURL the provider simulator's.
	URL, SimURL string

	httpAddr, simAddr, natsAddr string

	logs   *syncBuffer // stdout and stderr of every run, in order
	client *http.Client
	runs   int

	// pgProxy is the database proxy of Options.PGProxy, or nil.
	pgProxy *pgProxy
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
		logs:    &syncBuffer{},
	}
	s.masterKeys = "e2e-1:" + base64.StdEncoding.EncodeToString(randomBytes(32))
	s.providerKey = "sk_test_e2e_" + hex.EncodeToString(randomBytes(12))
	s.httpAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.simAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.natsAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.URL = "http://" + s.httpAddr
	s.SimURL = "http://" + s.simAddr
	s.client = &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
	}
	if opts.PGProxy {
		s.pgProxy = startPGProxy(t, dbURL) // closed after the cleanup below stopped booking serve
	}
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
		"BOOKING_DATA_DIR":          s.dataDir,
		"BOOKING_API_TOKENS":        apiTokens,
		// The tests send bursts no real client would; the retry budget
		// (429) is not what they are about.
		"BOOKING_RETRY_BUDGET_RATE":  "10000",
		"BOOKING_RETRY_BUDGET_BURST": "10000",
		// The simulator requires it (in-process or external).
		"BOOKING_PROVIDER_API_KEY": s.providerKey,
	}
	if s.opts.ExternalSim {
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
	p, err := startProc("booking provider-sim", []string{"provider-sim"}, env, s.logs)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.sim = p
	s.mu.Unlock()
	s.waitHealthy(t, p, s.SimURL+"/healthz")
}

func (s *server) start(t *testing.T) {
	t.Helper()
	s.runs++
	fmt.Fprintf(s.logs, "=== e2e: starting booking serve (run %d) on %s, crash at %q\n", s.runs, s.httpAddr, s.opts.CrashAt)
	p, err := startProc("booking serve", []string{"serve"}, s.env(), s.logs)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.cur = p
	s.mu.Unlock()
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
	if !p.signalAndWait(syscall.SIGTERM, 60*time.Second) {
		p.signalAndWait(syscall.SIGKILL, 10*time.Second)
		s.t.Errorf("booking serve did not exit within 60 s of SIGTERM; killed")
		return
	}
	fmt.Fprintf(s.logs, "=== e2e: booking serve stopped (%v)\n", p.exitErr)
	if code := p.exitCode(); code != 0 {
		s.t.Errorf("booking serve exited with status %d after SIGTERM, want 0", code)
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
		if p == nil || p.hasExited() {
			continue
		}
		if !p.signalAndWait(syscall.SIGTERM, 60*time.Second) {
			p.signalAndWait(syscall.SIGKILL, 10*time.Second)
			s.t.Errorf("%s did not exit within 60 s of SIGTERM; killed", p.name)
			continue
		}
		if code := p.exitCode(); code != 0 {
			s.t.Errorf("%s exited with status %d after SIGTERM, want 0", p.name, code)
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…(earlier output cut)…\n" + s[len(s)-n:]
}

// ---------------------------------------------------------------------------
// HTTP

// resp is an answer of the API, read in full.
type resp struct {
	Req    string // "POST /v1/orders", for messages
	Status int
	Header http.Header
	Body   []byte
	JSON   map[string]any // the body decoded, when it is a JSON object
}

// str returns a string member of the JSON body by dotted path ("payment.status").
func (r *resp) str(path string) string {
	v, _ := r.get(path).(string)
	return v
}

// num returns a numeric member of the JSON body by dotted path, or -1.
func (r *resp) num(path string) float64 {
	v, ok := r.get(path).(float64)
	if !ok {
		return -1
	}
	return v
}

func (r *resp) get(path string) any {
	var cur any = r.JSON
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func (r *resp) replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// String is the answer as failure messages show it.
func (r *resp) String() string {
	b := strings.TrimSpace(string(r.Body))
	if len(b) > 2000 {
		b = b[:2000] + "…"
	}
	return fmt.Sprintf("%s = %d %s", r.Req, r.Status, b)
}

// call is a request to the API. A nil Key sends no Idempotency-Key header.
type call struct {
	Method, Path string
	Token        string // "" sends no Authorization header
	Key          *string
	Body         any // nil: none; string or []byte: raw; otherwise JSON-encoded
	Header       map[string]string
	Client       *http.Client // default: the server's
}

func keyOf(k string) *string { return &k }

// send makes c without failing the test (safe from any goroutine).
func (s *server) send(ctx context.Context, c call) (*resp, error) {
	var body io.Reader
	switch b := c.Body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(raw)
	}
	url := c.Path
	if !strings.HasPrefix(url, "http") {
		url = s.URL + c.Path
	}
	req, err := http.NewRequestWithContext(ctx, c.Method, url, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Key != nil {
		req.Header["Idempotency-Key"] = []string{*c.Key}
	}
	if c.Method == http.MethodPost && strings.HasSuffix(url, "/v1/orders") {
		// A test that is not about the wait budget asks for the longest
		// wait (RFC 7240), so a busy machine never turns its final answer
		// into a 202; a test about the budget sets Prefer itself.
		req.Header.Set("Prefer", "wait=10")
	}
	for k, v := range c.Header {
		req.Header.Set(k, v)
	}
	client := c.Client
	if client == nil {
		client = s.client
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read body: %w", c.Method, c.Path, err)
	}
	r := &resp{Req: c.Method + " " + c.Path, Status: res.StatusCode, Header: res.Header, Body: raw}
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		r.JSON = m
	}
	return r, nil
}

// retryable reports whether an answer asks the client to repeat the same
// request later: 503 (unavailable, contention) or 409
// idempotency-key-in-use (the first request with the key is still running).
func retryable(r *resp) bool {
	return r.Status == http.StatusServiceUnavailable ||
		(r.Status == http.StatusConflict && r.str("code") == "idempotency-key-in-use")
}

// sendRepeating makes c, repeating it (same key) every 100 ms while the
// answer is retryable, for up to 60 s; it returns the last answer (safe from
// any goroutine).
func (s *server) sendRepeating(ctx context.Context, c call) (*resp, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := s.send(ctx, c)
		if err != nil || !retryable(r) || time.Now().After(deadline) {
			return r, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// doCall makes c and fails the test on a transport error.
func (s *server) doCall(t testing.TB, c call) *resp {
	t.Helper()
	r, err := s.send(context.Background(), c)
	if err != nil {
		t.Fatalf("%s %s: %v", c.Method, c.Path, err)
	}
	return r
}

// do makes a request with a bearer token (none if "") and an
// Idempotency-Key (none if "").
func (s *server) do(t testing.TB, method, path, token, key string, body any) *resp {
	t.Helper()
	c := call{Method: method, Path: path, Token: token, Body: body}
	if key != "" {
		c.Key = keyOf(key)
	}
	return s.doCall(t, c)
}

// wantStatus fails the test unless r has status want.
func wantStatus(t testing.TB, r *resp, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s, want %d", r, want)
	}
}

// checkProblem reports (without stopping the test) unless r is an
// application/problem+json answer with status and code and the members
// type, title, status, detail and code. It returns false if the status is
// wrong (further checks of r are moot).
func checkProblem(t testing.TB, r *resp, status int, code string) bool {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s, want %d %s", r, status, code)
		return false
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s: Content-Type = %q, want application/problem+json", r.Req, ct)
	}
	if r.JSON == nil {
		t.Errorf("%s: body is not a JSON object", r)
		return true
	}
	for _, m := range []string{"type", "title", "detail", "code"} {
		if r.str(m) == "" {
			t.Errorf("%s: problem member %q missing or empty", r, m)
		}
	}
	if got := r.num("status"); int(got) != status {
		t.Errorf("%s: problem status member = %v, want %d", r, got, status)
	}
	if code != "" && r.str("code") != code {
		t.Errorf("%s: problem code = %q, want %q", r, r.str("code"), code)
	}
	return true
}

// ---------------------------------------------------------------------------
// Provider simulator

// simCharge is an entry of GET /_sim/charges.
type simCharge struct {
	ID             string            `json:"id"`
	IdempotencyKey string            `json:"idempotency_key"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	RefundedAmount int64             `json:"refunded_amount"`
	Metadata       map[string]string `json:"metadata"`
}

// chargeSummary counts the simulator's charges.
type chargeSummary struct {
	Succeeded, Failed int
	Net               int64 // succeeded amounts net of refunds
	All               []simCharge
}

func (c chargeSummary) String() string {
	return fmt.Sprintf("%d succeeded, %d failed, net %d", c.Succeeded, c.Failed, c.Net)
}

// charges returns the simulator's charges (GET /_sim/charges).
func (s *server) charges(t testing.TB) chargeSummary {
	t.Helper()
	r := s.doCall(t, call{Method: "GET", Path: s.SimURL + "/_sim/charges"})
	wantStatus(t, r, http.StatusOK)
	var out struct {
		Charges []simCharge `json:"charges"`
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		t.Fatalf("GET /_sim/charges: %v", err)
	}
	sum := chargeSummary{All: out.Charges}
	for _, c := range out.Charges {
		switch c.Status {
		case "succeeded":
			sum.Succeeded++
			sum.Net += c.Amount - c.RefundedAmount
		case "failed":
			sum.Failed++
		}
	}
	return sum
}

// ---------------------------------------------------------------------------
// Event store (direct SQL on the test database)

func (s *server) queryInt(t testing.TB, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var n int
	if err := s.db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// totalEvents returns the number of events in the store.
func (s *server) totalEvents(t testing.TB) int {
	t.Helper()
	return s.queryInt(t, `SELECT count(*) FROM events`)
}

// countType returns the number of events of type typ on streams whose name
// starts with prefix ("order-", "reservation-", ...).
func (s *server) countType(t testing.TB, prefix, typ string) int {
	t.Helper()
	return s.queryInt(t, `SELECT count(*) FROM events WHERE stream LIKE $1 || '%' AND type = $2`, prefix, typ)
}

// orders returns the number of orders in the event store (OrderPlaced).
func (s *server) orders(t testing.TB) int {
	t.Helper()
	return s.countType(t, "order-", "OrderPlaced")
}

// streamTypes returns the event types of stream in revision order.
func (s *server) streamTypes(t testing.TB, stream string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := s.db.Query(ctx, `SELECT type FROM events WHERE stream = $1 ORDER BY revision`, stream)
	if err != nil {
		t.Fatalf("read stream %s: %v", stream, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatalf("read stream %s: %v", stream, err)
		}
		out = append(out, typ)
	}
	return out
}

// claimedOrderIDs returns the order ids of every OrderClaimed, oldest first.
func (s *server) claimedOrderIDs(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := s.db.Query(ctx, `SELECT convert_from(data, 'UTF8')::jsonb->>'order_id' FROM events
		WHERE type = 'OrderClaimed' ORDER BY tx, seq`)
	if err != nil {
		t.Fatalf("read order claims: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("read order claims: %v", err)
		}
		out = append(out, id)
	}
	return out
}

// settle waits until the background work is done and returns the event
// count: the process manager's checkpoint is at the head of the log (every
// follow-up of every event so far is finished) and the count has stayed the
// same for 500 ms since (late payment steps, refunds and webhooks land). It
// fails the test after 60 s, so a busy machine only makes it slower.
func (s *server) settle(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	n, caughtUp := s.totalEvents(t), false
	var stableSince time.Time
	for {
		if !caughtUp {
			if caughtUp = s.followUpsAtHead(t); caughtUp {
				stableSince = time.Now()
			}
		} else if time.Since(stableSince) >= 500*time.Millisecond {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event store did not settle within 60 s (%d events; process manager at the head: %v)", n, caughtUp)
		}
		time.Sleep(50 * time.Millisecond)
		if m := s.totalEvents(t); m != n {
			n, caughtUp = m, false
		}
	}
}

// followUpsAtHead reports whether the process manager's checkpoint is at or
// past the last event of the log (true for an empty log).
func (s *server) followUpsAtHead(t testing.TB) bool {
	t.Helper()
	return s.queryInt(t, `SELECT count(*) FROM (SELECT tx, seq FROM events ORDER BY tx DESC, seq DESC LIMIT 1) head
		WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.name = $1
			AND (c.commit_tx, c.prepare) >= (head.tx::text::bigint, head.seq))`, commands.FollowUpsName) == 0
}

// eventually polls cond every 50 ms for up to d; it returns whether cond held.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// Fixtures

// newKey returns a fresh Idempotency-Key.
func newKey() string {
	return "e2e-" + hex.EncodeToString(randomBytes(8))
}

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return b
}

// showStartsAt is a start time safely in the future.
func showStartsAt() string {
	return time.Now().UTC().Add(30 * 24 * time.Hour).Truncate(time.Second).Format(time.RFC3339)
}

const (
	priceAmount   = 4500
	priceCurrency = "EUR"
)

func showBody(name string, capacity int) map[string]any {
	return map[string]any{"name": name, "starts_at": showStartsAt(), "capacity": capacity,
		"price": map[string]any{"amount": priceAmount, "currency": priceCurrency}}
}

// mustCreateShow creates a show as admin and returns its id.
func (s *server) mustCreateShow(t testing.TB, capacity int) string {
	t.Helper()
	r := s.do(t, "POST", "/v1/shows", tokAdmin, newKey(), showBody("Concert", capacity))
	wantStatus(t, r, http.StatusCreated)
	if r.str("id") == "" || int(r.num("available")) != capacity {
		t.Fatalf("%s: want an id and available %d", r, capacity)
	}
	return r.str("id")
}

// mustReserve holds qty seats of show for the token's actor and returns the
// reservation id.
func (s *server) mustReserve(t testing.TB, token, showID string, qty int) string {
	t.Helper()
	r := s.do(t, "POST", "/v1/reservations", token, newKey(), map[string]any{"show_id": showID, "quantity": qty})
	wantStatus(t, r, http.StatusCreated)
	if r.str("id") == "" || r.str("status") != "held" {
		t.Fatalf("%s: want an id and status held", r)
	}
	return r.str("id")
}

func orderBody(reservationID, token string) map[string]any {
	return map[string]any{"reservation_id": reservationID, "payment": map[string]any{"token": token}}
}

// available returns the show's available seats (GET /v1/shows/{id}).
func (s *server) available(t testing.TB, showID string) int {
	t.Helper()
	r := s.do(t, "GET", "/v1/shows/"+showID, tokAlice, "", nil)
	wantStatus(t, r, http.StatusOK)
	return int(r.num("available"))
}
