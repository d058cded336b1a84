package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
)

// attr returns the value of attribute key of span s, "" when it has none.
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// spanLine describes a span for failure messages: its name, trace id and
// whether its parent is remote (another process's, or an event's).
func spanLine(s sdktrace.ReadOnlySpan) string {
	return fmt.Sprintf("%s trace=%s remote_parent=%t", s.Name(), s.SpanContext().TraceID(), s.Parent().IsRemote())
}

// TestTracing_ABookingIsOneTrace: with a tracer provider, a booking's
// order request records a span for each event store append and read and
// for the provider call, all in the request's trace; every event it
// causes keeps that trace context, also those another process's process
// manager appends; that process manager's spans continue the trace (their
// parent is the span stored with the event); and a webhook about a second
// payment of the order, a request of its own, records its facts in the
// order's trace, its own span linked to it.
func TestTracing_ABookingIsOneTrace(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	w := newLineageWorld()
	handler := func(executor string) *Handler {
		cfg := DefaultConfig()
		cfg.Executor = executor
		return New(cfg, w.store, w.clock, w.pay, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)),
			WithKeys(w.keys), WithTracerProvider(tp))
	}
	h := handler("exec-a")
	tracer := tp.Tracer("test")
	// inSpan runs f serving request srv, in a root span of its own.
	inSpan := func(srv string, f func(ctx context.Context) error) trace.SpanContext {
		t.Helper()
		ctx, span := tracer.Start(WithRequestIDs(context.Background(), RequestIDs{Server: srv}), srv)
		defer span.End()
		if err := f(ctx); err != nil {
			t.Fatalf("%s: %v", srv, err)
		}
		return span.SpanContext()
	}
	var show domain.Show
	inSpan("srv-show", func(ctx context.Context) (err error) {
		show, _, err = h.ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
			ScheduleShowCommand{Name: "Show", StartsAt: payT0.Add(48 * time.Hour), Capacity: 10, Price: payPrice})
		return err
	})
	var res domain.Reservation
	inSpan("srv-res", func(ctx context.Context) (err error) {
		res, _, err = h.ReserveSeats(ctx, Request{Actor: "alice", Operation: OpReserveSeats, Key: "res"}, ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
		return err
	})
	var out OrderResult
	order := inSpan("srv-order", func(ctx context.Context) (err error) {
		out, err = h.PlaceOrder(ctx, Request{Actor: "alice", Operation: OpPlaceOrder, Key: "order", Wait: 10 * time.Second},
			PlaceOrderCommand{ReservationID: res.ID, PaymentToken: "tok_visa"})
		if err == nil && out.Order.Status != domain.OrderStatusConfirmed {
			err = fmt.Errorf("order %s, want confirmed", out.Order.Status)
		}
		return err
	})
	orderSpans := func() []sdktrace.ReadOnlySpan {
		var in []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == order.TraceID() {
				in = append(in, s)
			}
		}
		return in
	}
	var names []string
	for _, s := range orderSpans() {
		names = append(names, s.Name())
		if s.Name() == "provider "+ProviderCreatePayment && attr(s, "booking.provider.result") != ProviderOK {
			t.Errorf("span %s: result %q, want ok", spanLine(s), attr(s, "booking.provider.result"))
		}
	}
	// The intent, the claim, OrderPlaced, the reservation marked ordered
	// and the attempt's start are one unit, named by its first stream (the
	// intent).
	for _, want := range []string{"srv-order", "append_multi intent", "append order", "provider " + ProviderCreatePayment} {
		if !slices.Contains(names, want) {
			t.Errorf("the order request's trace has no span %q; it has %q", want, names)
		}
	}

	// Another process's process manager follows every event up.
	all, err := w.store.ReadAll(context.Background(), eventstore.Position{}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	before := len(orderSpans())
	pm := handler("exec-pm")
	var wg sync.WaitGroup
	for _, r := range all {
		if err := pm.followUp(context.Background(), r, laterOf{}, &wg); err != nil {
			t.Fatalf("followUp(%s) = %v", r.Type, err)
		}
	}
	wg.Wait()
	continued := 0
	for _, s := range orderSpans()[before:] {
		if !s.Parent().IsRemote() || s.Parent().SpanID() != order.SpanID() {
			t.Errorf("process manager span %s: parent %s, want the order request's span %s (remote)", spanLine(s), s.Parent().SpanID(), order.SpanID())
		}
		continued++
	}
	if continued == 0 {
		t.Errorf("the process manager recorded no span in the order's trace")
	}

	// A webhook about a second payment of the order: its own request.
	p := w.pay.addPayment(out.Order.ID, 1, out.Order.Amount)
	webhook := inSpan("srv-webhook", func(ctx context.Context) error {
		return h.HandleProviderEvent(ctx, payEvent("evt_2", provider.EventPaymentIntentSucceeded, p))
	})
	for _, s := range rec.Ended() {
		if s.SpanContext().SpanID() != webhook.SpanID() {
			continue
		}
		if !slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool { return l.SpanContext.TraceID() == order.TraceID() }) {
			t.Errorf("the webhook's span has links %v, want one to the order's trace %s", s.Links(), order.TraceID())
		}
	}

	// Every event of the order, its claim and its intent keeps the
	// order request's trace: the request's, the process manager's and the
	// webhook's appends.
	all, err = w.store.ReadAll(context.Background(), eventstore.Position{}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range all {
		if !strings.HasPrefix(r.Stream, domain.OrderStream(out.Order.ID)) && r.Stream != domain.ClaimStream(res.ID) &&
			r.Stream != IntentStream("alice", OpPlaceOrder, "order") {
			continue
		}
		checked++
		m, _ := eventstore.DecodeMetadata(r.Metadata)
		want := "00-" + order.TraceID().String() + "-" + order.SpanID().String() + "-01"
		if r.Type == "PaymentSucceeded" && m.ObservedBy == ObservedByWebhook {
			continue // the webhook's fact: in the order's trace, checked below
		}
		if m.Traceparent != want {
			t.Errorf("%s@%d %s: traceparent %q, want the order request's %q", r.Stream, r.Revision, r.Type, m.Traceparent, want)
		}
	}
	if checked < 6 {
		t.Errorf("checked %d events of the order, want its intent, claim and order streams", checked)
	}
	facts := 0
	for _, r := range all {
		m, _ := eventstore.DecodeMetadata(r.Metadata)
		if m.ObservedBy != ObservedByWebhook {
			continue
		}
		facts++
		if !strings.HasPrefix(m.Traceparent, "00-"+order.TraceID().String()+"-") {
			t.Errorf("%s@%d %s recorded by the webhook: traceparent %q, want the order's trace %s", r.Stream, r.Revision, r.Type, m.Traceparent, order.TraceID())
		}
	}
	if facts == 0 {
		t.Errorf("the webhook recorded no fact")
	}
}

