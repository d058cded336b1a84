package commands

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
)

// Events written before secrets were sealed (schema version 1) keep working:
// an order whose token is in clear still pays (its new attempts hold no
// secret, and send only while a key made for it exists), and an intent
// whose token is in clear still places its order (sealed). Attempts stored
// as request bytes (versions 1 and 2) are upcast into inputs.

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
	if a.Legacy() || a.RequestSHA256 == "" || a.Description == "" {
		t.Errorf("the new attempt is legacy %v with digest %q, description %q; want the inputs", a.Legacy(), a.RequestSHA256, a.Description)
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

// TestShredUnplaced: once a key still holding its token is unplacedAge old,
// a reconciler pass deletes it when its order can never be placed — its
// intent never recorded, recorded for another order, or refused — and keeps
// it while its intent names its order without a refusal (the request or
// recovery places or refuses it), and when it was made without an intent.
// A younger key is not looked at.
func TestShredUnplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, clock, keys := newMemStore(), newFakeClock(payT0), newMemKeys()
	keys.clock = clock
	store.SetClock(clock)
	h := New(payConfig(), store, clock, newFakePayments(), newTestRegistry(), nil, WithKeys(keys))
	recorded := func(target string) domain.IntentRecorded {
		return domain.IntentRecorded{Actor: payActor, Operation: OpPlaceOrder, KeySHA256: "k", Fingerprint: "fp",
			CanonicalVersion: CanonicalVersion, Command: map[string]any{"reservation_id": payRes}, TargetID: target,
			Executor: execA, LeaseUntil: payT0.Add(5 * time.Second)}
	}
	orders := map[string]string{}
	for _, name := range []string{"never recorded", "recorded for another order", "refused", "live", "without an intent"} {
		id, intent := NewID(), IntentStream(payActor, OpPlaceOrder, name)
		orders[name] = id
		if name == "without an intent" {
			intent = ""
		}
		if _, err := h.holdToken(ctx, id, intent, "tok_visa", payT0); err != nil {
			t.Fatal(err)
		}
		switch name {
		case "recorded for another order":
			mustAppend(t, store, intent, recorded(NewID()))
		case "refused":
			mustAppend(t, store, intent, recorded(id),
				domain.IntentRejected{Kind: "gone", Code: "reservation-expired", Detail: "the reservation expired"})
		case "live":
			mustAppend(t, store, intent, recorded(id))
		}
	}
	clock.Advance(unplacedAge - time.Second)
	if _, err := h.ReconcilePass(ctx, noPending{}); err != nil {
		t.Fatal(err)
	}
	if n := keys.len(); n != len(orders) {
		t.Fatalf("%d keys after a pass %s after they were made, want all %d (too young to look at)", n, unplacedAge-time.Second, len(orders))
	}
	clock.Advance(time.Second)
	if _, err := h.ReconcilePass(ctx, noPending{}); err != nil {
		t.Fatal(err)
	}
	for name, id := range orders {
		keep := name == "live" || name == "without an intent"
		if exists, held := keys.has(id); exists != keep || held != keep {
			t.Errorf("%s: key exists %v, token held %v; want %v", name, exists, held, keep)
		}
	}
}

// TestSealedBytesAreBoundToTheirOrder: the sealed token, request bytes and
// payment action of one order do not open as another order's, or as
// another field.
func TestSealedBytesAreBoundToTheirOrder(t *testing.T) {
	t.Parallel()
	other := "0197c000-0000-7000-8000-0000000000ff"
	dk := testDataKey(payOrder)
	tok := dk.Seal([]byte("tok_visa"), TokenAAD(payOrder))
	body := dk.Seal([]byte(`{"token":"tok_visa"}`), RequestAAD(payOrder, 1))
	action := dk.Seal([]byte(`{"client_secret":"pi_1_secret_x"}`), ActionAAD(payOrder, 1))
	for _, c := range []struct {
		name string
		ct   []byte
		aad  []byte
	}{
		{"the token as another order's token", tok, TokenAAD(other)},
		{"the token as the request bytes", tok, RequestAAD(payOrder, 1)},
		{"attempt 1's bytes as attempt 2's", body, RequestAAD(payOrder, 2)},
		{"attempt 1's bytes as another order's", body, RequestAAD(other, 1)},
		{"attempt 1's action as attempt 2's", action, ActionAAD(payOrder, 2)},
		{"attempt 1's action as another order's", action, ActionAAD(other, 1)},
		{"the action as the request bytes", action, RequestAAD(payOrder, 1)},
	} {
		if _, err := dk.Open(c.ct, c.aad); err == nil {
			t.Errorf("%s: opens, want an error", c.name)
		}
	}
	if !strings.Contains(string(TokenAAD(payOrder)), payOrder) {
		t.Errorf("TokenAAD does not name the order")
	}
}

