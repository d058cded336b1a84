// Package loadgen runs a realistic client population against one or more
// replicas of a running booking service: clients that double-click (the
// same request twice at once), lose answers after commit and repeat them
// with the same Idempotency-Key (draft-ietf-httpapi-idempotency-key-header),
// occasionally send a fresh key for a reservation they already ordered,
// abandon reservations, cancel confirmed orders, order at a hold's
// expires_at, and pay with declining cards. Connection errors are retried
// with exponential backoff on the next target; Retry-After (RFC 9110
// §10.2.3) is honoured. It can toggle faults at the provider simulator
// (POST/DELETE /_sim/faults) while it runs. It then runs the audit
// (package audit) until the service has settled and prints a report:
// status counts, latency percentiles from HDR histograms, client-side
// checks and the audit's table.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/time/rate"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
	"github.com/retrysafe/booking/eventstore"
)

// Fault names accepted in Config.Faults, each a fault of the provider
// simulator's POST /_sim/faults; FaultAll turns on all of them.
const (
	FaultErrorBeforeCommit = "error-before-commit" // error_before_commit_rate = FaultRate: a 500 Stripe does not save
	FaultErrorAfterCommit  = "error-after-commit"  // error_after_commit_rate = FaultRate: executed, then a 500 Stripe saves and replays
	FaultDropAfterCommit   = "drop-after-commit"   // drop_after_commit_rate = FaultRate: executed, then the connection dropped
	FaultWebhookDuplicates = "webhook-duplicates"  // webhook_duplicate_rate = min(1, 4 × FaultRate)
	FaultWebhookReorder    = "webhook-reorder"     // webhook_reorder = true
	FaultLatency           = "latency"             // latency_ms = FaultLatency
	FaultAll               = "all"
)

// The verdicts of a run (Verdict.Result), each with its exit status of
// `booking loadgen`: pass 0, violation 1, inconclusive 3 (2 is a usage
// error).
const (
	VerdictPass         = "pass"
	VerdictViolation    = "violation"
	VerdictInconclusive = "inconclusive"
)

// ErrInconclusive is matched (errors.Is) by Run's error for a run that
// broke no rule but did not exercise what it claims: it confirmed no
// order, confirmed fewer bookings than Config.MinSuccess asks, or an audit
// row had nothing to check. `booking loadgen` exits 3 for it.
var ErrInconclusive = errors.New("loadgen: inconclusive run")

// SetupTimeout is the default of Config.SetupTimeout: how long the run's
// setup (creating its first show) may take before the run fails with the
// last connection error or status, instead of retrying until MaxDuration.
const SetupTimeout = 30 * time.Second

// FaultNames lists the fault names of Config.Faults (without FaultAll).
var FaultNames = []string{FaultErrorBeforeCommit, FaultErrorAfterCommit, FaultDropAfterCommit, FaultWebhookDuplicates, FaultWebhookReorder, FaultLatency}

// Config is one run of the load generator. Targets (or URL, when Targets
// is empty) and SimURL are base URLs (scheme, host and port, no trailing
// slash); Admin is the bearer token that creates the run's shows and Users
// the tokens the clients take turns with. Durations are wall-clock; rates
// are shares between 0 and 1 unless said otherwise.
type Config struct {
	URL          string        // base URL of the API (used when Targets is empty)
	Targets      []string      // base URLs of the replicas; requests go round robin, a connection error moves to the next
	SimURL       string        // provider simulator URL, to count charges and inject faults (empty: neither)
	Admin        string        // bearer token with the admin role
	Users        []string      // bearer tokens of the clients (at least one)
	Clients      int           // concurrent clients (at least 1)
	Orders       int           // bookings to attempt in all (at least 1)
	ShowSize     int           // bookings per show (each show has this many seats); 0 means Orders
	Rate         float64       // most new bookings per second, all clients together (> 0)
	Timeout      time.Duration // client timeout of one request
	LoseRate     float64       // share of order requests sent with a 50 ms timeout (answer lost after commit)
	DeclineRate  float64       // share of orders paid with tok_decline
	DupRate      float64       // share of order requests sent twice at once (a double click)
	FreshRate    float64       // share of orders followed by a second order with a fresh key for the same reservation
	AbandonRate  float64       // share of reservations never ordered (left to expire)
	CancelRate   float64       // share of confirmed orders cancelled
	LateRate     float64       // share of orders sent at the hold's expires_at (if it is at most LateWait away)
	LateWait     time.Duration // longest wait for a late order's expires_at
	Faults       []string      // faults toggled at the simulator (FaultNames, or FaultAll)
	FaultRate    float64       // probability of the rate-based faults while on
	FaultPeriod  time.Duration // faults are on for one period, off for the next, and so on
	FaultLatency time.Duration // added provider latency while the latency fault is on
	FaultMarker  string        // a file another program creates while it injects a fault (a replica killed, the database down): 502–504 meanwhile count as during faults
	MaxDuration  time.Duration // no new booking starts after this
	Drain        time.Duration // how long bookings in flight at MaxDuration may still take
	Settle       time.Duration // how long the audit waits for the service to settle
	SetupTimeout time.Duration // how long creating the first show may take; 0 means SetupTimeout (30 s)
	// MinSuccess is the share (0–1) of the bookings meant to succeed — not
	// abandoned and not paid with a declining card on purpose — that must
	// end confirmed (201) for the run to be conclusive (`booking loadgen
	// --min-success`, default 0.5); 0 sets no floor. A run that confirms
	// no order is inconclusive whatever MinSuccess.
	MinSuccess float64
	Log        eventstore.Store
	// DatabaseURL (read models), NATSURL (stream BOOKING) and
	// IntentRetention are handed to the audit; empty skips their rows.
	DatabaseURL     string
	NATSURL         string
	IntentRetention time.Duration
	Out             io.Writer // where the report goes
	Progress        io.Writer // where the progress bar goes (nil: none)
	ReportFile      string    // write the JSON report here (empty: none)

	targetsFrom string // the flag Targets came from after normalize: --target, or --url when none was given
}

