// Command benchrun measures the performance table of docs/benchmarks.md
// (rows P1–P7), each row against its baseline measured
// in the same run, and writes BENCHMARKS.md. `make bench` runs it inside a
// throwaway PostgreSQL server (test/scripts/pg.sh throwaway, which exports
// BOOKING_TEST_DATABASE_URL and BOOKING_TEST_PG_BINDIR) through
// test/scripts/bench.sh (machine header, pgbench baseline).
//
// Rows and their baselines:
//
//	P1  BenchmarkAppendNewStreams (eventstore/pgstore): metric x_of_raw_insert, its
//	    own baseline in the same benchmark; sub-benchmarks named …clients=N are
//	    reported per client count.
//	P2  whole bookings over HTTP against `booking serve` (dev mode: in-process
//	    simulator, embedded NATS): 32 client connections, 256 shows, reservation +
//	    order + charge; bookings/s, p50/p99, over pgbench raw-insert TPS at 32 clients
//	    measured just before.
//	P2s statements and commits per booking: the figures the statement-budget
//	    tests log as "statements per booking: request path N" / "…: whole
//	    service N" and "commits per booking: request path N".
//	P2h 32 HTTP clients holding one seat each on one show, over raw-insert TPS.
//	P3  replays of one completed order intent (POST /v1/orders, same key and body)
//	    over GET /v1/orders/{id} of the same order, same connections, same run.
//	P4  BenchmarkRebuild* (projections): metric x_of_raw_read.
//	P5  BenchmarkRelay (projections/notify): metric relay/raw (raw: JetStream async
//	    publish with acks to the same embedded server, same run).
//	P6  VmHWM of `booking serve` over each P2 repetition (reset through
//	    /proc/PID/clear_refs), dev mode, and with external nats-server and
//	    `booking provider-sim`.
//	P7  a pgstore benchmark reporting x_of_30k (append latency at 1M events over 30k).
//
// Each row is measured -reps times (default 3; 1 with -quick); the report gives
// the median and the range. A row whose benchmark or test does not exist is
// reported as "not measured".
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

const (
	benchUserToken  = "bench-user-token"
	benchAdminToken = "bench-admin-token"
	clients         = 32
	p2Shows         = 256
)

// opts are the command line.
type opts struct {
	out, logDir, bin, natsBin, only string
	profileDir                      string
	quick                           bool
	reps                            int
	dur, warm, rawDur               time.Duration
	rebuildEvents                   int
}

// env is what every row needs: the server, the options, the log.
type env struct {
	o       opts
	server  string // URL of database postgres on the throwaway server
	bindir  string
	ctx     context.Context
	results []*row
	logf    func(format string, args ...any)
	dbSeq   int
}

// row is one line of the table: its figures per repetition.
type row struct {
	id, measure, goal string
	unit              string    // unit of value
	value, base       []float64 // per repetition: the measured figure and the baseline it is set against
	ratio             []float64
	extra             []string  // per repetition details (latencies, repeats)
	cpuMs, txs, syncs []float64 // per operation: service CPU (ms), transactions, WAL syncs (HTTP rows)
	pgMs, clientMs    []float64 // per operation: PostgreSQL's CPU and the load's clients' (ms; HTTP rows)
	goalMin, goalMax  float64   // on ratio (or value when ratio is empty); 0: none
	note              string    // not measured, or a remark
}

func main() {
	var o opts
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "report file")
	flag.StringVar(&o.logDir, "log-dir", ".tmp/bench", "directory for the servers' and benchmarks' output")
	flag.StringVar(&o.bin, "bin", "bin/booking", "the booking binary (make build)")
	flag.StringVar(&o.natsBin, "nats-server", "bin/nats-server", "nats-server binary for P6 with external NATS (skipped if missing)")
	flag.StringVar(&o.only, "only", "", "regular expression of row ids to run (default all)")
	flag.BoolVar(&o.quick, "quick", os.Getenv("BENCH_QUICK") == "1", "one short repetition of each row (BENCH_QUICK=1)")
	flag.IntVar(&o.reps, "reps", 3, "repetitions of each row")
	flag.StringVar(&o.profileDir, "profile-dir", os.Getenv("BENCH_PROFILE_DIR"), "directory for CPU profiles of booking serve, one per timed HTTP window, and heap profiles after each P2 repetition (BENCH_PROFILE_DIR; empty: none)")
	flag.Parse()
	o.dur, o.warm, o.rawDur, o.rebuildEvents = 15*time.Second, 3*time.Second, 5*time.Second, 1_000_000
	if o.quick {
		o.reps, o.dur, o.warm, o.rawDur, o.rebuildEvents = 1, 5*time.Second, 2*time.Second, 3*time.Second, 100_000
	}
	log.SetFlags(0)
	log.SetPrefix("benchrun: ")
	server, bindir := os.Getenv("BOOKING_TEST_DATABASE_URL"), os.Getenv("BOOKING_TEST_PG_BINDIR")
	if server == "" || bindir == "" {
		log.Fatal("needs a PostgreSQL server of its own: run it as `test/scripts/pg.sh throwaway -- go run ./test/scripts/benchrun` (make bench)")
	}
	if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		log.Fatal(err)
	}
	e := &env{o: o, server: server, bindir: bindir, ctx: context.Background(), logf: log.Printf}
	started := time.Now()
	only := regexp.MustCompile("^(" + o.only + ")$")
	if o.only == "" {
		only = regexp.MustCompile(".")
	}
	for _, r := range []struct {
		id  string
		run func(*env)
	}{
		{"P1", (*env).p1p7}, {"P2", (*env).p2}, {"P2s", (*env).p2s}, {"P2h", (*env).p2h}, {"P3", (*env).p3},
		{"P4", (*env).p4}, {"P5", (*env).p5},
	} {
		if !only.MatchString(r.id) {
			continue
		}
		t := time.Now()
		e.logf("==> %s", r.id)
		r.run(e)
		e.logf("==> %s done in %s", r.id, time.Since(t).Round(time.Second))
	}
	if err := e.writeReport(time.Since(started)); err != nil {
		log.Fatal(err)
	}
	e.logf("report written to %s (%s)", o.out, time.Since(started).Round(time.Second))
}