// TestTracing_ProviderSpansNameTheResult: each provider call through a
// traced Handler records one span named after its operation, with the
// result of its error's sentinel; a decline is no span error, an unknown
// outcome is.
func TestTracing_ProviderSpansNameTheResult(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	failing := errPayments{err: fmt.Errorf("boom: %w", provider.ErrDeclined)}
	p := tracedPayments{next: failing, tracer: tp.Tracer("test")}
	_, _ = p.CreatePayment(context.Background(), "k", provider.PaymentRequest{OrderID: "o", Attempt: 1})
	p.next = errPayments{err: fmt.Errorf("cut: %w", provider.ErrOutcomeUnknown)}
	_, _ = p.Refund(context.Background(), "k2", provider.PaymentRefundRequest{PaymentID: "pi_1"})
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, want := range []struct{ name, result, status string }{
		{"provider create_payment", ProviderDeclined, "Unset"},
		{"provider refund", ProviderOutcomeUnknown, "Error"},
	} {
		s := spans[i]
		if s.Name() != want.name || attr(s, "booking.provider.result") != want.result || s.Status().Code.String() != want.status {
			t.Errorf("span %d = %s result %q status %s, want %s result %q status %s", i, s.Name(), attr(s, "booking.provider.result"),
				s.Status().Code, want.name, want.result, want.status)
		}
	}
	if got := attr(spans[0], "booking.provider.idempotency_key"); got != "k" {
		t.Errorf("create_payment span: idempotency key %q, want k", got)
	}
}

// errPayments is a Payments whose every call fails with err.
type errPayments struct {
	Payments
	err error
}

func (p errPayments) CreatePayment(context.Context, string, provider.PaymentRequest) (provider.Payment, error) {
	return provider.Payment{}, p.err
}

func (p errPayments) Refund(context.Context, string, provider.PaymentRefundRequest) (provider.PaymentRefund, error) {
	return provider.PaymentRefund{}, p.err
}

