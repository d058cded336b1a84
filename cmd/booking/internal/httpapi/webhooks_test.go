package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// fakeReceiver records what the webhook route hands to the commands layer,
// and reports appended events (or an ignored event) as the commands layer
// does. headerErr answers CheckWebhookHeader; err answers ReceiveWebhook,
// which first waits for gate when it is set (arrived gets a value then).
// Safe for concurrent use.
type fakeReceiver struct {
	headerErr error
	err       error
	appends   int
	ignored   bool
	gate      chan struct{}
	arrived   chan struct{}

	mu        sync.Mutex
	checks    int
	calls     int
	signature string
	body      []byte
}

func (f *fakeReceiver) CheckWebhookHeader(_ context.Context, signature string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks++
	if signature == "" {
		return commands.ErrWebhookSignature
	}
	return f.headerErr
}

func (f *fakeReceiver) ReceiveWebhook(ctx context.Context, signature string, body []byte) error {
	f.mu.Lock()
	f.calls++
	f.signature, f.body = signature, body
	f.mu.Unlock()
	if r := commands.WebhookReportFrom(ctx); r != nil {
		r.AddAppended(f.appends)
		if f.ignored {
			r.MarkIgnored()
		}
	}
	if f.gate != nil {
		select {
		case f.arrived <- struct{}{}:
		default: // nobody waits for more arrivals
		}
		<-f.gate
	}
	return f.err
}

// counts returns the header checks and the receives so far.
func (f *fakeReceiver) counts() (checks, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checks, f.calls
}

// results counts the webhook results the route reports. Safe for
// concurrent use.
type results struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *results) observe(result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[result]++
}

func (r *results) get(result string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[result]
}

// lineCounter is a slog handler that counts warnings by message and keeps
// the attributes of the last one. Safe for concurrent use.
type lineCounter struct {
	mu    sync.Mutex
	lines map[string]int
	last  map[string]string
}

func (c *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *lineCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *lineCounter) WithGroup(string) slog.Handler            { return c }
func (c *lineCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lines == nil {
		c.lines = map[string]int{}
	}
	c.lines[r.Message]++
	c.last = map[string]string{}
	r.Attrs(func(a slog.Attr) bool { c.last[a.Key] = a.Value.String(); return true })
	return nil
}

func (c *lineCounter) count(msg string) (int, map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines[msg], c.last
}

// webhookServer serves the API's routes over loopback with the webhook
// route on recv and budget b, its results into res and its warnings
// counted by logs.
func webhookServer(t *testing.T, recv webhookReceiver, b webhookBudget) (*httptest.Server, *results, *lineCounter) {
	t.Helper()
	logs, res := &lineCounter{}, &results{}
	a := &api{log: slog.New(logs), observeWebhook: res.observe}
	a.webhooks = newWebhookHandler(a, recv, b)
	srv := httptest.NewServer(a.routes())
	t.Cleanup(srv.Close)
	return srv, res, logs
}

// post posts body with signature sig (none when empty) to the webhook
// route at url and returns the status and the answer's body.
func post(url, sig string, body []byte) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/provider/webhooks", bytes.NewReader(body))
	if sig != "" {
		req.Header.Set("Stripe-Signature", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got), nil
}