// Summary is the client side of a run, the "loadgen" member of the JSON
// report: counts per outcome (Intended: bookings started that were meant
// to succeed, neither abandoned nor declined on purpose), statuses per
// operation ("order 201"),
// latency percentiles in milliseconds per operation, and client-side
// violations.
type Summary struct {
	Bookings    int                           `json:"bookings"`
	Intended    int                           `json:"meant_to_succeed"`
	Elapsed     float64                       `json:"elapsed_seconds"`
	Reserved    int                           `json:"reserved"`
	SoldOut     int                           `json:"sold_out"`
	Abandoned   int                           `json:"abandoned"`
	Confirmed   int                           `json:"confirmed"`
	Declined    int                           `json:"declined"`
	Cancelled   int                           `json:"cancelled"`
	Late        int                           `json:"late_orders"`
	FreshKeys   int                           `json:"fresh_key_orders"`
	DoubleClick int                           `json:"double_clicks"`
	Lost        int                           `json:"answers_lost"`
	Repeats     int                           `json:"repeats"`
	ConnErrors  int                           `json:"connection_errors"`
	Unfinished  int                           `json:"unfinished"`
	FaultToggle int                           `json:"fault_toggles"`
	Statuses    map[string]int                `json:"statuses"`
	Latency     map[string]map[string]float64 `json:"latency_ms"`
	Violations  []string                      `json:"violations"`
}

type lgStats struct {
	mu        sync.Mutex
	sum       Summary
	hist      map[string]*hdrhistogram.Histogram
	confirmed map[string]string // order id -> reservation id
}

func (s *lgStats) add(f func(*Summary)) {
	s.mu.Lock()
	f(&s.sum)
	s.mu.Unlock()
}

func (s *lgStats) fail(format string, args ...any) {
	s.add(func(m *Summary) { m.Violations = append(m.Violations, fmt.Sprintf(format, args...)) })
}

func (s *lgStats) observe(op string, code int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sum.Statuses[op+" "+strconv.Itoa(code)]++
	if code == 0 {
		return
	}
	h := s.hist[op]
	if h == nil {
		h = hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
		s.hist[op] = h
	}
	_ = h.RecordValue(max(1, d.Microseconds()))
}

// run is the state of one Run.
type run struct {
	c       *Config
	client  *http.Client
	st      *lgStats
	http    *audit.HTTPStats
	next    atomic.Uint64 // round robin over targets
	inFault atomic.Bool
	shows   []showSlot
	// lastConnErr is the error of the latest request that got no answer
	// (a refused connection, a DNS failure), for the setup's error.
	lastConnErr atomic.Pointer[connErr]
}

// connErr is a request that got no answer: where it went and why.
type connErr struct {
	target string
	err    error
}

type showSlot struct {
	once sync.Once
	id   string
	err  error
}

