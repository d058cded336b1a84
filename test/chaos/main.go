// Command chaos is `make chaos`: the scale-out shape of the service under
// load and faults, then the audit. It runs, each as its own process,
// stream BOOKING's external nats-server, the provider simulator
// (`booking provider-sim`) and two `booking serve` replicas sharing one
// PostgreSQL database; drives them with `booking loadgen` against both
// replicas (simulator faults toggled); meanwhile SIGKILLs a random replica
// every --kill-every and restarts it, SIGSTOPs a replica for --pause-for
// twice, and restarts PostgreSQL once (an immediate stop: crash recovery).
// When the load ends every replica runs again, loadgen's audit waits for
// the service to settle and checks every rule, and chaos prints the audit
// table and the counts (events, orders, charges, refunds, kills). It exits
// non-zero on any violation or if a process could not be run.
//
// It needs its own PostgreSQL server, which it restarts:
//
//	test/scripts/pg.sh throwaway -- go run ./test/chaos --duration 2m
//
// (BOOKING_TEST_DATABASE_URL names the server, BOOKING_TEST_PG_CTL
// controls it; `make chaos` does exactly this). See docs/cli.md, "Chaos run".
package main

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Tokens of the run's actors and the simulator's secrets (throwaway values).
const (
	apiTokens     = "alice=chaos-alice-token,bob=chaos-bob-token,carol=chaos-carol-token,admin=chaos-admin-token:admin"
	webhookSecret = "whsec_chaos"
	providerKey   = "sk_chaos"
)

// Windows of the service under chaos: short, so that recovery after a kill
// and the audit's settle time fit a short run.
var serviceWindows = map[string]string{
	"BOOKING_RECOVERY_INTERVAL": "5s",
	"BOOKING_PROVIDER_TIMEOUT":  "3s",
	"BOOKING_PAYMENT_LEASE":     "6s",
	"BOOKING_INTENT_LEASE":      "2s",
	"BOOKING_RESERVATION_HOLD":  "20s",
	"BOOKING_SHUTDOWN_TIMEOUT":  "5s",
}

type options struct {
	duration, killEvery, pauseFor, settle time.Duration
	bin, natsServer, report, workdir      string
	rate                                  float64
	clients                               int
	keep                                  bool
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the load and the faults last")
	flag.DurationVar(&o.killEvery, "kill-every", 30*time.Second, "SIGKILL a random replica this often (then restart it)")
	flag.DurationVar(&o.pauseFor, "pause-for", 10*time.Second, "length of each of the two SIGSTOP pauses (capped at duration/12)")
	flag.DurationVar(&o.settle, "settle", 2*time.Minute, "how long the audit may wait for the service to settle after the load")
	flag.StringVar(&o.bin, "bin", "bin/booking", "the booking binary")
	flag.StringVar(&o.natsServer, "nats-server", "", "the nats-server binary (default: nats-server on PATH, else bin/nats-server)")
	flag.StringVar(&o.report, "report", "", "also write loadgen's JSON report here")
	flag.StringVar(&o.workdir, "workdir", "", "directory for data and logs (default: a new temporary one, removed after a passing run)")
	flag.Float64Var(&o.rate, "rate", 8, "new bookings per second (under the retry budget of 3 users)")
	flag.IntVar(&o.clients, "clients", 12, "concurrent clients")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory after a passing run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &chaos{o: o, out: os.Stdout}
	err := c.run(ctx)
	c.stopAll()
	if err != nil {
		verdict, code := "FAIL", 1
		if errors.Is(err, errInconclusive) {
			verdict, code = "INCONCLUSIVE", 3
		}
		fmt.Fprintf(os.Stderr, "chaos: %s: %v\n", verdict, err)
		if c.dir != "" {
			fmt.Fprintf(os.Stderr, "chaos: logs kept in %s\n", c.dir)
			c.tailLogs()
		}
		os.Exit(code)
	}
	if c.dir != "" && o.workdir == "" && !o.keep {
		_ = os.RemoveAll(c.dir)
	}
	fmt.Fprintln(os.Stdout, "chaos: PASS")
}

// proc is one child process, restartable.
type proc struct {
	name  string
	ready string // URL answering 200 once it is ready (empty: none)
	args  []string
	env   []string
	log   string
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
}

type chaos struct {
	o                     options
	out                   io.Writer
	dir                   string
	dbURL                 string
	procs                 []*proc
	replicas              []*proc
	replicaURLs           []string
	kills, pauses, pgRest int
	mu                    sync.Mutex
}