// postWebhook is post that stops the test on a failed request.
func postWebhook(t *testing.T, url, sig string, body []byte) (int, string) {
	t.Helper()
	status, got, err := post(url, sig, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, got
}

func TestWebhookRoute(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1", "type":"payment_intent.succeeded" ,"data":{"object":{"id":"pi_1"}}}` + "\n")
	tests := []struct {
		name       string
		err        error
		appends    int
		ignored    bool
		wantStatus int
		wantCode   string
		wantResult string
	}{
		{name: "A recorded notice is answered 204, accepted.", appends: 2, wantStatus: http.StatusNoContent, wantResult: WebhookAccepted},
		{name: "A notice with nothing new is answered 204, a duplicate.", wantStatus: http.StatusNoContent, wantResult: WebhookDuplicate},
		{name: "An event not about a payment of this deployment is answered 204, ignored.", ignored: true, wantStatus: http.StatusNoContent, wantResult: WebhookIgnored},
		{name: "A bad signature is answered 400.", err: commands.ErrWebhookSignature, wantStatus: http.StatusBadRequest, wantCode: "invalid-signature", wantResult: WebhookBadSignature},
		{name: "A stale timestamp is answered 400.", err: commands.ErrWebhookStale, wantStatus: http.StatusBadRequest, wantCode: "stale-signature", wantResult: WebhookBadSignature},
		{name: "A malformed event is answered 400.", err: commands.ErrWebhookMalformed, wantStatus: http.StatusBadRequest, wantCode: "malformed-event", wantResult: WebhookInvalid},
		{name: "A payment of an order not known yet is answered 404, so the provider redelivers.", err: domain.ErrOrderNotFound, wantStatus: http.StatusNotFound, wantCode: "order-not-found", wantResult: WebhookUnknownOrder},
		{name: "A provider that cannot be reached is answered 503.", err: domain.ErrUnavailable, wantStatus: http.StatusServiceUnavailable, wantCode: "unavailable", wantResult: WebhookFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			recv := &fakeReceiver{err: tt.err, appends: tt.appends, ignored: tt.ignored}
			srv, res, _ := webhookServer(t, recv, webhookBudget{})
			status, got := postWebhook(t, srv.URL, "t=1,v1=ab", body)
			if status != tt.wantStatus {
				t.Fatalf("POST /v1/provider/webhooks = %d %s, want %d", status, got, tt.wantStatus)
			}
			if tt.wantCode != "" && !strings.Contains(got, `"code":"`+tt.wantCode+`"`) {
				t.Errorf("problem %s, want code %s", got, tt.wantCode)
			}
			if recv.calls != 1 || !bytes.Equal(recv.body, body) || recv.signature != "t=1,v1=ab" {
				t.Errorf("receiver got %d calls, body %q, signature %q; want the raw bytes and header once", recv.calls, recv.body, recv.signature)
			}
			if n := res.get(tt.wantResult); n != 1 || len(res.n) != 1 {
				t.Errorf("results %v, want %s once", res.n, tt.wantResult)
			}
		})
	}
}

// rawPost opens a connection to srv, sends a webhook's request line and
// headers (extra lines included, each ending in \r\n) and no body, and
// returns the connection and a reader of it.
func rawPost(t *testing.T, srv *httptest.Server, extra string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/provider/webhooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n", extra)
	return conn, bufio.NewReader(conn)
}

// readAnswer reads one answer from br within 10 s (the route never waits
// that long for a body it does not read) and returns its status and body.
func readAnswer(t *testing.T, conn net.Conn, br *bufio.Reader) (int, string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestWebhookRoute_RefusesABadHeaderBeforeTheBody: a missing, malformed or
// stale Stripe-Signature is answered 400 while the body (announced, never
// sent) has not been read, and nothing reaches ReceiveWebhook.
func TestWebhookRoute_RefusesABadHeaderBeforeTheBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, header string
		err          error
		code         string
	}{
		{"missing", "", commands.ErrWebhookSignature, "invalid-signature"},
		{"malformed", "Stripe-Signature: v1=ab\r\n", commands.ErrWebhookSignature, "invalid-signature"},
		{"stale", "Stripe-Signature: t=1,v1=ab\r\n", commands.ErrWebhookStale, "stale-signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recv := &fakeReceiver{headerErr: tc.err}
			srv, res, _ := webhookServer(t, recv, webhookBudget{})
			conn, br := rawPost(t, srv, tc.header+"Content-Length: 1000\r\n")
			status, body := readAnswer(t, conn, br)
			if status != http.StatusBadRequest || !strings.Contains(body, `"code":"`+tc.code+`"`) {
				t.Fatalf("answer = %d %s, want 400 %s", status, body, tc.code)
			}
			if checks, calls := recv.counts(); checks != 1 || calls != 0 {
				t.Errorf("header checks %d, receives %d; want 1 and 0", checks, calls)
			}
			if n := res.get(WebhookBadSignature); n != 1 {
				t.Errorf("bad_signature counted %d, want 1", n)
			}
		})
	}
}