// Run drives the load described by cfg until every booking has a final
// answer, ctx is done or cfg.MaxDuration (plus Drain for bookings in
// flight) passed, runs the audit until it passes or cfg.Settle passed, and
// writes the report to cfg.Out (and cfg.ReportFile). It blocks. It returns
// an error if cfg is invalid, a show cannot be created, or an audit rule
// or client-side check is violated (matching audit.ErrViolations for the
// audit).
func Run(ctx context.Context, cfg Config) error {
	c := &cfg
	if err := c.prepare(); err != nil {
		return err
	}
	r := &run{c: c, client: &http.Client{}, http: &audit.HTTPStats{},
		st:    &lgStats{sum: Summary{Statuses: map[string]int{}}, hist: map[string]*hdrhistogram.Histogram{}, confirmed: map[string]string{}},
		shows: make([]showSlot, (c.Orders+c.ShowSize-1)/c.ShowSize)}
	feedCtx, cancelFeed := context.WithTimeout(ctx, c.MaxDuration)
	defer cancelFeed()
	workCtx, cancelWork := context.WithTimeout(ctx, c.MaxDuration+c.Drain)
	defer cancelWork()
	// Create the first show up front: a run that cannot create one within
	// SetupTimeout fails then, saying why.
	setupCtx, cancelSetup := context.WithTimeout(workCtx, c.SetupTimeout)
	_, err := r.show(setupCtx, 0)
	cancelSetup()
	if err != nil {
		return err
	}

	var faultsDone chan struct{}
	if len(c.Faults) > 0 && c.SimURL != "" {
		faultsDone = make(chan struct{})
		go func() { defer close(faultsDone); r.toggleFaults(feedCtx) }()
	}
	start := time.Now()
	started := r.drive(feedCtx, workCtx)
	cancelFeed()
	if faultsDone != nil {
		<-faultsDone
	}
	r.summarize(started, time.Since(start))
	if c.Out == nil {
		c.Out = io.Discard
	}
	r.writeSummary(c.Out)
	return r.judge(ctx)
}

// prepare fills in the defaults of c (the targets from URL, the show size,
// the late wait, the drain and setup timeouts) and checks it (validate).
func (c *Config) prepare() error {
	c.normalize()
	if err := c.validate(); err != nil {
		return err
	}
	if c.ShowSize <= 0 {
		c.ShowSize = c.Orders
	}
	if c.LateWait <= 0 {
		c.LateWait = 30 * time.Second
	}
	if c.Drain <= 0 {
		c.Drain = time.Minute
	}
	if c.SetupTimeout <= 0 {
		c.SetupTimeout = SetupTimeout
	}
	return nil
}

// drive feeds the bookings to c.Clients clients at c.Rate until all are
// started or feedCtx ends, each booking running until it ends or workCtx
// does, with a progress bar on c.Progress; it returns how many bookings
// started once all have ended.
func (r *run) drive(feedCtx, workCtx context.Context) int64 {
	c := r.c
	var bar *progressbar.ProgressBar
	if c.Progress != nil {
		bar = progressbar.NewOptions(c.Orders, progressbar.OptionSetWriter(c.Progress), progressbar.OptionSetDescription("bookings"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionClearOnFinish())
	}
	limiter := rate.NewLimiter(rate.Limit(c.Rate), max(1, int(c.Rate/10)))
	work := make(chan int)
	var wg sync.WaitGroup
	var started atomic.Int64
	for i := range c.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := c.Users[i%len(c.Users)]
			for n := range work {
				r.oneBooking(workCtx, tok, n)
				if bar != nil {
					_ = bar.Add(1)
				}
			}
		}()
	}
