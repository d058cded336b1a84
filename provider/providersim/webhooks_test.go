package providersim_test

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

func eventTypes(evs []provider.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func TestWebhooksAreSignedAndVerifiable(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s, ctx := mustSimCtx(t, providersim.Config{WebhookURL: rcv.srv.URL})
	ch := s.mustCharge(t, ctx, "k1", charge("o1", 1, "tok_visa"))
	_, _ = s.client.CreateCharge(ctx, "k2", charge("o2", 1, "tok_decline"))
	if _, err := s.client.Refund(ctx, "r1", ch.ID, 0); err != nil {
		t.Fatal(err)
	}
	mustWaitWebhooks(t, s)

	if _, refused := rcv.stats(); len(refused) != 0 {
		t.Fatalf("receiver refused deliveries: %v", refused)
	}
	got := eventTypes(rcv.events())
	slices.Sort(got)
	if want := []string{"charge.failed", "charge.refunded", "charge.succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	for _, e := range rcv.events() {
		if e.Type == provider.EventChargeRefunded && (e.Data.Object.ID != ch.ID || e.Data.Object.RefundedAmount != 1500) {
			t.Errorf("charge.refunded carries %+v, want the refunded charge", e.Data.Object)
		}
	}

	// The signature covers the exact body: any change is refused, and an old
	// signature is stale.
	var d providersim.Delivery
	for _, x := range s.Deliveries() {
		if x.Delivered {
			d = x
			break
		}
	}
	events := s.Events()
	i := slices.IndexFunc(events, func(e provider.Event) bool { return e.ID == d.EventID })
	if i < 0 {
		t.Fatalf("no event %s", d.EventID)
	}
	body := events[i].Body()
	secret := []byte(testSecret)
	if err := provider.VerifySignature(d.Signature, body, secret, time.Now(), 0); err != nil {
		t.Fatalf("VerifySignature(recorded) = %v", err)
	}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-2] ^= 1
	if err := provider.VerifySignature(d.Signature, tampered, secret, time.Now(), 0); !errors.Is(err, provider.ErrBadSignature) {
		t.Fatalf("VerifySignature(tampered) = %v, want ErrBadSignature", err)
	}
	if err := provider.VerifySignature(d.Signature, body, secret, time.Now().Add(10*time.Minute), 0); !errors.Is(err, provider.ErrStaleTimestamp) {
		t.Fatalf("VerifySignature(10 min later) = %v, want ErrStaleTimestamp", err)
	}
}

func TestWebhooksRetryUntil2xx(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 3)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	s.mustCharge(t, ctxT(t), "k", charge("o1", 1, "tok_visa"))
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
	s.mustCharge(t, ctxT(t), "k", charge("o1", 1, "tok_visa"))
	mustWaitWebhooks(t, s)
	if calls, _ := rcv.stats(); calls != 3 {
		t.Fatalf("receiver got %d calls, want 3", calls)
	}
}

func TestWebhookDuplicates(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	s.wantStatus(t, http.MethodPost, "/_sim/faults", map[string]any{"webhook_duplicates": 2}, http.StatusOK)
	s.mustCharge(t, ctxT(t), "k", charge("o1", 1, "tok_visa"))
	mustWaitWebhooks(t, s)
	evs := rcv.events()
	if len(evs) != 3 || evs[0].ID != evs[1].ID || evs[1].ID != evs[2].ID {
		t.Fatalf("received %+v, want the same event 3 times", evs)
	}

	// A resend is one more duplicate.
	s.wantStatus(t, http.MethodPost, "/_sim/events/"+evs[0].ID+"/resend", nil, http.StatusAccepted)
	s.wantStatus(t, http.MethodPost, "/_sim/events/evt_missing/resend", nil, http.StatusNotFound)
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
	ctx := ctxT(t)
	ch := s.mustCharge(t, ctx, "k", charge("o1", 1, "tok_visa"))
	if _, err := s.client.Refund(ctx, "r", ch.ID, 0); err != nil {
		t.Fatal(err)
	}
	mustWaitWebhooks(t, s)
	if got, want := eventTypes(rcv.events()), []string{"charge.refunded", "charge.succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v (the later event overtakes)", got, want)
	}
}

func TestWebhookReorderHoldIsBounded(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL, Webhooks: providersim.WebhookConfig{Reorder: true, ReorderHold: 100 * time.Millisecond}})
	s.mustCharge(t, ctxT(t), "k", charge("o1", 1, "tok_visa"))
	rcv.wantDelivered(t, s, 1, "received %d events, want the held one after its hold")
}

func TestWebhookPauseAndDelay(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	s.wantStatus(t, http.MethodPost, "/_sim/faults", map[string]any{"webhooks_paused": true, "webhook_delay_ms": 100}, http.StatusOK)
	s.mustCharge(t, ctxT(t), "k", charge("o1", 1, "tok_visa"))
	time.Sleep(250 * time.Millisecond)
	if calls, _ := rcv.stats(); calls != 0 {
		t.Fatalf("receiver got %d calls while paused, want 0", calls)
	}
	s.wantStatus(t, http.MethodPost, "/_sim/faults", map[string]any{"webhooks_paused": false}, http.StatusOK)
	rcv.wantDelivered(t, s, 1, "received %d events after resume, want 1")
}

func TestCloseStopsDeliveries(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 1000)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL, Webhooks: providersim.WebhookConfig{InitialBackoff: 10 * time.Second}})
	s.mustCharge(t, ctxT(t), "k", charge("o1", 1, "tok_visa"))
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
	s.mustCharge(t, ctxT(t), "k", charge("o1", 1, "tok_visa"))
	mustWaitWebhooks(t, s)
	if evs := s.Events(); len(evs) != 1 || evs[0].Type != provider.EventChargeSucceeded {
		t.Fatalf("Events() = %+v, want one charge.succeeded", evs)
	}
}