// add registers a row and returns it.
func (e *env) add(r *row) *row { e.results = append(e.results, r); return r }

// pgbench measures one-row INSERTs into a table with UNIQUE (actor, key),
// synchronous commit on, n clients for d, on the server's database postgres,
// and returns the TPS.
func (e *env) pgbench(n int, d time.Duration) (float64, error) {
	table := fmt.Sprintf("bench_raw_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(e.ctx, e.server)
	if err != nil {
		return 0, err
	}
	defer conn.Close(e.ctx)
	if _, err := conn.Exec(e.ctx, `CREATE TABLE `+table+` (id bigserial PRIMARY KEY, actor int NOT NULL, key text NOT NULL, UNIQUE (actor, key))`); err != nil {
		return 0, err
	}
	defer conn.Exec(e.ctx, `DROP TABLE `+table) //nolint:errcheck // best effort
	script := filepath.Join(e.o.logDir, table+".sql")
	if err := os.WriteFile(script, []byte("INSERT INTO "+table+" (actor, key) VALUES (:client_id, gen_random_uuid()::text);\n"), 0o644); err != nil {
		return 0, err
	}
	defer os.Remove(script)
	out, err := exec.CommandContext(e.ctx, filepath.Join(e.bindir, "pgbench"), "-n", "-f", script, "-c", strconv.Itoa(n),
		"-j", strconv.Itoa(n), "-T", strconv.Itoa(int(d.Seconds())), e.server).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^tps = ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no tps in\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// benchLine is one result line of go test -bench.
type benchLine struct {
	name    string
	metrics map[string]float64
}

var benchRE = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// goBench runs go test -bench pattern in pkg and returns its result lines
// (output saved in the log directory).
func (e *env) goBench(name, pkg, pattern, benchtime string, count int, extraEnv ...string) ([]benchLine, error) {
	args := []string{"test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", strconv.Itoa(count), "-timeout", "60m", pkg}
	out, err := e.goCmd(name, args, extraEnv...)
	var lines []benchLine
	for _, l := range strings.Split(out, "\n") {
		m := benchRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		bl := benchLine{name: m[1], metrics: map[string]float64{}}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				bl.metrics[f[i+1]] = v
			}
		}
		lines = append(lines, bl)
	}
	return lines, err
}

// goCmd runs the go command with args (and BOOKING_TEST_* from this
// process), saves its output as logDir/name.log and returns it.
func (e *env) goCmd(name string, args []string, extraEnv ...string) (string, error) {
	cmd := exec.CommandContext(e.ctx, "go", args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(e.o.logDir, name+".log"), out, 0o644)
	if err != nil {
		err = fmt.Errorf("go %s: %v (output in %s)", strings.Join(args, " "), err, filepath.Join(e.o.logDir, name+".log"))
	}
	return string(out), err
}