feed:
	for i := range c.Orders {
		if limiter.Wait(feedCtx) != nil {
			break
		}
		select {
		case work <- i:
			started.Add(1)
		case <-feedCtx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if bar != nil {
		_ = bar.Finish()
	}
	return started.Load()
}

// summarize completes the summary: the bookings started, the time they
// took, and the latency quantiles of each operation in milliseconds.
func (r *run) summarize(started int64, elapsed time.Duration) {
	st := r.st
	st.sum.Bookings = int(started)
	st.sum.Elapsed = elapsed.Seconds()
	st.sum.Latency = map[string]map[string]float64{}
	for op, h := range st.hist {
		ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
		st.sum.Latency[op] = map[string]float64{"p50": ms(50), "p90": ms(90), "p99": ms(99), "p99.9": ms(99.9), "max": float64(h.Max()) / 1000, "count": float64(h.TotalCount())}
	}
}

// judge runs the audit until it passes or c.Settle passed (every row but
// HTTP500 skipped without an event log), writes its table, the client-side
// violations and the verdict to c.Out (and the report to c.ReportFile),
// and returns the run's error: the audit's violations, the client-side
// ones, or ErrInconclusive.
func (r *run) judge(ctx context.Context) error {
	c, st := r.c, r.st
	src := audit.Sources{Log: c.Log, SimURL: c.SimURL, APIURL: c.Targets[0], Token: c.Admin, Client: &http.Client{Timeout: 30 * time.Second},
		DatabaseURL: c.DatabaseURL, NATSURL: c.NATSURL, HTTP: r.http}
	opts := audit.Options{IntentRetention: c.IntentRetention}
	if c.Log == nil {
		opts.Skip = map[audit.Rule]string{}
		for _, rule := range audit.Rules {
			if rule != audit.HTTP500 {
				opts.Skip[rule] = "no event log (--database-url)"
			}
		}
	}
	rep := c.settledAudit(ctx, src, opts)
	rep.WriteTable(c.Out, 20)
	for _, f := range st.sum.Violations {
		fmt.Fprintln(c.Out, "VIOLATION: client:", f)
	}
	v := c.verdict(st.sum, rep)
	v.write(c.Out)
	if c.ReportFile != "" {
		if err := writeReport(c.ReportFile, st.sum, rep, v); err != nil {
			return err
		}
	}
	if err := rep.Err(); err != nil {
		return err
	}
	if len(st.sum.Violations) > 0 {
		return fmt.Errorf("loadgen: %d client-side violations", len(st.sum.Violations))
	}
	if v.Result == VerdictInconclusive {
		return fmt.Errorf("%w: %s", ErrInconclusive, strings.Join(v.Reasons, "; "))
	}
	return nil
}

// Verdict is the outcome of a run, the "verdict" member of the JSON report:
// Result is VerdictPass, VerdictViolation (Violations counts the audit's
// and the client-side ones) or VerdictInconclusive, with Reasons saying
// what the run failed to exercise. MinSuccess is the number of confirmed
// bookings the run needed: Config.MinSuccess of Summary.Intended, rounded
// up.
type Verdict struct {
	Result     string   `json:"result"`
	Violations int      `json:"violations"`
	Reasons    []string `json:"reasons"`
	MinSuccess int      `json:"min_success"`
}

// verdict judges a run from its summary and the audit's last report: a
// violation wins; otherwise the run is inconclusive when it confirmed no
// order, confirmed fewer bookings than MinSuccess of those meant to
// succeed, or an audit row checked nothing (audit.Report.Unchecked).
func (c *Config) verdict(sum Summary, rep audit.Report) Verdict {
	share := c.MinSuccess
	v := Verdict{Result: VerdictPass, Reasons: []string{}, Violations: rep.ViolationCount() + len(sum.Violations),
		MinSuccess: int(math.Ceil(share * float64(sum.Intended)))}
	if v.Violations > 0 {
		v.Result = VerdictViolation
		return v
	}
	if sum.Confirmed == 0 {
		v.Reasons = append(v.Reasons, "no order was confirmed")
	} else if sum.Confirmed < v.MinSuccess {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d of the %d bookings meant to succeed confirmed, below --min-success %g (%d)",
			sum.Confirmed, sum.Intended, share, v.MinSuccess))
	}
	for _, rule := range rep.Unchecked() {
		v.Reasons = append(v.Reasons, fmt.Sprintf("audit row %q had nothing to check", rule))
	}
	if len(v.Reasons) > 0 {
		v.Result = VerdictInconclusive
	}
	return v
}

// write prints the verdict's line: "VERDICT: PASS", "VERDICT: VIOLATION
// (n)" or "VERDICT: INCONCLUSIVE: reasons".
func (v Verdict) write(w io.Writer) {
	switch v.Result {
	case VerdictViolation:
		fmt.Fprintf(w, "VERDICT: VIOLATION (%d)\n", v.Violations)
	case VerdictInconclusive:
		fmt.Fprintf(w, "VERDICT: INCONCLUSIVE: %s\n", strings.Join(v.Reasons, "; "))
	default:
		fmt.Fprintln(w, "VERDICT: PASS")
	}
}

// normalize fills Targets from URL when none is given and trims the base
// URLs' trailing slashes.
func (c *Config) normalize() {
	c.targetsFrom = "--target"
	if len(c.Targets) == 0 {
		c.Targets, c.targetsFrom = []string{c.URL}, "--url"
	}
	c.Targets = normalizeURLs(c.Targets)
	c.SimURL = strings.TrimRight(c.SimURL, "/")
}

// CheckFlags checks every field of cfg but the tokens (Admin, Users), so
// a command line can name a bad flag before it looks for tokens. An error
// is a *configerr.Error naming the flag at fault.
func CheckFlags(cfg Config) error {
	cfg.normalize()
	if cfg.Rate == 0 {
		cfg.Rate = 1 // 0 asks the command for a rate derived from the tokens
	}
	return cfg.validateFlags()
}

// validate checks c; an error is a *configerr.Error naming the flag or
// variable at fault (the command exits 2 for it).
func (c *Config) validate() error {
	if err := c.validateFlags(); err != nil {
		return err
	}
	if c.Admin == "" || len(c.Users) == 0 {
		return configerr.New("BOOKING_API_TOKENS", "loadgen needs one admin token and at least one other")
	}
	return nil
}