// TestLegacyAttemptIsUpcast: an attempt stored as the bytes of a charge
// request — sealed (schema version 2) or in clear (version 1) — is sent as
// the same inputs parsed from those bytes, under its own key: amount,
// currency, payment method and description from the bytes, the deployment
// from the key; bytes that do not match the attempt's digest are never
// sent.
func TestLegacyAttemptIsUpcast(t *testing.T) {
	t.Parallel()
	body := `{"amount":3000,"currency":"EUR","token":"tok_visa","metadata":{"attempt":"1","order_id":"` + payOrder +
		`"},"description":"2 ticket(s), order ` + payOrder + `"}`
	legacy := func(private domain.AttemptPrivate, key, digest string) domain.PaymentAttemptStarted {
		return domain.PaymentAttemptStarted{OrderID: payOrder, Attempt: 1, ProviderKey: key, Owner: execB, LeaseUntil: payT0.Add(30 * time.Second),
			Amount: payAmount, StartedAt: payT0, RequestSHA256: digest, Private: &private}
	}
	sealed := domain.AttemptPrivate{SealedRequestBody: testDataKey(payOrder).Seal([]byte(body), RequestAAD(payOrder, 1))}
	want := provider.PaymentRequest{Amount: 3000, Currency: "EUR", PaymentMethod: "tok_visa", OrderID: payOrder, Attempt: 1,
		Description: "2 ticket(s), order " + payOrder}
	tests := []struct {
		name       string
		started    domain.PaymentAttemptStarted
		want       *provider.PaymentRequest
		deployment string
	}{
		{name: "A version-2 attempt's sealed bytes are opened and parsed into its inputs.",
			started: legacy(sealed, payKey(1), sha256Hex([]byte(body))), want: &want},
		{name: "A version-1 attempt's clear bytes are parsed into its inputs.",
			started: legacy(domain.AttemptPrivate{RequestBody: body}, payKey(1), sha256Hex([]byte(body))), want: &want},
		{name: "A deployment's key prefix is sent as its metadata.",
			started: legacy(sealed, "prod-"+payKey(1), sha256Hex([]byte(body))), want: &want, deployment: "prod"},
		{name: "Bytes that do not match the attempt's digest are not sent.",
			started: legacy(sealed, payKey(1), sha256Hex([]byte(body+" "))), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newPayFix(t, payConfig(), "tok_visa", nil, tt.started)
			f.clock.Advance(time.Minute) // the lease expired: taken over inside the window, same key
			_ = f.h.DrivePayment(context.Background(), payOrder)
			for _, c := range f.pay.calls {
				if c.Op == "create" && c.Key != tt.started.ProviderKey {
					t.Errorf("sent under key %s, want the attempt's %s", c.Key, tt.started.ProviderKey)
				}
			}
			sent := f.pay.requests()
			if tt.want == nil {
				if len(sent) != 0 {
					t.Fatalf("sent %v, want nothing", sent)
				}
				return
			}
			w := *tt.want
			w.Deployment = tt.deployment
			if len(sent) != 1 || sent[0] != w {
				t.Fatalf("sent %v, want once %v", sent, w)
			}
			if sent[0].PaymentMethod != "tok_visa" {
				t.Errorf("payment method = %q, want tok_visa", sent[0].PaymentMethod)
			}
			if o := f.order(); o.Status != domain.OrderStatusConfirmed {
				t.Errorf("order %s, want confirmed (appended %v)", o.Status, f.appended())
			}
		})
	}
}