// p1p7 runs the pgstore append benchmarks once with -count reps: P1's
// x_of_raw_insert (per sub-benchmark) and P7's x_of_30k.
func (e *env) p1p7() {
	p1 := map[string]*row{}
	p7 := e.add(&row{id: "P7", measure: "append latency at 1M events stored vs 30k", goal: "≤ 1.2×", goalMax: 1.2, unit: "x"})
	// P7's benchmark sizes its own sample (it seeds 1M events once per
	// run), so it runs with -benchtime 1x; BenchmarkAppendNewStreams runs
	// apart below with a fixed count.
	var lines []benchLine
	var err error
	if reports("eventstore/pgstore", "x_of_30k") {
		if lines, err = e.goBench("p7-pgstore", "./eventstore/pgstore", "^BenchmarkAppend", "1x", e.o.reps); err != nil {
			e.logf("P7: %v", err)
		}
	}
	for _, l := range lines {
		if v, ok := l.metrics["x_of_30k"]; ok {
			p7.value = append(p7.value, v)
			p7.ratio = append(p7.ratio, v)
			p7.extra = append(p7.extra, l.name+": "+fmtMetrics(l.metrics))
		}
	}
	if len(p7.ratio) == 0 {
		p7.note = "not measured: no pgstore benchmark reports x_of_30k yet"
	}
	n := "20000x"
	if e.o.quick {
		n = "5000x"
	}
	lines, err = e.goBench("p1-pgstore", "./eventstore/pgstore", "^BenchmarkAppendNewStreams$", n, e.o.reps)
	if err != nil {
		e.logf("P1: %v", err)
	}
	// One client: each op is an append and a raw insert, alternated, at the
	// disk's flush time each, so fewer ops.
	n1 := "2000x"
	if e.o.quick {
		n1 = "500x"
	}
	one, err1 := e.goBench("p1-pgstore-one", "./eventstore/pgstore", "^BenchmarkAppendNewStreamsOneClient$", n1, e.o.reps)
	if err1 != nil {
		e.logf("P1 (1 client): %v", err1)
	}
	lines = append(lines, one...)
	var order []string
	for _, l := range lines {
		v, ok := l.metrics["x_of_raw_insert"]
		if !ok {
			continue
		}
		clientsOf := "32 clients"
		if strings.Contains(l.name, "OneClient") {
			clientsOf = "1 client"
		} else if m := regexp.MustCompile(`clients=(\d+)`).FindStringSubmatch(l.name); m != nil {
			clientsOf = m[1] + " clients"
			if m[1] == "1" {
				clientsOf = "1 client"
			}
		}
		r := p1[clientsOf]
		if r == nil {
			r = &row{id: "P1", measure: "append one event to a new stream, " + clientsOf + ", vs raw one-row UNIQUE insert on the same pool",
				goal: "≥ 0.9×", goalMin: 0.9, unit: "events/s"}
			p1[clientsOf] = r
			order = append(order, clientsOf)
		}
		r.value = append(r.value, l.metrics["events/s"])
		r.base = append(r.base, l.metrics["raw_inserts/s"])
		r.ratio = append(r.ratio, v)
	}
	if _, ok := p1["1 client"]; !ok {
		e.add(&row{id: "P1", measure: "append one event to a new stream, 1 client, vs raw insert", goal: "≥ 0.9×",
			note: "not measured: BenchmarkAppendNewStreamsOneClient reported nothing: " + fmt.Sprint(err1)})
	}
	if len(order) == 0 {
		e.add(&row{id: "P1", measure: "append one event to a new stream, 32 clients", goal: "≥ 0.9×", note: "not measured: " + fmt.Sprint(err)})
	}
	slices.Sort(order)
	for _, k := range order {
		e.add(p1[k])
	}
	// P7 after P1 in the table.
	e.results = slices.DeleteFunc(e.results, func(r *row) bool { return r == p7 })
	e.results = append(e.results, p7)
}

// reports says whether a _test.go file of dir names metric (in quotes), so
// a benchmark that cannot report it is not run for nothing.
func reports(dir, metric string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), `"`+metric+`"`) {
			return true
		}
	}
	return false
}

// fmtMetrics formats benchmark metrics as "unit value; …".
func fmtMetrics(m map[string]float64) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %.4g; ", k, m[k])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// service is one running `booking serve` (and, for P6 external, its
// nats-server and provider-sim).
type service struct {
	url   string
	db    string // database name
	cmd   *exec.Cmd
	other []*exec.Cmd
	// admin is the base URL of booking serve's admin listener
	// (BOOKING_ADMIN_ADDR: /metrics, /debug/pprof/).
	admin string
	// pprof is the base URL of booking serve's net/http/pprof on its
	// admin listener when CPU profiles are taken, else "".
	pprof string
}

// stop stops every process of the service (SIGTERM, then SIGKILL after 15 s).
func (s *service) stop() {
	for _, c := range append([]*exec.Cmd{s.cmd}, s.other...) {
		if c == nil || c.Process == nil {
			continue
		}
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

// vmHWM returns the peak resident set (VmHWM) of the service in MB.
func (s *service) vmHWM() float64 {
	return procStatusKB(s.cmd.Process.Pid, "VmHWM") / 1024
}

// resetHWM resets the peak resident set of the service to its current RSS.
func (s *service) resetHWM() {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.cmd.Process.Pid), []byte("5"), 0)
}

// cpuSeconds returns the user+system CPU time of the service so far.
func (s *service) cpuSeconds() float64 {
	f, ok := procStat(s.cmd.Process.Pid)
	if !ok {
		return math.NaN()
	}
	return (ticks(f, 11) + ticks(f, 12)) / 100 // USER_HZ
}

func procStatusKB(pid int, field string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return math.NaN()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb
		}
	}
	return math.NaN()
}

// freePort returns a free TCP port of 127.0.0.1 below the ephemeral range.
func freePort() int {
	for {
		p := 20000 + int(time.Now().UnixNano()%12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			return p
		}
	}
}