// validateFlags checks every field of c but the tokens.
func (c *Config) validateFlags() error {
	switch {
	case c.Clients < 1:
		return configerr.New("--clients", "must be at least 1")
	case c.Orders < 1:
		return configerr.New("--orders", "must be at least 1")
	case c.ShowSize < 0:
		return configerr.New("--show-size", "must be 0 (one show for all) or positive")
	case len(c.Targets) == 0 && c.targetsFrom == "--url":
		return configerr.New("--url", "is empty; want the API's base URL, such as http://127.0.0.1:8080 (or give --target)")
	case len(c.Targets) == 0:
		return configerr.New("--target", "is empty; want at least one base URL, such as http://127.0.0.1:8080")
	case !(c.Rate > 0) || math.IsInf(c.Rate, 1): // also refuses NaN
		return configerr.New("--rate", "must be positive: a finite number of bookings per second")
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
		zero bool // whether 0 is accepted (it means the default)
	}{
		{"--timeout", c.Timeout, false}, {"--max-duration", c.MaxDuration, false},
		{"--late-wait", c.LateWait, true}, {"--drain", c.Drain, true}, {"--settle", c.Settle, true},
		{"--fault-latency", c.FaultLatency, true}, {"--intent-retention", c.IntentRetention, true},
	} {
		if d.v < 0 || (d.v == 0 && !d.zero) {
			return configerr.New(d.flag, "must be positive, got %v", d.v)
		}
	}
	for _, t := range c.Targets {
		if err := checkBaseURL(t); err != nil {
			return configerr.New("--target", "%q: %v", t, err)
		}
	}
	if c.SimURL != "" {
		if err := checkBaseURL(c.SimURL); err != nil {
			return configerr.New("--sim-url", "%q: %v", c.SimURL, err)
		}
	}
	for _, r := range []struct {
		flag string
		v    float64
	}{
		{"--lose-rate", c.LoseRate}, {"--decline-rate", c.DeclineRate}, {"--dup-rate", c.DupRate},
		{"--fresh-rate", c.FreshRate}, {"--abandon-rate", c.AbandonRate}, {"--cancel-rate", c.CancelRate},
		{"--late-rate", c.LateRate}, {"--fault-rate", c.FaultRate}, {"--min-success", c.MinSuccess},
	} {
		if !(r.v >= 0 && r.v <= 1) { // also refuses NaN
			return configerr.New(r.flag, "must be between 0 and 1, got %v", r.v)
		}
	}
	for _, f := range c.Faults {
		if f != FaultAll && !contains(FaultNames, f) {
			return configerr.New("--faults", "unknown fault %q (known: %s, %s)", f, strings.Join(FaultNames, ", "), FaultAll)
		}
	}
	if c.FaultPeriod < 0 || (len(c.Faults) > 0 && c.FaultPeriod == 0) {
		return configerr.New("--fault-period", "must be positive")
	}
	return nil
}

// normalizeURLs splits comma-separated base URLs, trims white space and
// trailing slashes ("http://h:8080/" is "http://h:8080"), and drops empty
// ones.
func normalizeURLs(in []string) []string {
	var out []string
	for _, s := range in {
		for _, u := range strings.Split(s, ",") {
			if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
				out = append(out, u)
			}
		}
	}
	return out
}

// checkBaseURL accepts an http or https URL with a host and nothing after
// it but an optional path prefix: the base URL requests are sent under.
func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must be an http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("has no host")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return errors.New("must be a base URL without user, query or fragment")
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// writeReport writes {"loadgen": sum, "audit": rep, "verdict": v, "ok":
// true only for a pass} to path.
func writeReport(path string, sum Summary, rep audit.Report, v Verdict) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"loadgen": sum, "audit": rep, "verdict": v, "ok": v.Result == VerdictPass}); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("loadgen: --report: %w", err)
	}
	return nil
}

func (r *run) writeSummary(w io.Writer) {
	s := &r.st.sum
	fmt.Fprintf(w, "loadgen: %d bookings by %d clients against %d target(s) in %s (%.1f bookings/s)\n",
		s.Bookings, r.c.Clients, len(r.c.Targets), time.Duration(s.Elapsed*float64(time.Second)).Round(time.Millisecond), float64(s.Bookings)/max(s.Elapsed, 0.001))
	keys := make([]string, 0, len(s.Statuses))
	for k := range s.Statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-28s %d\n", k, s.Statuses[k])
	}
	ops := make([]string, 0, len(s.Latency))
	for op := range s.Latency {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	fmt.Fprintln(w, "latency of answered requests (ms, HDR histogram):")
	for _, op := range ops {
		l := s.Latency[op]
		fmt.Fprintf(w, "  %-8s n=%-7.0f p50 %-8.1f p90 %-8.1f p99 %-8.1f p99.9 %-8.1f max %.1f\n", op, l["count"], l["p50"], l["p90"], l["p99"], l["p99.9"], l["max"])
	}
	fmt.Fprintf(w, "reserved %d (sold out %d, abandoned %d); confirmed %d of %d meant to succeed, declined %d, cancelled %d; late orders %d, fresh-key orders %d, double clicks %d\n",
		s.Reserved, s.SoldOut, s.Abandoned, s.Confirmed, s.Intended, s.Declined, s.Cancelled, s.Late, s.FreshKeys, s.DoubleClick)
	fmt.Fprintf(w, "answers lost %d, repeats sent %d, connection errors %d (backed off), unfinished at the end %d, fault toggles %d\n",
		s.Lost, s.Repeats, s.ConnErrors, s.Unfinished, s.FaultToggle)
}

