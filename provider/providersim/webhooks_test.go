package providersim_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/retrysafe/booking/provider/providersim"
)

// TestWebhooksAreStripeEvents: stripe-go's webhook.ConstructEvent accepts
// every delivery (signature, tolerance, API version), and the events have
// Stripe's shape.
func TestWebhooksAreStripeEvents(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	pi := s.mustCreate(t, "k1", "o1", "1", providersim.TokenVisa)
	_, _ = s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k2", "o2", "1", providersim.TokenDecline))
	if _, err := s.sc.V1Refunds.Create(ctxT(t), refundParams("r1", pi.ID, 0)); err != nil {
		t.Fatal(err)
	}
	mustWaitWebhooks(t, s)
	if _, refused := rcv.stats(); len(refused) != 0 {
		t.Fatalf("ConstructEvent refused deliveries: %v", refused)
	}
	got := eventTypes(rcv.events())
	slices.Sort(got)
	if want := []string{"charge.refunded", "payment_intent.payment_failed", "payment_intent.succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	for _, ev := range rcv.events() {
		switch {
		case !strings.HasPrefix(ev.ID, "evt_"), ev.Object != "event", ev.APIVersion != stripe.APIVersion, ev.Livemode, ev.Created == 0:
			t.Errorf("event %+v, want Stripe's envelope", ev)
		case ev.Request == nil || ev.Request.IdempotencyKey == "" || !strings.HasPrefix(ev.Request.ID, "req_"):
			t.Errorf("%s: request %+v, want the request id and its idempotency key", ev.Type, ev.Request)
		}
		if ev.Type == "payment_intent.succeeded" {
			var got stripe.PaymentIntent
			if err := json.Unmarshal(ev.Data.Raw, &got); err != nil || got.ID != pi.ID || got.Metadata["order_id"] != "o1" ||
				got.Status != stripe.PaymentIntentStatusSucceeded || ev.Request.IdempotencyKey != "k1" {
				t.Errorf("payment_intent.succeeded object %+v (%v), want %s", got, err, pi.ID)
			}
		}
	}

	// The signature covers the exact body: any change is refused, and an
	// old signature is stale; /_sim/events has the bodies byte for byte.
	var d providersim.Delivery
	for _, x := range s.Deliveries() {
		if x.Delivered {
			d = x
			break
		}
	}
	events := s.Events()
	i := slices.IndexFunc(events, func(e providersim.Event) bool { return e.ID == d.EventID })
	if i < 0 {
		t.Fatalf("no event %s", d.EventID)
	}
	body := events[i].Body()
	if err := webhook.ValidatePayload(body, d.Signature, testSecret); err != nil {
		t.Fatalf("ValidatePayload(recorded) = %v", err)
	}
	tampered := bytes.Clone(body)
	tampered[len(tampered)-2] ^= 1
	if err := webhook.ValidatePayload(tampered, d.Signature, testSecret); err == nil {
		t.Fatal("ValidatePayload(tampered) = nil, want an error")
	}
	ts, _, _ := strings.Cut(strings.TrimPrefix(d.Signature, "t="), ",")
	if sent := d.At.Unix(); ts != itoa(sent) && ts != itoa(sent-1) {
		t.Fatalf("signature %q, want t= the Unix time it was sent (%d)", d.Signature, sent)
	}
	if want := webhook.ComputeSignature(time.Unix(mustAtoi(t, ts), 0), body, testSecret); !strings.HasSuffix(d.Signature, ",v1="+hex.EncodeToString(want)) {
		t.Fatalf("signature %q, want v1=%x (stripe-go's ComputeSignature)", d.Signature, want)
	}
	var listed struct {
		Events []json.RawMessage `json:"events"`
	}
	s.control(t, http.MethodGet, "/_sim/events", "", &listed)
	if len(listed.Events) != len(events) || !bytes.Equal(listed.Events[i], body) {
		t.Fatalf("GET /_sim/events: %d events, body %s; want %d, %s", len(listed.Events), listed.Events[i], len(events), body)
	}
}

// TestWebhookSignatureUsesTheRealClock: advancing the simulator's clock
// does not make signatures stale, nor created times jump.
func TestWebhookSignatureUsesTheRealClock(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	s.AdvanceClock(48 * time.Hour)
	s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	rcv.wantDelivered(t, s, 1, "accepted %d events, want 1 (signed with the real clock)")
	if c := rcv.events()[0].Created; c > time.Now().Unix()+5 {
		t.Fatalf("created %d, want the real clock", c)
	}
}