// createDB creates a fresh database and returns its URL.
func (e *env) createDB(prefix string) (string, error) {
	e.dbSeq++
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), e.dbSeq)
	conn, err := pgx.Connect(e.ctx, e.server)
	if err != nil {
		return "", err
	}
	defer conn.Close(e.ctx)
	if _, err := conn.Exec(e.ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	u, err := url.Parse(e.server)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// baseEnv is this process's environment without BOOKING_* and DATABASE_URL.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BOOKING_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

// startService migrates a fresh database and starts `booking serve` on it:
// dev mode (in-process simulator, embedded NATS) unless external, where it
// starts nats-server and `booking provider-sim` as their own processes.
func (e *env) startService(name string, external bool) (*service, error) {
	db, err := e.createDB("bench_" + strings.ToLower(name))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(e.o.logDir, name+"-")
	if err != nil {
		return nil, err
	}
	base := append(baseEnv(), "DATABASE_URL="+db)
	mig := exec.Command(e.o.bin, "migrate")
	mig.Env = base
	if out, err := mig.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("booking migrate: %v\n%s", err, out)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort())
	env := append(slices.Clone(base), "BOOKING_HTTP_ADDR="+httpAddr, "BOOKING_DATA_DIR="+filepath.Join(dir, "data"),
		"BOOKING_API_TOKENS=bench="+benchUserToken+",admin="+benchAdminToken+":admin",
		"BOOKING_RETRY_BUDGET_RATE=1000000", "BOOKING_RETRY_BUDGET_BURST=1000000", "BOOKING_LOG_LEVEL=warn",
		fmt.Sprintf("BOOKING_NATS_ADDR=127.0.0.1:%d", freePort()), fmt.Sprintf("BOOKING_PROVIDER_SIM_ADDR=127.0.0.1:%d", freePort()))
	s := &service{url: "http://" + httpAddr, db: strings.TrimPrefix(must(url.Parse(db)).Path, "/")}
	// Each service its own admin listener (metrics, profiler).
	adminAddr := fmt.Sprintf("127.0.0.1:%d", freePort())
	env = append(env, "BOOKING_ADMIN_ADDR="+adminAddr)
	s.admin = "http://" + adminAddr
	if e.o.profileDir != "" {
		s.pprof = "http://" + adminAddr + "/debug/pprof"
	}
	logFile := func(n string) *os.File {
		f, _ := os.Create(filepath.Join(dir, n+".log"))
		return f
	}
	if external {
		if _, err := os.Stat(e.o.natsBin); err != nil {
			return nil, fmt.Errorf("no nats-server at %s", e.o.natsBin)
		}
		natsPort, simPort := freePort(), freePort()
		nats := exec.Command(e.o.natsBin, "-js", "-sd", filepath.Join(dir, "nats"), "-a", "127.0.0.1", "-p", strconv.Itoa(natsPort))
		nats.Stdout, nats.Stderr = logFile("nats-server"), logFile("nats-server")
		if err := nats.Start(); err != nil {
			return nil, err
		}
		s.other = append(s.other, nats)
		sim := exec.Command(e.o.bin, "provider-sim")
		sim.Env = append(baseEnv(), fmt.Sprintf("BOOKING_PROVIDER_SIM_ADDR=127.0.0.1:%d", simPort),
			"BOOKING_PROVIDER_WEBHOOK_URL=http://"+httpAddr+"/v1/provider/webhooks",
			"BOOKING_PROVIDER_WEBHOOK_SECRET=whsec_bench", "BOOKING_PROVIDER_SIM_API_KEY=sk_bench")
		sim.Stdout, sim.Stderr = logFile("provider-sim"), logFile("provider-sim")
		if err := sim.Start(); err != nil {
			s.stop()
			return nil, err
		}
		s.other = append(s.other, sim)
		if err := waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/healthz", simPort), 30*time.Second); err != nil {
			s.stop()
			return nil, fmt.Errorf("provider-sim: %w", err)
		}
		env = append(env, fmt.Sprintf("BOOKING_NATS_URL=nats://127.0.0.1:%d", natsPort),
			fmt.Sprintf("BOOKING_PROVIDER_URL=http://127.0.0.1:%d", simPort), "BOOKING_PROVIDER_WEBHOOK_SECRET=whsec_bench",
			"BOOKING_PROVIDER_API_KEY=sk_bench", "BOOKING_MASTER_KEYS=bench-1:"+masterKey())
	}
	s.cmd = exec.Command(e.o.bin, "serve")
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = logFile("serve"), logFile("serve")
	if err := s.cmd.Start(); err != nil {
		s.stop()
		return nil, err
	}
	if err := waitHTTP(s.url+"/readyz", 60*time.Second); err != nil {
		s.stop()
		return nil, fmt.Errorf("booking serve: %w (log in %s)", err, dir)
	}
	return s, nil
}