// settledAudit runs the audit until it passes or Settle has passed since
// the load ended (late payment outcomes, refunds and releases land in that
// time), and returns the last report.
func (c *Config) settledAudit(ctx context.Context, src audit.Sources, opts audit.Options) audit.Report {
	deadline := time.Now().Add(c.Settle)
	for {
		src.APIURL = c.liveTarget(ctx)
		rep := audit.Check(ctx, src, opts)
		if rep.OK() || !time.Now().Before(deadline) || ctx.Err() != nil {
			return rep
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// liveTarget returns the first target whose /readyz answers 200 (a replica
// may be down when the audit runs), or the first target if none does.
func (c *Config) liveTarget(ctx context.Context) string {
	client := &http.Client{Timeout: 5 * time.Second}
	for _, t := range c.Targets {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t+"/readyz", nil)
		if err != nil {
			continue
		}
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return t
			}
		}
	}
	return c.Targets[0]
}

// show returns the id of show number n, creating it on first use.
func (r *run) show(ctx context.Context, n int) (string, error) {
	s := &r.shows[n]
	s.once.Do(func() {
		body := map[string]any{"name": fmt.Sprintf("loadgen %s #%d", time.Now().UTC().Format(time.RFC3339), n+1),
			"starts_at": time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339),
			"capacity":  r.c.ShowSize, "price": map[string]any{"amount": 1000, "currency": "EUR"}}
		code, out := r.untilFinal(ctx, "show", "POST", "/v1/shows", r.c.Admin, uuid.NewString(), body, false)
		switch {
		case code == 0:
			why := "no answer"
			if ce := r.lastConnErr.Load(); ce != nil {
				why = fmt.Sprintf("no answer from %s: %v", ce.target, ce.err)
			}
			if ctx.Err() == context.DeadlineExceeded && n == 0 {
				why += fmt.Sprintf(" (gave up after %s)", r.c.SetupTimeout)
			}
			s.err = fmt.Errorf("loadgen: create show: %s", why)
			return
		case code != http.StatusCreated:
			s.err = fmt.Errorf("loadgen: create show: status %d: %v", code, out)
			return
		}
		s.id, _ = out["id"].(string)
	})
	return s.id, s.err
}

// oneBooking is one client's booking n: hold a seat, maybe abandon it,
// maybe wait for its expires_at, order it (maybe twice at once, maybe
// losing the first answer, maybe again with a fresh key), maybe cancel it.
func (r *run) oneBooking(ctx context.Context, tok string, n int) {
	c, st := r.c, r.st
	// What the booking is meant to do is drawn before it starts, so the
	// bookings meant to succeed are counted whatever happens to them.
	abandon, decline := rand.Float64() < c.AbandonRate, rand.Float64() < c.DeclineRate
	if !abandon && !decline {
		st.add(func(s *Summary) { s.Intended++ })
	}
	showID, err := r.show(ctx, n/c.ShowSize)
	if err != nil {
		st.fail("%v", err)
		return
	}
	resID, res, ok := r.reserve(ctx, tok, showID)
	if !ok {
		return
	}
	if abandon {
		st.add(func(s *Summary) { s.Abandoned++ })
		return
	}
	late := rand.Float64() < c.LateRate && r.waitLate(ctx, res)
	payTok := "tok_visa"
	if decline {
		payTok = "tok_decline"
	}
	body := map[string]any{"reservation_id": resID, "payment": map[string]any{"token": payTok}}
	// The double click runs beside the order's own request; the booking
	// waits for it, so its answer is counted before Run reads the stats.
	var doubleClick sync.WaitGroup
	defer doubleClick.Wait()
	code, id, ok := r.order(ctx, tok, resID, payTok, body, late, &doubleClick)
	if !ok {
		return
	}
	if rand.Float64() < c.FreshRate {
		st.add(func(s *Summary) { s.FreshKeys++ })
		code2, ord2 := r.untilFinal(ctx, "order", "POST", "/v1/orders", tok, uuid.NewString(), body, false)
		if id2 := orderID(ord2); (code2 == http.StatusCreated || code2 == http.StatusAccepted) && id2 != "" && id2 != id {
			st.fail("reservation %s: a fresh key made a second order %s beside %s", resID, id2, id)
		}
	}
	if code == http.StatusCreated && rand.Float64() < c.CancelRate {
		r.cancel(ctx, tok, id)
	}
}