func (c *chaos) logf(format string, args ...any) {
	fmt.Fprintf(c.out, "chaos %s: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (c *chaos) run(ctx context.Context) error {
	o := c.o
	serverURL, pgCtl := os.Getenv("BOOKING_TEST_DATABASE_URL"), os.Getenv("BOOKING_TEST_PG_CTL")
	if serverURL == "" || pgCtl == "" {
		return errors.New("needs its own PostgreSQL server: run it as `test/scripts/pg.sh throwaway -- chaos ...` (BOOKING_TEST_DATABASE_URL and BOOKING_TEST_PG_CTL unset)")
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("--bin: %w (run `make build`)", err)
	}
	natsBin := o.natsServer
	if natsBin == "" {
		if p, err := exec.LookPath("nats-server"); err == nil {
			natsBin = p
		} else {
			natsBin = "bin/nats-server"
		}
	}
	if _, err := os.Stat(natsBin); err != nil {
		return fmt.Errorf("nats-server: %w (install it, or build it: go build -o bin/nats-server github.com/nats-io/nats-server/v2)", err)
	}
	c.dir = o.workdir
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "booking-chaos-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		return err
	}
	c.logf("work directory %s; duration %s, a SIGKILL every %s, 2 pauses, 1 PostgreSQL restart", c.dir, o.duration, o.killEvery)

	// The database.
	c.dbURL, err = createDB(ctx, serverURL, "booking_chaos")
	if err != nil {
		return err
	}
	base := baseEnv()
	if out, err := c.command(ctx, bin, []string{"migrate"}, append(slices.Clone(base), "DATABASE_URL="+c.dbURL)).CombinedOutput(); err != nil {
		return fmt.Errorf("booking migrate: %v\n%s", err, out)
	}

	// NATS, the simulator, two replicas.
	ports, err := freePorts(7)
	if err != nil {
		return err
	}
	natsAddr, simAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	natsURL, simURL := "nats://"+natsAddr, "http://"+simAddr
	c.replicaURLs = []string{fmt.Sprintf("http://127.0.0.1:%d", ports[2]), fmt.Sprintf("http://127.0.0.1:%d", ports[3])}
	nats := c.add("nats-server", natsBin, []string{"-js", "-sd", filepath.Join(c.dir, "nats"), "-a", "127.0.0.1", "-p", strconv.Itoa(ports[0])}, base)
	if err := c.start(nats); err != nil {
		return err
	}
	if err := waitTCP(ctx, natsAddr, 30*time.Second); err != nil {
		return fmt.Errorf("nats-server: %w", err)
	}
	sim := c.add("provider-sim", bin, []string{"provider-sim"}, append(slices.Clone(base),
		"BOOKING_PROVIDER_SIM_ADDR="+simAddr, "BOOKING_PROVIDER_WEBHOOK_URL="+c.replicaURLs[0]+"/v1/provider/webhooks",
		"BOOKING_PROVIDER_WEBHOOK_SECRET="+webhookSecret, "BOOKING_PROVIDER_SIM_API_KEY="+providerKey,
		"BOOKING_DATA_DIR="+filepath.Join(c.dir, "sim")))
	if err := c.start(sim); err != nil {
		return err
	}
	if err := waitHTTP(ctx, simURL+"/healthz", 30*time.Second); err != nil {
		return fmt.Errorf("provider-sim: %w", err)
	}
	masterKey := make([]byte, 32)
	_, _ = crand.Read(masterKey)
	for i, u := range c.replicaURLs {
		env := append(slices.Clone(base), "DATABASE_URL="+c.dbURL, "BOOKING_HTTP_ADDR="+strings.TrimPrefix(u, "http://"),
			"BOOKING_NATS_URL="+natsURL, "BOOKING_PROVIDER_URL="+simURL, "BOOKING_PROVIDER_WEBHOOK_SECRET="+webhookSecret,
			"BOOKING_STRIPE_SECRET_KEY="+providerKey, "BOOKING_MASTER_KEYS=chaos-1:"+base64.StdEncoding.EncodeToString(masterKey),
			"BOOKING_API_TOKENS="+apiTokens, "BOOKING_DATA_DIR="+filepath.Join(c.dir, fmt.Sprintf("replica-%d", i+1)),
			"BOOKING_PROVIDER_SIM_ADDR=127.0.0.1:"+strconv.Itoa(ports[4]), "BOOKING_ADMIN_ADDR=127.0.0.1:"+strconv.Itoa(ports[5+i]))
		for k, v := range serviceWindows {
			env = append(env, k+"="+v)
		}
		r := c.add(fmt.Sprintf("replica-%d", i+1), bin, []string{"serve"}, env)
		r.ready = u + "/readyz"
		c.replicas = append(c.replicas, r)
		if err := c.startReady(ctx, r); err != nil {
			return err
		}
	}
	c.logf("nats-server %s, provider-sim %s, replicas %s", natsURL, simURL, strings.Join(c.replicaURLs, " "))

	// The load, and the faults meanwhile.
	report := o.report
	if report == "" {
		report = filepath.Join(c.dir, "report.json")
	}
	lgArgs := []string{"loadgen", "--sim-url", simURL, "--tokens", apiTokens, "--orders", "10000000",
		"--clients", strconv.Itoa(o.clients), "--rate", strconv.FormatFloat(o.rate, 'f', -1, 64), "--show-size", "150",
		"--max-duration", o.duration.String(), "--drain", "90s", "--timeout", "5s", "--settle", o.settle.String(),
		"--faults", "all", "--fault-period", "20s", "--fault-rate", "0.05",
		"--database-url", c.dbURL, "--nats-url", natsURL, "--report", report, "--no-progress", "--fault-marker", c.marker(),
		"--payment-lease", serviceWindows["BOOKING_PAYMENT_LEASE"], "--recovery-interval", serviceWindows["BOOKING_RECOVERY_INTERVAL"]}
	for _, u := range c.replicaURLs {
		lgArgs = append(lgArgs, "--target", u)
	}
	lg := c.command(ctx, bin, lgArgs, base)
	lg.Stdout, lg.Stderr = io.MultiWriter(c.out, logFile(filepath.Join(c.dir, "logs", "loadgen.log"))), os.Stderr
	if err := lg.Start(); err != nil {
		return fmt.Errorf("booking loadgen: %w", err)
	}
	lgDone := make(chan error, 1)
	go func() { lgDone <- lg.Wait() }()
	faultErr := c.faults(ctx, pgCtl)
	// Every replica runs again for the settle and the audit.
	for _, r := range c.replicas {
		if !r.running() {
			if err := c.startReady(ctx, r); err != nil {
				return err
			}
		}
	}
	if faultErr != nil {
		_ = lg.Process.Kill()
		<-lgDone
		return faultErr
	}
	c.logf("faults over (%d kills, %d pauses, %d PostgreSQL restarts); waiting for loadgen's drain, settle and audit", c.kills, c.pauses, c.pgRest)
	lgErr := <-lgDone
	return c.summary(report, lgErr)
}