// TestProviderResult classifies each sentinel of package provider, an
// unauthorized key before the unavailability its errors also wrap.
func TestProviderResult(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, ProviderOK},
		{fmt.Errorf("x: %w", provider.ErrDeclined), ProviderDeclined},
		{fmt.Errorf("x: %w", provider.ErrOutcomeUnknown), ProviderOutcomeUnknown},
		{fmt.Errorf("x: %w", provider.ErrKeyInUse), ProviderKeyInUse},
		{fmt.Errorf("x: %w", provider.ErrIdempotency), ProviderIdempotencyError},
		{fmt.Errorf("x: %w", provider.ErrUnavailable), ProviderUnavailable},
		{fmt.Errorf("x: %w", provider.ErrInvalidRequest), ProviderInvalidRequest},
		{fmt.Errorf("x: %w", provider.ErrNotFound), ProviderNotFound},
		{fmt.Errorf("x: %w %w", provider.ErrUnavailable, provider.ErrUnauthorized), ProviderUnauthorized},
		{errors.New("no sentinel"), ProviderOutcomeUnknown},
	} {
		if got := ProviderResult(tt.err); got != tt.want {
			t.Errorf("ProviderResult(%v) = %q, want %q", tt.err, got, tt.want)
		}
		if !slices.Contains(ProviderResults, tt.want) {
			t.Errorf("ProviderResults lack %q", tt.want)
		}
	}
}

// providerCalls is a Metrics that records ProviderCall's reports.
type providerCalls struct {
	nopMetrics
	mu    sync.Mutex
	calls []string
}

func (m *providerCalls) ProviderCall(op, result string, elapsed time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if elapsed < 0 {
		result += " (negative duration)"
	}
	m.calls = append(m.calls, op+" "+result)
}

// TestProviderCalls_EveryCallIsReported: a Handler reports each provider
// call its use cases make, by operation and result, without a use case
// counting: an order paid inline is one create_payment ok; a webhook's
// fetch one get_payment ok (a payment_intent.succeeded the order holds
// already fetches nothing); a declined card one create_payment declined.
func TestProviderCalls_EveryCallIsReported(t *testing.T) {
	t.Parallel()
	w := newLineageWorld()
	w.pay = newFakePayments(faultNone, faultDecline)
	m := &providerCalls{}
	cfg := DefaultConfig()
	cfg.Executor = "exec"
	h := New(cfg, w.store, w.clock, w.pay, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithKeys(w.keys), WithMetrics(m))
	ctx := context.Background()
	show, _, err := h.ScheduleShow(ctx, Request{Actor: "admin", Operation: OpScheduleShow, Key: "show"},
		ScheduleShowCommand{Name: "Show", StartsAt: payT0.Add(48 * time.Hour), Capacity: 10, Price: payPrice})
	if err != nil {
		t.Fatal(err)
	}
	order := func(key, token string) OrderResult {
		t.Helper()
		res, _, err := h.ReserveSeats(ctx, Request{Actor: "alice", Operation: OpReserveSeats, Key: key}, ReserveSeatsCommand{ShowID: show.ID, Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		out, err := h.PlaceOrder(ctx, Request{Actor: "alice", Operation: OpPlaceOrder, Key: key, Wait: 10 * time.Second},
			PlaceOrderCommand{ReservationID: res.ID, PaymentToken: token})
		var de *domain.Error
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("PlaceOrder(%s) = %v", token, err)
		}
		return out
	}
	paid := order("a", "tok_visa")
	p, _ := w.pay.GetPayment(ctx, paid.Order.ChargeID)
	// The order records the payment as succeeded: that notice fetches
	// nothing; a notice of another state is fetched.
	if err := h.HandleProviderEvent(ctx, payEvent("evt_1", provider.EventPaymentIntentSucceeded, p)); err != nil {
		t.Fatal(err)
	}
	if err := h.HandleProviderEvent(ctx, payEvent("evt_2", provider.EventPaymentIntentProcessing, p)); err != nil {
		t.Fatal(err)
	}
	order("b", "tok_visa") // declined by the fake's second fault
	m.mu.Lock()
	defer m.mu.Unlock()
	want := []string{"create_payment ok", "get_payment ok", "create_payment declined"}
	if !slices.Equal(m.calls, want) {
		t.Errorf("ProviderCall reports %q, want %q", m.calls, want)
	}
}