// reserve holds a seat of show showID and returns the reservation's id and
// answer; ok is false when the booking ends there (sold out, no final
// answer, or a failure, each counted).
func (r *run) reserve(ctx context.Context, tok, showID string) (id string, res map[string]any, ok bool) {
	st := r.st
	code, res := r.untilFinal(ctx, "reserve", "POST", "/v1/reservations", tok, uuid.NewString(),
		map[string]any{"show_id": showID, "quantity": 1}, false)
	switch {
	case code == http.StatusCreated:
		st.add(func(s *Summary) { s.Reserved++ })
	case code == http.StatusConflict || code == http.StatusUnprocessableEntity:
		st.add(func(s *Summary) { s.SoldOut++ }) // sold out: seats held by others
		return "", nil, false
	case code == 0:
		st.add(func(s *Summary) { s.Unfinished++ })
		return "", nil, false
	default:
		st.fail("reservation on show %s ended with status %d: %v", showID, code, res)
		return "", nil, false
	}
	id, _ = res["id"].(string)
	return id, res, true
}

// waitLate waits for the reservation res's expires_at when that is at most
// c.LateWait away (or until ctx ends) and reports whether it did: the
// order then races the hold's expiry.
func (r *run) waitLate(ctx context.Context, res map[string]any) bool {
	exp, err := time.Parse(time.RFC3339Nano, fmt.Sprint(res["expires_at"]))
	if err != nil || time.Until(exp) > r.c.LateWait {
		return false
	}
	r.st.add(func(s *Summary) { s.Late++ })
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(exp)):
	}
	return true
}

// order orders reservation resID, paid with payTok (body is the request),
// under one key until a final answer (maybe losing the first answer, maybe
// with a double click beside it, run on doubleClick) and checks and counts
// the outcome. It returns the final status and the order's id; ok is false
// when the booking ends there (no final answer, the hold expired first
// when late, or a failure).
func (r *run) order(ctx context.Context, tok, resID, payTok string, body map[string]any, late bool,
	doubleClick *sync.WaitGroup) (code int, id string, ok bool) {
	c, st := r.c, r.st
	orderKey := uuid.NewString()
	if rand.Float64() < c.DupRate {
		st.add(func(s *Summary) { s.DoubleClick++ })
		doubleClick.Go(func() { _, _ = r.send(ctx, "order", "POST", "/v1/orders", tok, orderKey, body, c.Timeout) })
	}
	code, ord := r.untilFinal(ctx, "order", "POST", "/v1/orders", tok, orderKey, body, true)
	id = orderID(ord)
	switch {
	case code == http.StatusCreated:
		st.mu.Lock()
		if prev, ok := st.confirmed[id]; ok && prev != resID {
			st.sum.Violations = append(st.sum.Violations, fmt.Sprintf("order %s confirmed for two reservations", id))
		}
		st.confirmed[id] = resID
		st.sum.Confirmed++
		st.mu.Unlock()
		if payTok == "tok_decline" {
			st.fail("order %s confirmed with a declining card", id)
		}
	case code == http.StatusPaymentRequired:
		st.add(func(s *Summary) { s.Declined++ })
		if payTok != "tok_decline" && len(c.Faults) == 0 {
			st.fail("order %s declined with tok_visa and no fault injected", id)
		}
	case code == 0:
		st.add(func(s *Summary) { s.Unfinished++ })
		return code, id, false
	case late && (code == http.StatusGone || code == http.StatusConflict || code == http.StatusUnprocessableEntity):
		return code, id, false // the hold expired first: a valid outcome of the race at expires_at
	default:
		st.fail("order for reservation %s ended with status %d: %v", resID, code, ord)
		return code, id, false
	}
	return code, id, true
}

// cancel cancels the confirmed order id and counts the outcome.
func (r *run) cancel(ctx context.Context, tok, id string) {
	st := r.st
	ccode, out := r.untilFinal(ctx, "cancel", "POST", "/v1/orders/"+id+"/cancel", tok, uuid.NewString(), nil, false)
	switch ccode {
	case http.StatusOK:
		st.add(func(s *Summary) { s.Cancelled++ })
	case 0:
		st.add(func(s *Summary) { s.Unfinished++ })
	default:
		st.fail("cancel of order %s ended with status %d: %v", id, ccode, out)
	}
}

func orderID(out map[string]any) string {
	if id, _ := out["id"].(string); id != "" {
		return id
	}
	id, _ := out["order_id"].(string)
	return id
}