// faults runs the fault schedule until the load's duration has passed: a
// SIGKILL of a random replica every killEvery (restarted 1–3 s later),
// SIGSTOP pauses at 25 % and 65 % of the run, a PostgreSQL restart at 45 %.
func (c *chaos) faults(ctx context.Context, pgCtl string) error {
	o := c.o
	start := time.Now()
	end := start.Add(o.duration)
	pauseFor := min(o.pauseFor, o.duration/12)
	type event struct {
		at   time.Duration
		what string
	}
	var plan []event
	for t := o.killEvery; t < o.duration; t += o.killEvery {
		plan = append(plan, event{t, "kill"})
	}
	plan = append(plan, event{o.duration / 4, "pause"}, event{o.duration * 65 / 100, "pause"}, event{o.duration * 45 / 100, "pg"})
	sortEvents := func() {
		for i := 1; i < len(plan); i++ {
			for j := i; j > 0 && plan[j].at < plan[j-1].at; j-- {
				plan[j], plan[j-1] = plan[j-1], plan[j]
			}
		}
	}
	sortEvents()
	for _, ev := range plan {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(start.Add(ev.at))):
		}
		if time.Now().After(end) {
			break
		}
		c.faultOn(true)
		switch ev.what {
		case "kill":
			r := c.replicas[rand.IntN(len(c.replicas))]
			if !r.running() {
				return fmt.Errorf("%s is not running at the kill", r.name)
			}
			c.logf("SIGKILL %s", r.name)
			r.signal(syscall.SIGKILL)
			r.wait(10 * time.Second)
			c.mu.Lock()
			c.kills++
			c.mu.Unlock()
			time.Sleep(time.Duration(1000+rand.IntN(2000)) * time.Millisecond) // the outage before the restart, part of the fault
			if err := c.startReady(ctx, r); err != nil {
				return err
			}
		case "pause":
			r := c.replicas[rand.IntN(len(c.replicas))]
			if !r.running() {
				return fmt.Errorf("%s is not running at the pause", r.name)
			}
			c.logf("SIGSTOP %s for %s", r.name, pauseFor)
			r.signal(syscall.SIGSTOP)
			time.Sleep(pauseFor) // the pause itself is the fault
			r.signal(syscall.SIGCONT)
			c.logf("SIGCONT %s", r.name)
			c.pauses++
		case "pg":
			c.logf("PostgreSQL: immediate stop (crash), then start")
			if out, err := exec.CommandContext(ctx, pgCtl, "stop", "immediate").CombinedOutput(); err != nil {
				return fmt.Errorf("stop PostgreSQL: %v\n%s", err, out)
			}
			time.Sleep(2 * time.Second) // the outage, part of the fault
			if out, err := exec.CommandContext(ctx, pgCtl, "start").CombinedOutput(); err != nil {
				return fmt.Errorf("start PostgreSQL: %v\n%s", err, out)
			}
			c.pgRest++
			c.logf("PostgreSQL running again")
		}
		c.faultOn(false)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(end)):
	}
	return nil
}