// profile takes a CPU profile of s for d, from now, in the background
// (when --profile-dir is set; otherwise it does nothing) and saves it as
// profileDir/name.pprof; wait blocks until it is saved. A failure is
// logged, never fatal: profiles explain figures, they are not figures.
func (e *env) profile(s *service, name string, d time.Duration) (wait func()) {
	if s.pprof == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &http.Client{Timeout: d + 30*time.Second}
		res, err := c.Get(fmt.Sprintf("%s/profile?seconds=%d", s.pprof, max(1, int(d.Round(time.Second)/time.Second))))
		if err != nil {
			e.logf("profile %s: %v", name, err)
			return
		}
		defer res.Body.Close()
		if err := os.MkdirAll(e.o.profileDir, 0o755); err != nil {
			e.logf("profile %s: %v", name, err)
			return
		}
		f, err := os.Create(filepath.Join(e.o.profileDir, name+".pprof"))
		if err == nil {
			_, err = io.Copy(f, res.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			e.logf("profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}

// saveHeap saves the heap profile of s (pprof's binary format, as of the
// last collection) as profileDir/name.pprof when --profile-dir is set:
// `go tool pprof -base` of two repetitions' shows what the heap kept
// between them. A failure is logged, never fatal.
func (e *env) saveHeap(s *service, name string) {
	if s.pprof == "" {
		return
	}
	body, err := s.adminGet("/debug/pprof/heap")
	if err == nil {
		err = os.MkdirAll(e.o.profileDir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(e.o.profileDir, name+".pprof"), []byte(body), 0o644)
	}
	if err != nil {
		e.logf("heap profile %s: %v", name, err)
	}
}

// profileAfter is profile for the timed window d of a load that starts
// now with a warm-up of warm: the profile starts once the warm-up is over.
func (e *env) profileAfter(s *service, name string, warm, d time.Duration) (wait func()) {
	if s.pprof == "" {
		return func() {}
	}
	start := make(chan func(), 1)
	go func() {
		t := time.NewTimer(warm)
		defer t.Stop()
		select {
		case <-e.ctx.Done():
			start <- func() {}
		case <-t.C:
			start <- e.profile(s, name, d)
		}
	}()
	return func() { (<-start)() }
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// pgStats are cumulative server counters: transactions committed in one
// database and WAL syncs (fsyncs of the log) of the whole server.
type pgStats struct{ commits, walSyncs float64 }

// stats reads the counters of database db; the statistics a backend has
// not reported yet are waited for (backends report at most once a second).
func (e *env) stats(db string) pgStats {
	time.Sleep(1100 * time.Millisecond) // let backends flush their statistics (pgstat's 1 s interval)
	var st pgStats
	conn, err := pgx.Connect(e.ctx, e.server)
	if err != nil {
		return pgStats{math.NaN(), math.NaN()}
	}
	defer conn.Close(e.ctx)
	if err := conn.QueryRow(e.ctx, `SELECT xact_commit::float8 FROM pg_stat_database WHERE datname = $1`, db).Scan(&st.commits); err != nil {
		st.commits = math.NaN()
	}
	if err := conn.QueryRow(e.ctx, `SELECT wal_sync::float8 FROM pg_stat_wal`).Scan(&st.walSyncs); err != nil {
		st.walSyncs = math.NaN()
	}
	return st
}

// recordCPU keeps spent's three parts per operation (ops operations) in r
// and describes them.
func (r *row) recordCPU(spent cpuSplit, ops int) string {
	n := float64(max(ops, 1))
	r.cpuMs = append(r.cpuMs, 1000*spent.service/n)
	r.pgMs = append(r.pgMs, 1000*spent.postgres/n)
	r.clientMs = append(r.clientMs, 1000*spent.client/n)
	return fmt.Sprintf("CPU per operation: service %.1f ms, PostgreSQL %.1f ms, the load's clients %.1f ms",
		1000*spent.service/n, 1000*spent.postgres/n, 1000*spent.client/n)
}

// perOp formats the counters' growth from a to b per operation.
func perOp(a, b pgStats, ops int) string {
	n := float64(max(ops, 1))
	return fmt.Sprintf("%.1f transactions and %.2f WAL syncs per operation", (b.commits-a.commits)/n, (b.walSyncs-a.walSyncs)/n)
}

// masterKey is a fixed 32-byte key in base64 (benchmarks keep no secrets).
func masterKey() string { return "YmVuY2gtbWFzdGVyLWtleS0wMTIzNDU2Nzg5YWJjZGU=" }

func waitHTTP(u string, d time.Duration) error {
	deadline := time.Now().Add(d)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		res, err := c.Get(u)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GET %s: not ready after %s: %v", u, d, err)
		}
		time.Sleep(100 * time.Millisecond) // polling for readiness, with a deadline
	}
}

// p2 runs whole bookings over HTTP in dev mode (P2, P6 dev) and with
// external NATS and simulator (P6 external).
func (e *env) p2() {
	p2 := e.add(&row{id: "P2", measure: fmt.Sprintf("whole bookings over HTTP (reservation + order + charge at the in-process simulator), %d connections, %d shows, vs raw insert TPS at %d clients", clients, p2Shows, clients),
		goal: "≥ 0.08×; p99 reported", goalMin: 0.08, unit: "bookings/s"})
	p6 := e.add(&row{id: "P6", measure: "peak RSS (VmHWM) of `booking serve` under P2 load, dev mode", goal: "≤ 150 MB", goalMax: 150, unit: "MB"})
	p6x := e.add(&row{id: "P6", measure: "peak RSS (VmHWM) of `booking serve` under P2 load, external nats-server and provider-sim", goal: "≤ 100 MB", goalMax: 100, unit: "MB"})
	// The in-process simulator and NATS keep state per booking (as a
	// provider and a stream without limits do): the heap grows in dev
	// mode by design, not with external ones.
	dev, ext := e.addSteadyRows("dev mode", false), e.addSteadyRows("external nats-server and provider-sim", true)
	if err := e.bookings(p2, p6, dev, false); err != nil {
		e.logf("P2: %v", err)
		p2.note, p6.note = "failed: "+err.Error(), "failed: "+err.Error()
	}
	dev.finish()
	x := &row{id: "P6"}
	if err := e.bookings(x, p6x, ext, true); err != nil {
		e.logf("P6 external: %v", err)
		p6x.note = "not measured: " + err.Error()
	} else {
		p6x.note = fmt.Sprintf("bookings/s in this mode: %s (ratio %s)", medRange(x.value, "%.0f"), medRange(x.ratio, "%.3f"))
	}
	ext.finish()
}

// bookings measures P2-style load on a fresh service: per repetition a
// pgbench baseline at 32 clients, then warm-up and the timed window, after
// which the service's collector cycles and heap go to st.
func (e *env) bookings(p2, p6 *row, st *steadyRows, external bool) error {
	s, err := e.startService("p2", external)
	if err != nil {
		return err
	}
	defer s.stop()
	a := newAPI(s.url, clients)
	shows := make([]string, p2Shows)
	for i := range shows {
		if shows[i], err = a.createShow(e.ctx, fmt.Sprintf("bench %d", i), 100_000); err != nil {
			return err
		}
	}
	for rep := range e.o.reps {
		raw, err := e.pgbench(clients, e.o.rawDur)
		if err != nil {
			return err
		}
		s.resetHWM()
		st0 := e.stats(s.db)
		cpu0 := cpuNow(s)
		mode := "dev"
		if external {
			mode = "external"
		}
		profiled := e.profileAfter(s, fmt.Sprintf("p2-%s-rep%d", mode, rep+1), e.o.warm, e.o.dur)
		gc0, gcErr := s.gcCycles()
		loadStart := time.Now()
		res, err := runLoad(e.ctx, clients, e.o.warm, e.o.dur, func(ctx context.Context, w, i int) (int, error) {
			res, r1, err := a.reserve(ctx, shows[i%len(shows)])
			if err != nil {
				return 0, err
			}
			_, r2, err := a.order(ctx, res, uuid.NewString())
			return r1 + r2, err
		})
		spent := cpuNow(s).sub(cpu0)
		cpu := spent.service
		gc1, gcErr1 := s.gcCycles()
		loadTook := time.Since(loadStart)
		profiled()
		if err != nil {
			return err
		}
		heap, heapErr := s.heapAfterGC()
		e.saveHeap(s, fmt.Sprintf("p2-%s-heap-rep%d", mode, rep+1))
		if err := errors.Join(gcErr, gcErr1, heapErr); err != nil {
			e.logf("%s rep %d: the service's collector and heap: %v", p2.id, rep+1, err)
			gc0, gc1, heap = math.NaN(), math.NaN(), heapStats{math.NaN(), math.NaN()}
		}
		st.record(rep+1, res.rate(), 1000*cpu/float64(max(res.total, 1)), (gc1-gc0)/loadTook.Seconds(), heap)
		st1 := e.stats(s.db)
		p2.value = append(p2.value, res.rate())
		p2.base = append(p2.base, raw)
		p2.ratio = append(p2.ratio, res.rate()/raw)
		p2.extra = append(p2.extra, fmt.Sprintf("rep %d: %d bookings in %s, %.0f/s; raw %.0f TPS; p50 %.0f ms, p99 %.0f ms; %d repeats; %s; %s (warm-up included; the service's background work too)",
			rep+1, res.ops, res.elapsed, res.rate(), raw, res.pct(50), res.pct(99), res.repeats, p2.recordCPU(spent, res.total), perOp(st0, st1, res.total)))
		p2.txs = append(p2.txs, (st1.commits-st0.commits)/float64(max(res.total, 1)))
		p2.syncs = append(p2.syncs, (st1.walSyncs-st0.walSyncs)/float64(max(res.total, 1)))
		p6.value = append(p6.value, s.vmHWM())
		e.logf("%s rep %d: %.0f bookings/s, raw %.0f, ratio %.4f, p99 %.0f ms, VmHWM %.0f MB, %.2f collections/s, heap after a forced collection %.1f MB",
			p2.id, rep+1, res.rate(), raw, res.rate()/raw, res.pct(99), s.vmHWM(), (gc1-gc0)/loadTook.Seconds(), heap.inuse/1e6)
	}
	return nil
}

// p2h runs 32 HTTP clients holding seats on one show, each repetition on
// a fresh service (no background work left from the previous one).
func (e *env) p2h() {
	r := e.add(&row{id: "P2h", measure: fmt.Sprintf("hot show: %d HTTP clients holding seats on one show, vs raw insert TPS", clients), goal: "≥ 0.3×", goalMin: 0.3, unit: "holds/s"})
	once := func(rep int) error {
		s, err := e.startService("p2h", false)
		if err != nil {
			return err
		}
		defer s.stop()
		a := newAPI(s.url, clients)
		show, err := a.createShow(e.ctx, fmt.Sprintf("hot %d", rep), 1_000_000)
		if err != nil {
			return err
		}
		raw, err := e.pgbench(clients, e.o.rawDur)
		if err != nil {
			return err
		}
		st0 := e.stats(s.db)
		cpu0 := cpuNow(s)
		profiled := e.profileAfter(s, fmt.Sprintf("p2h-rep%d", rep+1), e.o.warm, e.o.dur)
		res, err := runLoad(e.ctx, clients, e.o.warm, e.o.dur, func(ctx context.Context, w, i int) (int, error) {
			_, rep, err := a.reserve(ctx, show)
			return rep, err
		})
		profiled()
		spent := cpuNow(s).sub(cpu0)
		if err != nil {
			return err
		}
		st1 := e.stats(s.db)
		n := float64(max(res.total, 1))
		r.value, r.base, r.ratio = append(r.value, res.rate()), append(r.base, raw), append(r.ratio, res.rate()/raw)
		r.txs, r.syncs = append(r.txs, (st1.commits-st0.commits)/n), append(r.syncs, (st1.walSyncs-st0.walSyncs)/n)
		r.extra = append(r.extra, fmt.Sprintf("rep %d: %d holds, %.0f/s; raw %.0f TPS; p50 %.0f ms, p99 %.0f ms; %d repeats; %s; %s",
			rep+1, res.ops, res.rate(), raw, res.pct(50), res.pct(99), res.repeats, r.recordCPU(spent, res.total), perOp(st0, st1, res.total)))
		e.logf("P2h rep %d: %.0f holds/s, raw %.0f, ratio %.4f", rep+1, res.rate(), raw, res.rate()/raw)
		return nil
	}
	for rep := range e.o.reps {
		if err := once(rep); err != nil {
			e.logf("P2h: %v", err)
			r.note = "failed: " + err.Error()
			return
		}
	}
}

// p3Slices is how many GET and replay slices each P3 repetition alternates:
// both rates are summed over slices spread across the whole repetition, so a
// drift of the machine (a checkpoint, a neighbour's burst) weighs on both
// instead of on whichever half it fell in.
const p3Slices = 15

// p3 compares replays of one completed order intent with reads of it.
func (e *env) p3() {
	r := e.add(&row{id: "P3", measure: "replay of a completed order intent vs `GET /v1/orders/{id}` of it (32 connections)", goal: "≥ 0.8×", goalMin: 0.8, unit: "replays/s"})
	err := func() error {
		s, err := e.startService("p3", false)
		if err != nil {
			return err
		}
		defer s.stop()
		a := newAPI(s.url, clients)
		show, err := a.createShow(e.ctx, "replay", 100)
		if err != nil {
			return err
		}
		res, _, err := a.reserve(e.ctx, show)
		if err != nil {
			return err
		}
		key := uuid.NewString()
		id, _, err := a.order(e.ctx, res, key)
		if err != nil {
			return err
		}
		get := func(ctx context.Context, w, i int) (int, error) {
			code, out, _, err := a.do(ctx, "GET", "/v1/orders/"+id, a.user, "", nil)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("GET order: status %d: %v", code, out)
			}
			return 0, err
		}
		replay := func(ctx context.Context, w, i int) (int, error) {
			code, out, _, err := a.do(ctx, "POST", "/v1/orders", a.user, key, orderBody(res))
			if err == nil && code != http.StatusCreated {
				err = fmt.Errorf("replay order: status %d: %v", code, out)
			}
			return 0, err
		}
		for rep := range e.o.reps {
			gets, replays, err := e.p3Rep(s, rep, get, replay)
			if err != nil {
				return err
			}
			r.value, r.base, r.ratio = append(r.value, replays.rate()), append(r.base, gets.rate()), append(r.ratio, replays.rate()/gets.rate())
			r.extra = append(r.extra, fmt.Sprintf("rep %d: replays %.0f/s (p50 %.1f ms, p99 %.1f ms); GET %.0f/s (p50 %.1f ms, p99 %.1f ms)",
				rep+1, replays.rate(), replays.pct(50), replays.pct(99), gets.rate(), gets.pct(50), gets.pct(99)))
			e.logf("P3 rep %d: replay %.0f/s, GET %.0f/s, ratio %.3f", rep+1, replays.rate(), gets.rate(), replays.rate()/gets.rate())
		}
		return nil
	}()
	if err != nil {
		e.logf("P3: %v", err)
		r.note = "failed: " + err.Error()
	}
}

// p3Rep runs one P3 repetition: after a warm-up of each, p3Slices slices of
// GET and of replays, each half a window over p3Slices long, in the order
// GET, replay, replay, GET, ... With profiles asked for, a window of each
// (half a window long) runs first, profiled and not counted, so the
// profiler's cost stays out of the ratio.
func (e *env) p3Rep(s *service, rep int, get, replay func(ctx context.Context, w, i int) (int, error)) (gets, replays loadResult, err error) {
	if s.pprof != "" {
		for name, op := range map[string]func(ctx context.Context, w, i int) (int, error){"get": get, "replay": replay} {
			profiled := e.profileAfter(s, fmt.Sprintf("p3-%s-rep%d", name, rep+1), e.o.warm/2, e.o.dur/2)
			_, err := runLoad(e.ctx, clients, e.o.warm/2, e.o.dur/2, op)
			if profiled(); err != nil {
				return gets, replays, err
			}
		}
	}
	slice := e.o.dur / 2 / p3Slices
	for k := range 2 * p3Slices {
		op, sum := get, &gets
		if k%4 == 1 || k%4 == 2 {
			op, sum = replay, &replays
		}
		warm := time.Duration(0)
		if k < 2 {
			warm = e.o.warm / 2
		}
		res, err := runLoad(e.ctx, clients, warm, slice, op)
		if err != nil {
			return gets, replays, err
		}
		sum.add(res)
	}
	return gets, replays, nil
}

// statementsRE is the line the statement-budget tests log: statements, or
// commits (transactions that write), per booking.
var statementsRE = regexp.MustCompile(`(statements|commits) per booking: (request path|whole service) ([0-9.]+)`)

// statementTests finds the statement-budget tests: test functions whose
// name contains "Statement", by package directory (so a package without one
// is not built and run for nothing).
func statementTests() (map[string][]string, error) {
	re := regexp.MustCompile(`(?m)^func (Test\w*Statement\w*)\(t \*testing\.T\)`)
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			dir := "./" + filepath.ToSlash(filepath.Dir(path)) + "/"
			out[dir] = append(out[dir], m[1])
		}
		return nil
	})
	return out, err
}

