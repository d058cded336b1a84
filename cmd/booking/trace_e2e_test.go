package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/migrations/pgtest"
)

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTracing_OneBookingIsOneTrace runs booking serve in dev mode (the
// provider simulator and NATS in-process) with an in-memory span recorder,
// and places one order whose POST carries a caller's W3C traceparent. The
// order's spans — the HTTP request (a child of the caller's span), the
// command, the event store appends, the provider call and its outgoing
// HTTP request, and the relay's NATS publish of OrderConfirmed — are one
// trace, the caller's.
func TestTracing_OneBookingIsOneTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracerProviderForTest = tp
	t.Cleanup(func() { tracerProviderForTest = nil })

	t.Setenv("DATABASE_URL", pgtest.NewDatabase(t))
	t.Setenv("BOOKING_API_TOKENS", "admin=tok-admin:admin,alice=tok-alice")
	t.Setenv("BOOKING_DATA_DIR", t.TempDir())
	t.Setenv("BOOKING_AUTH", "tokens")
	for _, v := range []string{"BOOKING_NATS_URL", "BOOKING_EVENT_STORE", "BOOKING_PROVIDER_URL"} {
		t.Setenv(v, "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan struct{})
	var serveErr error
	go func() {
		defer close(done)
		serveErr = run(ctx, []string{"serve", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--nats-addr", "127.0.0.1:0",
			"--provider-sim-addr", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
			if serveErr != nil {
				t.Errorf("booking serve = %v; stderr:\n%s", serveErr, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Error("booking serve did not stop")
		}
	})
	listening := regexp.MustCompile(`booking: listening on (http://\S+)`)
	var api string
	waitUntil(t, 2*time.Minute, "booking serve listening", func() bool {
		select {
		case <-done:
			t.Fatalf("booking serve stopped: %v; stderr:\n%s", serveErr, stderr.String())
		default:
		}
		m := listening.FindStringSubmatch(stdout.String())
		if m != nil {
			api = m[1]
		}
		return m != nil
	})

	post := func(path, token, key, traceparent string, body map[string]any) map[string]any {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, api+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Prefer", "wait=10")
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s = %d %s", path, res.StatusCode, raw)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("POST %s: %v: %s", path, err, raw)
		}
		return out
	}
	show := post("/v1/shows", "tok-admin", "show-1", "", map[string]any{"name": "Concert",
		"starts_at": time.Now().UTC().Add(30 * 24 * time.Hour).Truncate(time.Second).Format(time.RFC3339), "capacity": 10,
		"price": map[string]any{"amount": 4500, "currency": "EUR"}})
	res := post("/v1/reservations", "tok-alice", "res-1", "", map[string]any{"show_id": show["id"], "quantity": 2})

	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xb0, 0x0c, 1}, SpanID: trace.SpanID{0xca, 0x11},
		TraceFlags: trace.FlagsSampled})
	order := post("/v1/orders", "tok-alice", "order-1", fmt.Sprintf("00-%s-%s-01", caller.TraceID(), caller.SpanID()),
		map[string]any{"reservation_id": res["id"], "payment": map[string]any{"token": "tok_visa"}})
	if order["status"] != "confirmed" {
		t.Fatalf("order = %v, want confirmed", order)
	}

	inTrace := func() []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == caller.TraceID() {
				out = append(out, s)
			}
		}
		return out
	}
	published := func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind() == trace.SpanKindProducer && hasAttr(s, "booking.event_type", "OrderConfirmed")
	}
	waitUntil(t, 2*time.Minute, "the relay's publish of OrderConfirmed in the order's trace", func() bool {
		for _, s := range inTrace() {
			if published(s) {
				return true
			}
		}
		return false
	})

	var server, command, provider, providerHTTP, publish, appendOrder int
	var names []string
	for _, s := range inTrace() {
		names = append(names, s.Name())
		switch {
		case s.Name() == "POST /v1/orders" && s.SpanKind() == trace.SpanKindServer:
			server++
			if s.Parent().SpanID() != caller.SpanID() || !s.Parent().IsRemote() {
				t.Errorf("the request's span has parent %s (remote %t), want the caller's %s", s.Parent().SpanID(), s.Parent().IsRemote(), caller.SpanID())
			}
		case s.Name() == "command POST /v1/orders":
			command++
		case s.Name() == "append order" || s.Name() == "append_multi order":
			// An append to the order's stream alone, or a unit that starts
			// with it (the result with the key's delete): which of them a
			// booking makes depends on the path its payment takes (a
			// stress run made only units).
			appendOrder++
		case s.Name() == "provider create_payment":
			provider++
		case s.SpanKind() == trace.SpanKindClient && hasAttr(s, "http.request.method", "POST") && strings.Contains(attrOf(s, "url.full"), "/v1/payment_intents"):
			providerHTTP++
		case published(s):
			publish++
		}
	}
	t.Logf("the order's trace %s: %d spans: %q", caller.TraceID(), len(names), names)
	if server != 1 || command != 1 || appendOrder == 0 || provider != 1 || providerHTTP != 1 || publish != 1 {
		t.Errorf("the order's trace has %d request, %d command, %d order append, %d provider call, %d provider HTTP request and %d OrderConfirmed publish spans, "+
			"want 1, 1, at least 1, 1, 1, 1; its spans: %q", server, command, appendOrder, provider, providerHTTP, publish, names)
	}
}

// attrOf returns the value of span s's attribute key, "" when it has none.
func attrOf(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if kv.Key == attribute.Key(key) {
			return kv.Value.String()
		}
	}
	return ""
}

// hasAttr reports whether span s has attribute key with value v.
func hasAttr(s sdktrace.ReadOnlySpan, key, v string) bool { return attrOf(s, key) == v }

// waitUntil polls cond every 20 ms until it holds, failing the test after
// timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
