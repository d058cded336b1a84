package commands

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
)

// Events written before secrets were sealed (schema version 1) keep working:
// an order whose token is in clear still pays (its new attempts are sealed
// under a key made for it), and an intent whose token is in clear still
// places its order (sealed).

func rawData(t *testing.T, s *memStore, stream string) [][]byte {
	t.Helper()
	recs, err := s.ReadStream(context.Background(), stream, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(recs))
	for i, r := range recs {
		out[i] = append(r.Data, r.Metadata...)
	}
	return out
}

func TestLegacyOrderPaysWithSealedAttempt(t *testing.T) {
	t.Parallel()
	const token = "tok_visa_legacy_order"
	cfg := payConfig()
	placed := domain.PlacedFrom(domain.OrderClaimed{ReservationID: payRes, OrderID: payOrder, ShowID: payShow, Actor: payActor,
		Intent: payIntent, Quantity: 2, Amount: payAmount}, payT0.Add(cfg.PaymentDeadline), nil)
	placed.Private = &domain.OrderPrivate{PaymentToken: token} // version 1
	keys := newMemKeys()
	f := newPayFixPlaced(t, cfg, keys, placed, nil)
	if err := f.h.DrivePayment(context.Background(), payOrder); err != nil {
		t.Fatalf("DrivePayment = %v", err)
	}
	o := f.order()
	if o.Status != domain.OrderStatusConfirmed {
		t.Fatalf("order %s, want confirmed (appended %v)", o.Status, f.appended())
	}
	if net, n := f.pay.net(); net != payAmount.Amount || n != 1 {
		t.Errorf("provider: net %d over %d charges, want %d over 1", net, n, payAmount.Amount)
	}
	a := o.LastAttempt()
	if a.RequestBody != "" || len(a.SealedRequestBody) == 0 {
		t.Errorf("the new attempt holds clear %q, sealed %d bytes; want sealed only", a.RequestBody, len(a.SealedRequestBody))
	}
	for i, raw := range rawData(t, f.store, domain.OrderStream(payOrder))[1:] {
		if bytes.Contains(raw, []byte(token)) {
			t.Errorf("order event %d after the version-1 OrderPlaced holds the token in clear: %s", i+1, raw)
		}
	}
	// The key made for it is deleted, within the shredder's delay.
	for deadline := time.Now().Add(30 * time.Second); keys.len() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys left 30 s after the order confirmed, want 0 (the key made for it is deleted)", keys.len())
		}
		time.Sleep(20 * time.Millisecond) // polling for a state, with a deadline
	}
}

func TestLegacyIntentTokenIsSealedAtPlacement(t *testing.T) {
	t.Parallel()
	const token = "tok_visa_legacy_intent"
	ctx := context.Background()
	store, clock, keys := newMemStore(), newFakeClock(payT0), newMemKeys()
	store.SetClock(clock)
	h := New(payConfig(), store, clock, newFakePayments(), newTestRegistry(), nil, WithKeys(keys))
	intent := IntentStream(payActor, OpPlaceOrder, "legacy-key")
	mustAppend(t, store, intent, domain.IntentRecorded{Actor: payActor, Operation: OpPlaceOrder, KeySHA256: "k", Fingerprint: "fp",
		CanonicalVersion: 1, Command: map[string]any{"reservation_id": payRes}, TargetID: payOrder, Executor: execA,
		LeaseUntil: payT0, Private: map[string]any{"payment_token": token}})
	mustAppend(t, store, domain.ReservationStream(payRes),
		domain.ReservationHeld{ReservationID: payRes, ShowID: payShow, Actor: payActor, Quantity: 2, Amount: payAmount, ExpiresAt: payT0.Add(10 * time.Minute)})
	claim := domain.OrderClaimed{ReservationID: payRes, OrderID: payOrder, ShowID: payShow, Actor: payActor, Intent: intent, Quantity: 2, Amount: payAmount}
	placed, err := h.finishClaim(ctx, claim, "claim-1", payT0)
	if err != nil || !placed {
		t.Fatalf("finishClaim = %v, %v", placed, err)
	}
	o, _, err := h.LoadOrder(ctx, payOrder)
	if err != nil {
		t.Fatal(err)
	}
	if o.PaymentToken != "" || len(o.SealedPaymentToken) == 0 {
		t.Fatalf("OrderPlaced holds clear %q, sealed %d bytes; want sealed only", o.PaymentToken, len(o.SealedPaymentToken))
	}
	dk, ok, err := keys.Key(ctx, payOrder)
	if !ok || err != nil {
		t.Fatalf("no key made for the order (ok %v, %v)", ok, err)
	}
	if pt, err := dk.Open(o.SealedPaymentToken, TokenAAD(payOrder)); err != nil || string(pt) != token {
		t.Errorf("the sealed token opens to %q, %v; want %s", pt, err, token)
	}
	if exists, held := keys.has(payOrder); !exists || held {
		t.Errorf("key row exists %v, token held %v; want a row without a held token", exists, held)
	}
	if raw := rawData(t, store, domain.OrderStream(payOrder)); bytes.Contains(raw[0], []byte(token)) {
		t.Errorf("OrderPlaced holds the token in clear: %s", raw[0])
	}
}

// TestSealedBytesAreBoundToTheirOrder: the sealed token and request bytes
// of one order do not open as another order's, or as another field.
func TestSealedBytesAreBoundToTheirOrder(t *testing.T) {
	t.Parallel()
	other := "0197c000-0000-7000-8000-0000000000ff"
	dk := testDataKey(payOrder)
	tok := dk.Seal([]byte("tok_visa"), TokenAAD(payOrder))
	body := dk.Seal([]byte(`{"token":"tok_visa"}`), RequestAAD(payOrder, 1))
	for _, c := range []struct {
		name string
		ct   []byte
		aad  []byte
	}{
		{"the token as another order's token", tok, TokenAAD(other)},
		{"the token as the request bytes", tok, RequestAAD(payOrder, 1)},
		{"attempt 1's bytes as attempt 2's", body, RequestAAD(payOrder, 2)},
		{"attempt 1's bytes as another order's", body, RequestAAD(other, 1)},
	} {
		if _, err := dk.Open(c.ct, c.aad); err == nil {
			t.Errorf("%s: opens, want an error", c.name)
		}
	}
	if !strings.Contains(string(TokenAAD(payOrder)), payOrder) {
		t.Errorf("TokenAAD does not name the order")
	}
}