// TestAttemptDigestIsPinned: the digest of an attempt's inputs (schema
// version 3's request_sha256) never changes for the same inputs; the
// golden PaymentAttemptStarted.v3.json holds this value.
func TestAttemptDigestIsPinned(t *testing.T) {
	t.Parallel()
	const order = "0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a41"
	got := attemptDigest(provider.PaymentRequest{Amount: 8500, Currency: "EUR", PaymentMethod: "tok_test_visa_4242", OrderID: order, Attempt: 1,
		Deployment: "prod", Description: "2 ticket(s), order " + order})
	if want := "86dadbb3d885ab5cc01d0e26dd269b8a7fde4528526b936dcb811d1f135aa9ec"; got != want {
		t.Errorf("attemptDigest() = %s, want %s", got, want)
	}
	base := payRequest(1)
	for _, change := range []func(*provider.PaymentRequest){
		func(r *provider.PaymentRequest) { r.Amount++ },
		func(r *provider.PaymentRequest) { r.Currency = "USD" },
		func(r *provider.PaymentRequest) { r.PaymentMethod = "tok_decline" },
		func(r *provider.PaymentRequest) { r.Attempt = 2 },
		func(r *provider.PaymentRequest) { r.Deployment = "prod" },
		func(r *provider.PaymentRequest) { r.Description += "." },
	} {
		r := base
		change(&r)
		if attemptDigest(r) == attemptDigest(base) {
			t.Errorf("attemptDigest(%v) equals the digest of %v", r, base)
		}
	}
}

// noUnits are key units that are never called: shredIn only asks whether
// there are any.
type noUnits struct{ KeyUnits }

// TestShredIn: with key units, a unit deletes the key of the order whose
// sends one of its parts ends (domain.EndsSending on the order's stream),
// and nothing else: not for a unit that does not end the order, not for an
// ending event on another stream, not for a unit that writes the key table
// already, not for a key this process deleted already, and never without
// key units.
func TestShredIn(t *testing.T) {
	t.Parallel()
	id := NewID()
	order := domain.OrderStream(id)
	part := func(stream string, evs ...domain.Event) unitPart {
		p := unitPart{s: newStream(stream)}
		for _, e := range evs {
			p.evs = append(p.evs, pending{NewID(), e})
		}
		return p
	}
	confirmed := domain.OrderConfirmed{OrderID: id}
	placing := keyWrite{place: &keyPlace{orderID: id}}
	for _, tc := range []struct {
		name  string
		units bool
		kw    keyWrite
		parts []unitPart
		noted bool
		want  string
	}{
		{"ends the order", true, keyWrite{}, []unitPart{part(order, domain.PaymentSucceeded{OrderID: id}, confirmed)}, false, id},
		{"cancel requested", true, keyWrite{}, []unitPart{part(order, domain.OrderCancelRequested{OrderID: id})}, false, id},
		{"another part ends it", true, keyWrite{}, []unitPart{part(domain.ShowStream(NewID()), domain.SeatsReleased{}), part(order, confirmed)}, false, id},
		{"does not end it", true, keyWrite{}, []unitPart{part(order, domain.PaymentSucceeded{OrderID: id})}, false, ""},
		{"not an order stream", true, keyWrite{}, []unitPart{part("other-"+id, confirmed)}, false, ""},
		{"writes the key table already", true, placing, []unitPart{part(order, confirmed)}, false, ""},
		{"deleted already", true, keyWrite{}, []unitPart{part(order, confirmed)}, true, ""},
		{"without key units", false, keyWrite{}, []unitPart{part(order, confirmed)}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{WithKeys(newMemKeys())}
			if tc.units {
				opts = append(opts, WithKeyUnits(noUnits{}))
			}
			h := New(payConfig(), newMemStore(), newFakeClock(payT0), newFakePayments(), newTestRegistry(), nil, opts...)
			if tc.noted {
				h.streams.noteDone(keyShredded(id))
			}
			got, err := h.shredIn(context.Background(), tc.kw, tc.parts)
			if err != nil {
				t.Fatal(err)
			}
			if got.shred != tc.want || (tc.kw.place != nil && got.place != tc.kw.place) {
				t.Errorf("shredIn = %+v, want shred %q (and the placement kept)", got, tc.want)
			}
		})
	}
}