// p2s runs the statement-budget tests by name and reads the figures they log.
func (e *env) p2s() {
	req := e.add(&row{id: "P2s", measure: "SQL statements per booking, request path (background workers off)", goal: "≤ 8", goalMax: 8, unit: "statements"})
	commits := e.add(&row{id: "P2s", measure: "commits (transactions that write) per booking, request path", goal: "≤ 3", goalMax: 3, unit: "commits"})
	whole := e.add(&row{id: "P2s", measure: "SQL statements per booking, whole service with background jobs, after it settles", goal: "≤ 30", goalMax: 30, unit: "statements"})
	rows := map[string]*row{"statements request path": req, "commits request path": commits, "statements whole service": whole}
	tests, err := statementTests()
	if err != nil {
		e.logf("P2s: %v", err)
	}
	dirs := make([]string, 0, len(tests))
	for d := range tests {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	var failed []string
	for _, d := range dirs {
		name := "p2s-" + strings.Trim(strings.ReplaceAll(d, "/", "-"), ".-")
		out, err := e.goCmd(name, []string{"test", "-count", strconv.Itoa(e.o.reps), "-v", "-run", "^(" + strings.Join(tests[d], "|") + ")$", "-timeout", "20m", d})
		if err != nil {
			e.logf("P2s: %v", err)
			failed = append(failed, filepath.Join(e.o.logDir, name+".log"))
		}
		for _, m := range statementsRE.FindAllStringSubmatch(out, -1) {
			v, _ := strconv.ParseFloat(m[3], 64)
			if r := rows[m[1]+" "+m[2]]; r != nil {
				r.value, r.ratio = append(r.value, v), append(r.ratio, v)
			}
		}
	}
	for key, r := range rows {
		if len(r.value) == 0 {
			what, where, _ := strings.Cut(key, " ")
			r.note = "not measured: no test logged `" + what + " per booking: " + where + " N`"
		}
		if len(failed) > 0 {
			r.note = strings.TrimPrefix(r.note+"; the statement tests failed (see "+strings.Join(failed, ", ")+")", "; ")
		}
	}
}

// p4 runs the rebuild benchmark (x_of_raw_read).
func (e *env) p4() {
	r := e.add(&row{id: "P4", measure: fmt.Sprintf("`booking projections rebuild` of ≥ %d events vs a raw ordered read of the same log", e.o.rebuildEvents), goal: "≥ 0.5×", goalMin: 0.5, unit: "events/s"})
	if !reports("projections", "x_of_raw_read") {
		r.note = "not measured: no BenchmarkRebuild* reports x_of_raw_read yet"
		return
	}
	lines, err := e.goBench("p4-rebuild", "./projections", "^BenchmarkRebuild", "1x", e.o.reps, fmt.Sprintf("BOOKING_BENCH_EVENTS=%d", e.o.rebuildEvents))
	var goCPU []float64
	for _, l := range lines {
		v, ok := l.metrics["x_of_raw_read"]
		if !ok {
			continue
		}
		r.ratio = append(r.ratio, v)
		r.value = append(r.value, l.metrics["rebuild-events/s"])
		r.base = append(r.base, l.metrics["read-events/s"])
		r.extra = append(r.extra, l.name+": "+fmtMetrics(l.metrics))
		if c, ok := l.metrics["go-cpu-us/event"]; ok {
			goCPU = append(goCPU, c)
		}
	}
	if len(goCPU) > 0 && len(r.value) > 0 && median(r.value) > 0 {
		budget := 2 * 1e6 / median(r.value) // CPU µs the two cores give each event at the median rate
		r.extra = append([]string{fmt.Sprintf("where the time goes (medians): the rebuild's own process used %.1f µs of CPU per event of the %.1f µs two cores give each event at its rate; PostgreSQL (the ordered read, COPY and the index builds) had the rest, at most %.1f µs",
			median(goCPU), budget, budget-median(goCPU))}, r.extra...)
	}
	if len(r.ratio) == 0 {
		r.note = "not measured: no BenchmarkRebuild* reports x_of_raw_read yet"
		for _, l := range lines {
			if v, ok := l.metrics["rebuild/read"]; ok {
				r.extra = append(r.extra, fmt.Sprintf("%s (metric rebuild/read %.3f): %s", l.name, v, fmtMetrics(l.metrics)))
			}
		}
		if err != nil {
			r.note += "; " + err.Error()
		}
	}
}

// p5 runs the relay benchmark (relay/raw).
func (e *env) p5() {
	r := e.add(&row{id: "P5", measure: "relay to JetStream vs raw async publish with acks (same embedded server, same run)", goal: "≥ 0.7×", goalMin: 0.7, unit: "events/s"})
	lines, err := e.goBench("p5-relay", "./projections/notify", "^BenchmarkRelay$", "1x", e.o.reps)
	for _, l := range lines {
		v, ok := l.metrics["relay/raw"]
		if !ok {
			continue
		}
		r.ratio, r.value, r.base = append(r.ratio, v), append(r.value, l.metrics["relay-events/s"]), append(r.base, l.metrics["raw-msgs/s"])
	}
	if len(r.ratio) == 0 {
		r.note = "not measured: " + fmt.Sprint(err)
	}
}
