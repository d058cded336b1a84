package test

import (
	"testing"
)

// TestBreak_KeyIsDeletedWithTheCommitThatEndsTheOrder: on PostgreSQL the
// order's key is deleted in the unit that records the payment's result and
// ends the order, and its erasure recorded (PaymentSecretsShredded) in the
// same transaction. booking serve is SIGKILLed right before that unit
// (payment.sent, the simulator's webhooks held so that no notice records
// the outcome first) or right after it (payment.recorded). Before it, the
// key is still there and no erasure is left or recorded; after it, the key
// is gone and its erasure recorded once. After the restart the order is
// confirmed and charged once, its key is gone, no erasure is left and
// exactly one PaymentSecretsShredded is recorded.
func TestBreak_KeyIsDeletedWithTheCommitThatEndsTheOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		step  string
		ended bool // the crash comes after the unit that ends the order
	}{{"payment.sent", false}, {"payment.recorded", true}} {
		t.Run(tc.step, func(t *testing.T) {
			t.Parallel()
			s, _, res := mustStartReserved(t, Options{CrashAt: []string{tc.step}, Env: fastEnv(), ExternalSim: true}, 2)
			if !tc.ended {
				s.pauseWebhooks(t)
			}
			_, id := s.crashOrder(t, res, "tok_visa", tc.step)
			keys := s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = $1`, id)
			left := s.queryInt(t, `SELECT count(*) FROM order_key_erasures WHERE order_id = $1`, id)
			recorded := s.countType(t, "order-"+id, "PaymentSecretsShredded")
			ends := s.countType(t, "order-"+id, "OrderConfirmed")
			if tc.ended && (keys != 0 || ends != 1 || recorded != 1) {
				t.Fatalf("after the crash at %s: %d key rows, %d OrderConfirmed, %d erasures left, %d PaymentSecretsShredded; want no key, the order ended, its erasure recorded once",
					tc.step, keys, ends, left, recorded)
			}
			if !tc.ended && (keys != 1 || ends != 0 || left != 0 || recorded != 0) {
				t.Fatalf("after the crash at %s: %d key rows, %d OrderConfirmed, %d erasures left, %d PaymentSecretsShredded; want the key, no end, no erasure",
					tc.step, keys, ends, left, recorded)
			}
			s.Restart(withoutCrash)
			s.waitRecovered(t, id, recoveryBound)
			s.waitErasures(t, id)
			if c := s.checkPaidOnce(t, id); c.Net != 2*priceAmount {
				t.Errorf("GET /_sim/charges: net %d, want %d", c.Net, 2*priceAmount)
			}
		})
	}
}