// untilFinal repeats a request with the same key until a final answer: it
// repeats lost answers at once, backs off (exponentially, on the next
// target) after connection errors, waits out 5xx, 409 in use and 429
// (Retry-After), and polls 202s by repeating. It returns 0 if ctx ends
// first.
func (r *run) untilFinal(ctx context.Context, op, method, path, tok, key string, body map[string]any, lossy bool) (int, map[string]any) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 50*time.Millisecond, 2*time.Second
	for attempt := 0; ctx.Err() == nil; attempt++ {
		timeout := r.c.Timeout
		if lossy && attempt == 0 && rand.Float64() < r.c.LoseRate {
			timeout = 50 * time.Millisecond
		}
		if attempt > 0 {
			r.st.add(func(s *Summary) { s.Repeats++ })
		}
		code, out := r.send(ctx, op, method, path, tok, key, body, timeout)
		var wait time.Duration
		switch {
		case code < 0: // the answer was lost after the request left: repeat the same intent
			r.st.add(func(s *Summary) { s.Lost++ })
			continue
		case code == 0: // no connection: back off, then the next target
			r.st.add(func(s *Summary) { s.ConnErrors++ })
			wait = b.NextBackOff()
		case code == http.StatusAccepted || code >= 500 || code == http.StatusTooManyRequests ||
			(code == http.StatusConflict && out["code"] == "idempotency-key-in-use"):
			b.Reset()
			wait = 200 * time.Millisecond
			if ra, ok := out["_retry_after"].(int); ok && ra > 0 {
				wait = time.Duration(ra) * time.Second
			}
		default:
			return code, out
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return 0, nil
}

// send sends one JSON request to the next target and decodes the JSON
// answer (Retry-After as "_retry_after"). It returns the status, 0 when no
// connection could be made or it broke before an answer, or -1 when the
// client's timeout cut the answer off.
func (r *run) send(ctx context.Context, op, method, path, tok, key string, body map[string]any, timeout time.Duration) (int, map[string]any) {
	target := r.c.Targets[int(r.next.Add(1)%uint64(len(r.c.Targets)))]
	t0 := time.Now()
	code, out, raw, err := do(ctx, r.client, timeout, method, target+path, tok, key, body)
	if err != nil {
		r.st.observe(op, 0, 0)
		var ne net.Error
		if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())) {
			return -1, nil
		}
		if ctx.Err() == nil {
			r.lastConnErr.Store(&connErr{target: target, err: err})
		}
		return 0, nil
	}
	r.st.observe(op, code, time.Since(t0))
	r.http.Record(method, path, code, r.faultOn(), string(raw))
	return code, out
}

// faultOn reports whether a fault is being injected: the simulator's, or
// one announced by the FaultMarker file.
func (r *run) faultOn() bool {
	if r.inFault.Load() {
		return true
	}
	if r.c.FaultMarker == "" {
		return false
	}
	_, err := os.Stat(r.c.FaultMarker)
	return err == nil
}

// do sends one JSON request and decodes the JSON answer.
func do(ctx context.Context, client *http.Client, timeout time.Duration, method, url, tok, key string, body map[string]any) (int, map[string]any, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		out["_retry_after"] = ra
	}
	return resp.StatusCode, out, raw, nil
}

// faultBody is the POST /_sim/faults body of c.Faults.
func (c *Config) faultBody() map[string]any {
	on := func(name string) bool { return contains(c.Faults, name) || contains(c.Faults, FaultAll) }
	f := map[string]any{}
	if on(FaultErrorBeforeCommit) {
		f["error_before_commit_rate"] = c.FaultRate
	}
	if on(FaultErrorAfterCommit) {
		f["error_after_commit_rate"] = c.FaultRate
	}
	if on(FaultDropAfterCommit) {
		f["drop_after_commit_rate"] = c.FaultRate
	}
	if on(FaultWebhookDuplicates) {
		f["webhook_duplicate_rate"] = min(1, 4*c.FaultRate)
	}
	if on(FaultWebhookReorder) {
		f["webhook_reorder"] = true
	}
	if on(FaultLatency) {
		f["latency_ms"] = int(c.FaultLatency / time.Millisecond)
	}
	return f
}

// toggleFaults turns the simulator's faults on for one FaultPeriod and off
// for the next until ctx ends, then off for good.
func (r *run) toggleFaults(ctx context.Context) {
	c := r.c
	set := func(ctx context.Context, on bool) {
		method, body := http.MethodDelete, map[string]any(nil)
		if on {
			method, body = http.MethodPost, c.faultBody()
			r.inFault.Store(true)
		}
		code, out, _, err := do(ctx, r.client, 10*time.Second, method, c.SimURL+"/_sim/faults", "", "", body)
		if (err != nil || code/100 != 2) && ctx.Err() == nil {
			r.st.fail("simulator faults (%s): status %d %v %v", method, code, err, out)
		}
		if !on {
			r.inFault.Store(false)
		}
		r.st.add(func(s *Summary) { s.FaultToggle++ })
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		set(ctx, false)
	}()
	for on := true; ; on = !on {
		set(ctx, on)
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.FaultPeriod):
		}
	}
}
