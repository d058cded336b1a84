// Package loadgen runs realistic clients against a running booking service:
// each holds seats and orders them, with client timeouts that lose answers
// after commit, repeats of the same Idempotency-Key until a final answer
// (honouring Retry-After), some declining cards, and some duplicate sends.
// It then checks the promise from outside and prints a report.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
	"github.com/retrysafe/booking/eventstore"
	"golang.org/x/time/rate"
)

// Config is one run of the load generator. URL and SimURL are base URLs
// (scheme, host and port, no trailing slash); Admin is the bearer token that
// creates the run's show and Users the tokens the clients take turns with.
// Durations are wall-clock; rates are shares between 0 and 1.
type Config struct {
	URL         string           // base URL of the API
	SimURL      string           // provider simulator URL, to count charges (empty: skip)
	Admin       string           // bearer token with the admin role
	Users       []string         // bearer tokens of the clients (at least one)
	Clients     int              // concurrent clients (at least 1)
	Orders      int              // orders to attempt in all (at least 1)
	Rate        float64          // most new intents per second, all clients together
	Timeout     time.Duration    // client timeout of one request
	LoseRate    float64          // share of order requests sent with a 50 ms timeout (answer lost after commit)
	DeclineRate float64          // share of orders paid with tok_decline
	DupRate     float64          // share of order requests sent twice at once
	MaxDuration time.Duration    // upper bound on the load (the audit runs after it)
	Settle      time.Duration    // how long the audit waits for the service to settle
	Log         eventstore.Store // the event log the audit reads (nil: the audit is skipped)
	Out         io.Writer        // where the report goes
}

type lgStats struct {
	mu        sync.Mutex
	statuses  map[string]int
	latencies []time.Duration
	confirmed map[string]string // order id -> reservation id
	declined  int
	failures  []string
	retries   int
}

func (s *lgStats) status(op string, code int) {
	s.mu.Lock()
	s.statuses[op+" "+strconv.Itoa(code)]++
	s.mu.Unlock()
}

func (s *lgStats) fail(format string, args ...any) {
	s.mu.Lock()
	s.failures = append(s.failures, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

// Run drives the load described by cfg until every order has a final answer,
// ctx is done or cfg.MaxDuration passed, and writes the report to cfg.Out.
// It blocks. It returns an error if cfg is invalid, the show cannot be
// created, or an invariant is broken.
func Run(ctx context.Context, cfg Config) error {
	c := &cfg
	if c.Clients < 1 || c.Orders < 1 {
		return errors.New("loadgen: --clients and --orders must be at least 1")
	}
	if c.Admin == "" || len(c.Users) == 0 {
		return errors.New("loadgen: needs one admin token and at least one other")
	}
	admin, users := c.Admin, c.Users
	runCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, c.MaxDuration)
	defer cancel()
	client := &http.Client{}

	showBody := map[string]any{"name": "loadgen " + time.Now().UTC().Format(time.RFC3339), "starts_at": time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339),
		"capacity": c.Orders * 2, "price": map[string]any{"amount": 1000, "currency": "EUR"}}
	code, show, err := lgDo(ctx, client, c.Timeout, "POST", c.URL+"/v1/shows", admin, uuid.NewString(), showBody)
	if err != nil || code != http.StatusCreated {
		return fmt.Errorf("loadgen: create show: status %d: %v %v", code, err, show)
	}
	showID, _ := show["id"].(string)

	st := &lgStats{statuses: map[string]int{}, confirmed: map[string]string{}}
	limiter := rate.NewLimiter(rate.Limit(c.Rate), max(1, int(c.Rate/10)))
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := users[i%len(users)]
			for range work {
				if limiter.Wait(ctx) != nil {
					return
				}
				c.oneBooking(ctx, client, st, tok, showID)
			}
		}()
	}
	for i := range c.Orders {
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)

	w := c.Out
	fmt.Fprintf(w, "loadgen: %d bookings by %d clients in %s (%.1f bookings/s)\n", c.Orders, c.Clients, elapsed.Round(time.Millisecond), float64(c.Orders)/elapsed.Seconds())
	keys := make([]string, 0, len(st.statuses))
	for k := range st.statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-28s %d\n", k, st.statuses[k])
	}
	sort.Slice(st.latencies, func(i, j int) bool { return st.latencies[i] < st.latencies[j] })
	if n := len(st.latencies); n > 0 {
		fmt.Fprintf(w, "order latency (answered requests): p50 %s  p95 %s  p99 %s\n",
			st.latencies[n/2].Round(time.Millisecond), st.latencies[n*95/100].Round(time.Millisecond), st.latencies[n*99/100].Round(time.Millisecond))
	}
	fmt.Fprintf(w, "confirmed orders %d, declined %d, repeats sent %d\n", len(st.confirmed), st.declined, st.retries)
	// The audit checks the outcome from outside, once the background work
	// had time to finish: the log, the simulator's charges and the API's
	// availability. Without a log every row says why it was skipped.
	src := audit.Sources{Log: c.Log, SimURL: c.SimURL, APIURL: c.URL, Token: admin}
	var opts audit.Options
	if c.Log == nil {
		opts.Skip = map[audit.Rule]string{}
		for _, r := range audit.Rules {
			opts.Skip[r] = "no event log (--database-url)"
		}
	}
	rep := c.settledAudit(runCtx, src, opts)
	rep.WriteTable(w, 20)
	if len(st.failures) > 0 {
		for _, f := range st.failures {
			fmt.Fprintln(w, "VIOLATION:", f)
		}
		return fmt.Errorf("loadgen: %d client-side violations", len(st.failures))
	}
	return rep.Err()
}