// TestShredInRecordsTheErasure: the unit that deletes an order's key
// records its erasure in the same commit when its order part was decided
// on the whole stream: PaymentSecretsShredded with the id derived from the
// order and the decision's time, and the key write says so
// (keyWrite.recorded); not in a part encoded before (its metadata is in
// its bytes); not when the stream or the part records it already, and not for
// a part decided on the stream known only by its revision (the reconciler
// records that one).
func TestShredInRecordsTheErasure(t *testing.T) {
	t.Parallel()
	id := NewID()
	order := domain.OrderStream(id)
	at := payT0.Add(time.Minute)
	whole := &stream{name: order, exists: true, last: 1, events: []domain.Event{domain.OrderPlaced{OrderID: id}, domain.PaymentSucceeded{OrderID: id}}}
	shredded := &stream{name: order, exists: true, last: 2, events: append(slices.Clone(whole.events), domain.PaymentSecretsShredded{OrderID: id})}
	confirmed := pending{NewID(), domain.OrderConfirmed{OrderID: id}}
	encoded := func() []eventstore.EventData {
		d, err := encodeEvents(context.Background(), eventstore.Metadata{OccurredAt: at}, confirmed)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name string
		part unitPart
		want bool
	}{
		{"whole stream", unitPart{s: whole, m: eventstore.Metadata{OccurredAt: at}, evs: []pending{confirmed}}, true},
		{"whole stream, encoded before", unitPart{s: whole, m: eventstore.Metadata{OccurredAt: at}, evs: []pending{confirmed}, data: encoded()}, false},
		{"recorded in the stream", unitPart{s: shredded, m: eventstore.Metadata{OccurredAt: at}, evs: []pending{confirmed}}, false},
		{"recorded in the part", unitPart{s: whole, m: eventstore.Metadata{OccurredAt: at},
			evs: []pending{confirmed, {secretsShreddedID(id), domain.PaymentSecretsShredded{OrderID: id, ShreddedAt: at}}}}, false},
		{"known by its revision", unitPart{s: streamAt(order, 1), m: eventstore.Metadata{OccurredAt: at}, evs: []pending{confirmed}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(payConfig(), newMemStore(), newFakeClock(payT0), newFakePayments(), newTestRegistry(), nil,
				WithKeys(newMemKeys()), WithKeyUnits(noUnits{}))
			parts := []unitPart{tc.part}
			evs, data := len(tc.part.evs), len(tc.part.data)
			kw, err := h.shredIn(context.Background(), keyWrite{}, parts)
			if err != nil || kw.shred != id || kw.recorded != tc.want {
				t.Fatalf("shredIn = %+v, %v; want the key of %s deleted, its erasure recorded in the unit %t", kw, err, id, tc.want)
			}
			p := parts[0]
			if !tc.want {
				if len(p.evs) != evs || len(p.data) != data {
					t.Fatalf("part has %d events (%d encoded), want %d (%d) as given", len(p.evs), len(p.data), evs, data)
				}
				return
			}
			if len(p.evs) != evs+1 || (data > 0 && len(p.data) != data+1) {
				t.Fatalf("part has %d events (%d encoded), want %d (%d encoded when given encoded)", len(p.evs), len(p.data), evs+1, data+1)
			}
			last := p.evs[len(p.evs)-1]
			if e, ok := last.e.(domain.PaymentSecretsShredded); !ok || last.id != secretsShreddedID(id) || e.OrderID != id || !e.ShreddedAt.Equal(at) {
				t.Errorf("last event %+v, want PaymentSecretsShredded of %s at %s with id %s", last, id, at, secretsShreddedID(id))
			}
			if data > 0 && (p.data[len(p.data)-1].ID != secretsShreddedID(id) || p.data[len(p.data)-1].Type != domain.TypePaymentSecretsShredded) {
				t.Errorf("last encoded event %s %s, want PaymentSecretsShredded %s", p.data[len(p.data)-1].Type, p.data[len(p.data)-1].ID, secretsShreddedID(id))
			}
			if len(tc.part.evs) != evs {
				t.Errorf("the caller's events changed in place: %d, want %d", len(tc.part.evs), evs)
			}
		})
	}
}
