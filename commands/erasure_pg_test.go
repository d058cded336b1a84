package commands

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

// TestPGRacingEndsOfOneOrderRecordOneErasure: with key units, the
// drive of an order's payment (process A, parked right after the provider
// call) and a success notice delivered to another process (B) record the
// same result; B's unit may carry PaymentSecretsShredded or not (B noted
// the key deleted). Whoever commits first, the other's unit must resolve
// (a repeat or a decision again on reads): PlaceOrder answers the order
// confirmed, the notice is acknowledged, the order stream holds one
// PaymentSucceeded, one OrderConfirmed and at most one
// PaymentSecretsShredded, and the key is gone.
func TestPGRacingEndsOfOneOrderRecordOneErasure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		bNoted     bool // B noted the order's key deleted (no erasure in its unit)
		driveFirst bool // A's unit commits before B's notice is handled
		noticeToA  bool // the notice goes to A itself (it waits for the drive)
	}{
		{"notice first, both record the erasure", false, false, false},
		{"notice first, B noted the key deleted", true, false, false},
		{"drive first, both record the erasure", false, true, false},
		{"drive first, B noted the key deleted", true, true, false},
		{"notice to the driving process", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newPGFix(t, providersim.Config{})
			f.pauseWebhooks(true)
			units := keystore.Units{Events: f.store, Keys: f.keys}
			hooks, reached, release := blockAt("payment.sent")
			a := f.handler("pg-a", nil, WithHooks(hooks), WithKeyUnits(units))
			b := f.handler("pg-b", nil, WithKeyUnits(units))
			done := make(chan OrderResult, 1)
			go func() { done <- f.placeOrder(a, distinctToken(providersim.TokenVisa), 20*time.Second) }()
			<-reached
			var pay provider.Payment
			for _, c := range f.sim.Charges() {
				if c.Status == provider.PaymentSucceeded {
					p, err := f.client.GetPayment(ctx, c.ID)
					if err != nil {
						t.Fatal(err)
					}
					pay = p
				}
			}
			if pay.ID == "" {
				t.Fatal("no succeeded payment at the simulator")
			}
			orderID := pay.OrderID()
			if tc.bNoted {
				// As B's shred (keyShredder) leaves it: the key deleted, its
				// erasure left to record, noted in B's written set.
				if err := f.keys.Shred(ctx, orderID); err != nil {
					t.Fatal(err)
				}
				b.streams.noteDone(keyShredded(orderID))
			}
			notice := func() error {
				h := b
				if tc.noticeToA {
					h = a
				}
				return h.HandleProviderEvent(ctx, payEvent("evt_race", provider.EventPaymentIntentSucceeded, pay))
			}
			var res OrderResult
			var nerr error
			if tc.driveFirst {
				close(release)
				res = <-done
				nerr = notice()
			} else {
				nerr = notice()
				close(release)
				res = <-done
			}
			if nerr != nil {
				t.Errorf("HandleProviderEvent = %v, want nil", nerr)
			}
			if !res.Final || res.Order.Status != domain.OrderStatusConfirmed {
				t.Errorf("PlaceOrder = final %v, %s; want confirmed", res.Final, res.Order.Status)
			}
			types := f.types(orderID)
			count := func(typ string) int { return countOf(types, typ) }
			if count(evSucceeded) != 1 || count(evConfirmed) != 1 || count(domain.TypePaymentSecretsShredded) > 1 {
				t.Errorf("order stream %v: want one %s, one %s, at most one PaymentSecretsShredded", types, evSucceeded, evConfirmed)
			}
			if _, ok, err := f.keys.Key(ctx, orderID); ok || err != nil {
				t.Errorf("key present %v (%v), want deleted", ok, err)
			}
			f.wantCharges(t, orderID, 1500, 1)
			// The reconciler's pass leaves exactly one erasure, and nothing to record.
			a.recordErasures(ctx)
			if types := f.types(orderID); countOf(types, domain.TypePaymentSecretsShredded) != 1 {
				t.Errorf("after the reconciler's pass: %v, want one PaymentSecretsShredded", types)
			}
			if e, _ := f.keys.Erasures(ctx, 10); len(e) != 0 {
				t.Errorf("erasures left after the reconciler's pass: %v", e)
			}
		})
	}
}

// countOf returns how many of types are typ.
func countOf(types []string, typ string) int {
	n := 0
	for _, x := range types {
		if x == typ {
			n++
		}
	}
	return n
}