// TestWebhookRoute_RefusesAnOversizedBody: a Content-Length over 64 KiB is
// answered 413 before any of the body is read; a chunked body is cut at
// 64 KiB: 413, and the connection closes long before the sender could
// write all of it. Nothing reaches ReceiveWebhook.
func TestWebhookRoute_RefusesAnOversizedBody(t *testing.T) {
	t.Parallel()
	const sig = "Stripe-Signature: t=1,v1=ab\r\n"
	t.Run("Content-Length", func(t *testing.T) {
		t.Parallel()
		recv := &fakeReceiver{}
		srv, res, _ := webhookServer(t, recv, webhookBudget{})
		conn, br := rawPost(t, srv, sig+fmt.Sprintf("Content-Length: %d\r\n", 10<<20))
		if status, body := readAnswer(t, conn, br); status != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"code":"body-too-large"`) {
			t.Fatalf("answer = %d %s, want 413 body-too-large", status, body)
		}
		if _, calls := recv.counts(); calls != 0 || res.get(WebhookInvalid) != 1 {
			t.Errorf("receives %d, invalid counted %d; want 0 and 1", calls, res.get(WebhookInvalid))
		}
	})
	t.Run("chunked", func(t *testing.T) {
		t.Parallel()
		recv := &fakeReceiver{}
		srv, res, _ := webhookServer(t, recv, webhookBudget{})
		conn, br := rawPost(t, srv, sig+"Transfer-Encoding: chunked\r\n")
		const total = 256 << 20 // far more than loopback's socket buffers hold
		var written atomic.Int64
		wrote := make(chan error, 1)
		go func() {
			chunk := fmt.Appendf(nil, "%x\r\n%s\r\n", 16<<10, bytes.Repeat([]byte{' '}, 16<<10))
			for written.Load() < total {
				if _, err := conn.Write(chunk); err != nil {
					wrote <- err
					return
				}
				written.Add(16 << 10)
			}
			wrote <- nil
		}()
		if status, body := readAnswer(t, conn, br); status != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"code":"body-too-large"`) {
			t.Fatalf("answer = %d %s, want 413 body-too-large", status, body)
		}
		conn.Close() // the writer, blocked once the buffers filled, fails now
		if err := <-wrote; err == nil {
			t.Fatalf("the whole %d-byte body was written: the server read it all", total)
		}
		if _, calls := recv.counts(); calls != 0 || res.get(WebhookInvalid) != 1 {
			t.Errorf("receives %d, invalid counted %d; want 0 and 1", calls, res.get(WebhookInvalid))
		}
		t.Logf("%d bytes written when the 413 arrived", written.Load())
	})
}