// marker is the file that exists while a fault is injected (loadgen's
// --fault-marker).
func (c *chaos) marker() string { return filepath.Join(c.dir, "fault-on") }

// faultOn creates or removes the marker file.
func (c *chaos) faultOn(on bool) {
	if on {
		_ = os.WriteFile(c.marker(), nil, 0o644)
		return
	}
	_ = os.Remove(c.marker())
}

// errInconclusive is matched by the error of a run whose load broke no
// rule but proved nothing (loadgen's verdict "inconclusive": no order
// confirmed, too few, or an audit row with nothing to check); chaos exits
// 3 for it, as `booking loadgen` does.
var errInconclusive = errors.New("inconclusive")

// summary reads loadgen's JSON report, prints the counts and returns an
// error if loadgen failed or the report says so; one matching
// errInconclusive when its verdict is inconclusive.
func (c *chaos) summary(report string, lgErr error) error {
	raw, err := os.ReadFile(report)
	if err != nil {
		return fmt.Errorf("booking loadgen wrote no report (%v): %v", lgErr, err)
	}
	var r struct {
		OK      bool `json:"ok"`
		Verdict struct {
			Result  string   `json:"result"`
			Reasons []string `json:"reasons"`
		} `json:"verdict"`
		Loadgen struct {
			Bookings   int      `json:"bookings"`
			Confirmed  int      `json:"confirmed"`
			Cancelled  int      `json:"cancelled"`
			ConnErrors int      `json:"connection_errors"`
			Violations []string `json:"violations"`
		} `json:"loadgen"`
		Audit struct {
			Events           int         `json:"events"`
			Shows            int         `json:"shows"`
			Orders           int         `json:"orders"`
			Confirmed        int         `json:"confirmed"`
			Cancelled        int         `json:"cancelled"`
			Failed           int         `json:"failed"`
			Charges          int         `json:"charges"`
			SucceededCharges int         `json:"succeeded_charges"`
			Refunds          int         `json:"refunds"`
			Published        int         `json:"published"`
			Messages         int         `json:"nats_messages"`
			Requests         int         `json:"requests"`
			Gateway          map[int]int `json:"gateway_errors"`
			Rows             []struct {
				Rule       string   `json:"rule"`
				Checked    int      `json:"checked"`
				Unit       string   `json:"unit"`
				Violations []string `json:"violations"`
				Skipped    string   `json:"skipped"`
			} `json:"rows"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("loadgen's report %s: %w", report, err)
	}
	a := r.Audit
	fmt.Fprintf(c.out, "\n==> chaos: %s, %d SIGKILLs (each replica restarted), %d SIGSTOP pauses, %d PostgreSQL restarts\n",
		c.o.duration, c.kills, c.pauses, c.pgRest)
	fmt.Fprintf(c.out, "==> counts: %d events, %d shows, %d orders (%d confirmed, %d cancelled, %d failed), %d charges (%d succeeded), %d refunds, %d of %d publishable events in NATS, %d client requests, 502–504: %s\n",
		a.Events, a.Shows, a.Orders, a.Confirmed, a.Cancelled, a.Failed, a.Charges, a.SucceededCharges, a.Refunds, a.Messages, a.Published, a.Requests, gatewayCounts(a.Gateway))
	fmt.Fprintln(c.out, "==> audit:")
	violations := len(r.Loadgen.Violations)
	for _, row := range a.Rows {
		verdict := "OK"
		switch {
		case row.Skipped != "":
			verdict = "SKIPPED: " + row.Skipped
		case len(row.Violations) > 0:
			verdict = fmt.Sprintf("%d VIOLATION(S)", len(row.Violations))
		}
		violations += len(row.Violations)
		fmt.Fprintf(c.out, "    %-34s %8d %-36s %s\n", row.Rule, row.Checked, row.Unit+" checked", verdict)
	}
	fmt.Fprintf(c.out, "==> %d violation(s); loadgen's verdict: %s %s\n", violations, r.Verdict.Result, strings.Join(r.Verdict.Reasons, "; "))
	switch {
	case violations == 0 && r.Verdict.Result == "inconclusive":
		return fmt.Errorf("%w: %s", errInconclusive, strings.Join(r.Verdict.Reasons, "; "))
	case r.Verdict.Result != "pass" && violations == 0:
		return fmt.Errorf("booking loadgen: verdict %q (exit status: %v)", r.Verdict.Result, lgErr)
	case lgErr != nil:
		return fmt.Errorf("booking loadgen: %v (%d violations)", lgErr, violations)
	case !r.OK || violations > 0:
		return fmt.Errorf("%d violations", violations)
	}
	for _, row := range a.Rows {
		if row.Skipped != "" || row.Checked == 0 {
			return fmt.Errorf("%w: audit row %q was not checked (%s)", errInconclusive, row.Rule, row.Skipped)
		}
	}
	if c.kills == 0 && c.o.duration >= c.o.killEvery {
		return errors.New("no replica was killed")
	}
	return nil
}

// baseEnv is this process's environment without BOOKING_* and DATABASE_URL.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BOOKING_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	return env
}

func (c *chaos) command(ctx context.Context, bin string, args, env []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

func (c *chaos) add(name, bin string, args, env []string) *proc {
	p := &proc{name: name, args: append([]string{bin}, args...), env: env, log: filepath.Join(c.dir, "logs", name+".log")}
	c.procs = append(c.procs, p)
	return p
}

// start starts p (again), its output appended to its log.
func (c *chaos) start(p *proc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== chaos %s: start\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.env, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// startReady starts p and waits up to 2 minutes for p.ready to answer 200;
// it fails if p exits meanwhile (a port taken, a bad variable).
func (c *chaos) startReady(ctx context.Context, p *proc) error {
	if err := c.start(p); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if !p.running() {
			return fmt.Errorf("%s exited at start (see %s)", p.name, p.log)
		}
		if res, err := client.Get(p.ready); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %s not ready after 2m", p.name, p.ready)
		}
		time.Sleep(100 * time.Millisecond) // polling for readiness, with a deadline
	}
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// stopAll stops every child: SIGCONT (a paused one), SIGTERM, and SIGKILL
// after 10 s.
func (c *chaos) stopAll() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if !p.running() {
			continue
		}
		p.signal(syscall.SIGCONT)
		p.signal(syscall.SIGTERM)
		if !p.wait(10 * time.Second) {
			p.signal(syscall.SIGKILL)
			p.wait(5 * time.Second)
		}
	}
}

// tailLogs prints the last lines of every log.
func (c *chaos) tailLogs() {
	for _, p := range c.procs {
		raw, err := os.ReadFile(p.log)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		fmt.Fprintf(os.Stderr, "--- last lines of %s:\n%s\n", p.log, strings.Join(lines, "\n"))
	}
}

// logFile creates path, or returns io.Discard if it cannot.
func logFile(path string) io.Writer {
	f, err := os.Create(path)
	if err != nil {
		return io.Discard
	}
	return f
}

// createDB creates database name on the server of serverURL and returns its URL.
func createDB(ctx context.Context, serverURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("PostgreSQL: create database %s: %w", name, err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// freePorts returns n distinct free TCP ports of 127.0.0.1 below the
// kernel's ephemeral range (32768–60999), so an outgoing connection cannot
// take one between this check and the listen.
func freePorts(n int) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for tries := 0; len(out) < n && tries < 1000; tries++ {
		p := 20000 + rand.IntN(12000)
		if seen[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		seen[p] = true
		out = append(out, p)
	}
	if len(out) < n {
		return nil, errors.New("no free ports")
	}
	return out, nil
}

func waitTCP(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not listening after %s: %v", addr, d, err)
		}
		time.Sleep(100 * time.Millisecond) // polling for the port, with a deadline
	}
}

func waitHTTP(ctx context.Context, u string, d time.Duration) error {
	deadline := time.Now().Add(d)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		res, err := client.Get(u)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("GET %s: not ready after %s: %v", u, d, err)
		}
		time.Sleep(100 * time.Millisecond) // polling for readiness, with a deadline
	}
}

// gatewayCounts prints the 502–504 answers by status as "503: 70, 504: 2",
// in status order, or "none".
func gatewayCounts(g map[int]int) string {
	if len(g) == 0 {
		return "none"
	}
	codes := make([]int, 0, len(g))
	for c := range g {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d: %d", c, g[c])
	}
	return strings.Join(parts, ", ")
}