// settledAudit runs the audit until it passes or Settle has passed since
// the load ended (late payment outcomes, refunds and releases land in that
// time), and returns the last report.
func (c *Config) settledAudit(ctx context.Context, src audit.Sources, opts audit.Options) audit.Report {
	deadline := time.Now().Add(c.Settle)
	for {
		rep := audit.Check(ctx, src, opts)
		if rep.OK() || !time.Now().Before(deadline) || ctx.Err() != nil {
			return rep
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// oneBooking holds one seat and orders it, repeating each request with its
// key until a final answer.
func (c *Config) oneBooking(ctx context.Context, client *http.Client, st *lgStats, tok, showID string) {
	resKey := uuid.NewString()
	code, res := c.untilFinal(ctx, client, st, "reserve", "POST", c.URL+"/v1/reservations", tok, resKey,
		map[string]any{"show_id": showID, "quantity": 1}, false)
	if code != http.StatusCreated {
		return
	}
	resID, _ := res["id"].(string)
	payTok := "tok_visa"
	if rand.Float64() < c.DeclineRate {
		payTok = "tok_decline"
	}
	body := map[string]any{"reservation_id": resID, "payment": map[string]any{"token": payTok}}
	orderKey := uuid.NewString()
	if rand.Float64() < c.DupRate {
		go func() { _, _, _ = lgDo(ctx, client, c.Timeout, "POST", c.URL+"/v1/orders", tok, orderKey, body) }()
	}
	code, ord := c.untilFinal(ctx, client, st, "order", "POST", c.URL+"/v1/orders", tok, orderKey, body, true)
	id, _ := ord["id"].(string)
	if id == "" {
		id, _ = ord["order_id"].(string)
	}
	switch code {
	case http.StatusCreated:
		st.mu.Lock()
		if prev, ok := st.confirmed[id]; ok && prev != resID {
			st.failures = append(st.failures, fmt.Sprintf("order %s confirmed for two reservations", id))
		}
		st.confirmed[id] = resID
		st.mu.Unlock()
		if payTok == "tok_decline" {
			st.fail("order %s confirmed with a declining card", id)
		}
	case http.StatusPaymentRequired:
		st.mu.Lock()
		st.declined++
		st.mu.Unlock()
		if payTok != "tok_decline" {
			st.fail("order %s declined with tok_visa", id)
		}
	default:
		st.fail("order for reservation %s ended with status %d", resID, code)
	}
}

// untilFinal repeats a request with the same key until a final answer: it
// retries lost answers, 5xx, 409 in use and 429 (after Retry-After), and
// polls 202s by repeating.
func (c *Config) untilFinal(ctx context.Context, client *http.Client, st *lgStats, op, method, url, tok, key string, body map[string]any, lossy bool) (int, map[string]any) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		timeout := c.Timeout
		if lossy && attempt == 0 && rand.Float64() < c.LoseRate {
			timeout = 50 * time.Millisecond
		}
		t0 := time.Now()
		code, out, err := lgDo(ctx, client, timeout, method, url, tok, key, body)
		if attempt > 0 {
			st.mu.Lock()
			st.retries++
			st.mu.Unlock()
		}
		if err != nil {
			st.status(op, 0)
			continue // the answer was lost: repeat the same intent
		}
		st.status(op, code)
		if op == "order" {
			st.mu.Lock()
			st.latencies = append(st.latencies, time.Since(t0))
			st.mu.Unlock()
		}
		switch {
		case code == http.StatusAccepted || code >= 500 || code == http.StatusTooManyRequests ||
			(code == http.StatusConflict && out["code"] == "idempotency-key-in-use"):
			wait := 200 * time.Millisecond
			if ra, ok := out["_retry_after"].(int); ok && ra > 0 {
				wait = time.Duration(ra) * time.Second
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		default:
			return code, out
		}
	}
	return 0, nil
}

// lgDo sends one JSON request and decodes the JSON answer; Retry-After is
// returned as "_retry_after".
func lgDo(ctx context.Context, client *http.Client, timeout time.Duration, method, url, tok, key string, body map[string]any) (int, map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
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
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		out["_retry_after"] = ra
	}
	return resp.StatusCode, out, nil
}