// TestWebhookRoute_FloodOfBadSignatures: 200 badly signed notifications
// from 8 connections, 20 of them refused on their header already: every
// one is answered 400, counted as bad_signature, and logged in one line;
// once the interval has passed, the next refusal writes the second line,
// which counts the 199 left out.
func TestWebhookRoute_FloodOfBadSignatures(t *testing.T) {
	t.Parallel()
	const flood, senders = 200, 8
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	recv := &fakeReceiver{err: commands.ErrWebhookSignature}
	srv, res, logs := webhookServer(t, recv, webhookBudget{now: clock})
	body := []byte(`{"id":"evt_forged","type":"payment_intent.succeeded"}`)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for s := range senders {
		wg.Go(func() {
			for i := s; i < flood; i += senders {
				sig := "t=1,v1=00"
				if i%10 == 0 {
					sig = "" // refused on the header
				}
				if status, _, err := post(srv.URL, sig, body); err != nil || status != http.StatusBadRequest {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d forged notifications were not answered 400", bad.Load(), flood)
	}
	if n := res.get(WebhookBadSignature); n != flood {
		t.Errorf("bad_signature counted %d, want %d", n, flood)
	}
	if n, _ := logs.count("provider webhook refused"); n != 1 {
		t.Errorf("%d log lines for %d refusals within one interval, want 1", n, flood)
	}
	mu.Lock()
	now = now.Add(refusalLogEvery)
	mu.Unlock()
	if status, _ := postWebhook(t, srv.URL, "t=1,v1=00", body); status != http.StatusBadRequest {
		t.Fatalf("forged notification after the interval = %d, want 400", status)
	}
	n, last := logs.count("provider webhook refused")
	if n != 2 || last["suppressed"] != fmt.Sprint(flood-1) {
		t.Errorf("after the interval: %d lines, the last with suppressed=%s; want 2 and %d", n, last["suppressed"], flood-1)
	}
	if n := res.get(WebhookBadSignature); n != flood+1 {
		t.Errorf("bad_signature counted %d, want %d", n, flood+1)
	}
}

// TestWebhookRoute_Budget: with 2 slots, two notifications in progress
// leave the third answered 503 with Retry-After at once, while the API
// answers; one that outlives the route's timeout is answered 503 and keeps
// its slot until its work ends.
func TestWebhookRoute_Budget(t *testing.T) {
	t.Parallel()
	t.Run("concurrency", func(t *testing.T) {
		t.Parallel()
		recv := &fakeReceiver{gate: make(chan struct{}), arrived: make(chan struct{}, 2)}
		srv, res, logs := webhookServer(t, recv, webhookBudget{concurrency: 2})
		statuses := make(chan int, 2)
		for range 2 {
			go func() { s, _, _ := post(srv.URL, "t=1,v1=ab", []byte(`{}`)); statuses <- s }()
		}
		<-recv.arrived
		<-recv.arrived
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/provider/webhooks", strings.NewReader(`{}`))
		req.Header.Set("Stripe-Signature", "t=1,v1=ab")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("third notification = %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		health, err := http.Get(srv.URL + "/healthz")
		if err != nil || health.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz with the webhooks' slots full = %v %v, want 200", health, err)
		}
		health.Body.Close()
		t.Logf("refused in %s", time.Since(start))
		close(recv.gate)
		for range 2 {
			if s := <-statuses; s != http.StatusNoContent {
				t.Errorf("a notification in progress = %d, want 204", s)
			}
		}
		if res.get(WebhookFailed) != 1 || res.get(WebhookDuplicate) != 2 {
			t.Errorf("results %v, want 1 failed and 2 handled (duplicates: the fake appends nothing)", res.n)
		}
		if n, _ := logs.count("provider webhook answered 503: over the route's budget"); n != 1 {
			t.Errorf("%d log lines for the refusal, want 1", n)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		recv := &fakeReceiver{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
		srv, res, _ := webhookServer(t, recv, webhookBudget{concurrency: 1, timeout: 100 * time.Millisecond})
		if status, body := postWebhook(t, srv.URL, "t=1,v1=ab", []byte(`{}`)); status != http.StatusServiceUnavailable || !strings.Contains(body, "webhook timeout") {
			t.Fatalf("a notification past the route's timeout = %d %s, want 503", status, body)
		}
		<-recv.arrived
		if status, _ := postWebhook(t, srv.URL, "t=1,v1=ab", []byte(`{}`)); status != http.StatusServiceUnavailable {
			t.Fatalf("a notification while the timed-out one still works = %d, want 503 (its slot is taken)", status)
		}
		close(recv.gate) // this receive ends, and later ones return at once
		deadline := time.Now().Add(10 * time.Second)
		for {
			status, _ := postWebhook(t, srv.URL, "t=1,v1=ab", []byte(`{}`))
			if status == http.StatusNoContent {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the slot was not given back 10 s after the work ended (last answer %d)", status)
			}
		}
		if res.get(WebhookFailed) < 2 || res.get(WebhookDuplicate) != 1 {
			t.Errorf("results %v, want at least 2 failed and 1 handled", res.n)
		}
	})
}