func TestWebhooksRetryUntil2xx(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 3)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	mustWaitWebhooks(t, s)
	if evs := rcv.events(); len(evs) != 1 {
		t.Fatalf("receiver accepted %d events, want 1", len(evs))
	}
	ds := s.Deliveries()
	if len(ds) != 4 || !ds[3].Delivered || ds[3].Attempt != 4 || ds[0].StatusCode != 500 {
		t.Fatalf("Deliveries() = %+v, want 3 failures then a delivery", ds)
	}
}

func TestWebhookAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 1000)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL, Webhooks: providersim.WebhookConfig{MaxAttempts: 3}})
	s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	mustWaitWebhooks(t, s)
	if calls, _ := rcv.stats(); calls != 3 {
		t.Fatalf("receiver got %d calls, want 3", calls)
	}
}

func TestWebhookDuplicates(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	s.wantControl(t, http.MethodPost, "/_sim/faults", `{"webhook_duplicates": 2}`, http.StatusOK)
	s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	mustWaitWebhooks(t, s)
	evs := rcv.events()
	if len(evs) != 3 || evs[0].ID != evs[1].ID || evs[1].ID != evs[2].ID {
		t.Fatalf("received %+v, want the same event 3 times", evs)
	}

	// A resend is one more duplicate.
	s.wantControl(t, http.MethodPost, "/_sim/events/"+evs[0].ID+"/resend", "", http.StatusAccepted)
	s.wantControl(t, http.MethodPost, "/_sim/events/evt_missing/resend", "", http.StatusNotFound)
	rcv.wantDelivered(t, s, 4, "received %d deliveries after resend, want 4")
}

func TestWebhookReorder(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	// The held event waits for the next one however slow the machine is
	// (the hold's bound is far away), so the refund always overtakes it.
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL, Webhooks: providersim.WebhookConfig{ReorderHold: time.Minute}})
	if err := s.SetFaults(providersim.Faults{WebhookReorder: true}); err != nil {
		t.Fatal(err)
	}
	pi := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	if _, err := s.sc.V1Refunds.Create(ctxT(t), refundParams("r", pi.ID, 0)); err != nil {
		t.Fatal(err)
	}
	mustWaitWebhooks(t, s)
	if got, want := eventTypes(rcv.events()), []string{"charge.refunded", "payment_intent.succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v (the later event overtakes)", got, want)
	}
}

func TestWebhookReorderHoldIsBounded(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL, Webhooks: providersim.WebhookConfig{Reorder: true, ReorderHold: 100 * time.Millisecond}})
	s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	rcv.wantDelivered(t, s, 1, "received %d events, want the held one after its hold")
}

func TestWebhookPauseAndDelay(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	s.wantControl(t, http.MethodPost, "/_sim/faults", `{"webhooks_paused": true, "webhook_delay_ms": 100}`, http.StatusOK)
	s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	time.Sleep(250 * time.Millisecond)
	if calls, _ := rcv.stats(); calls != 0 {
		t.Fatalf("receiver got %d calls while paused, want 0", calls)
	}
	s.wantControl(t, http.MethodPost, "/_sim/faults", `{"webhooks_paused": false}`, http.StatusOK)
	rcv.wantDelivered(t, s, 1, "received %d events after resume, want 1")
}

func TestCloseStopsDeliveries(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 1000)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL, Webhooks: providersim.WebhookConfig{InitialBackoff: 10 * time.Second}})
	s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	deadline := time.Now().Add(30 * time.Second)
	for calls, _ := rcv.stats(); calls == 0 && time.Now().Before(deadline); calls, _ = rcv.stats() {
		time.Sleep(10 * time.Millisecond)
	}
	begin := time.Now()
	s.Close()
	if d := time.Since(begin); d > 5*time.Second { // far below the 10 s backoff, far above a busy machine's pause
		t.Fatalf("Close() took %s while a delivery was backing off", d)
	}
	if err := s.Resend(s.Events()[0].ID); err == nil {
		t.Fatalf("Resend() after Close() = nil, want an error")
	}
}

func TestNoWebhookURLRecordsEventsOnly(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	pi := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	mustWaitWebhooks(t, s)
	if evs := s.Events(); len(evs) != 1 || evs[0].Type != "payment_intent.succeeded" || evs[0].ObjectID != pi.ID {
		t.Fatalf("Events() = %+v, want one payment_intent.succeeded of %s", evs, pi.ID)
	}
}
