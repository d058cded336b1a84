package test

import (
	"testing"
	"time"
)

// TestBreak_KilledBeforeTheShredderFlushedKeyIsStillDeleted: the request
// that confirms an order leaves its key to the batched shredder (deleted
// within its delay, or at shutdown by FlushShreds). A SIGKILL right after
// the payment outcome was recorded loses that batch: after the restart the
// process manager's follow-up of the order's end deletes the key, the order
// is confirmed and charged once.
func TestBreak_KilledBeforeTheShredderFlushedKeyIsStillDeleted(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{CrashAt: []string{"payment.recorded"}, Env: fastEnv(), ExternalSim: true}, 2)
	_, id := s.crashOrder(t, res, "tok_visa", "payment.recorded")
	if n := s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = $1`, id); n != 1 {
		t.Fatalf("order_keys: %d rows of order %s right after the crash, want 1 (the shredder's batch died with the process)", n, id)
	}
	s.Restart(withoutCrash)
	s.waitRecovered(t, id, recoveryBound)
	if !eventually(30*time.Second, func() bool {
		return s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = $1`, id) == 0
	}) {
		t.Fatalf("order_keys: order %s's key still there 30 s after the restart, want deleted", id)
	}
	if c := s.checkPaidOnce(t, id); c.Net != 2*priceAmount {
		t.Errorf("GET /_sim/charges: net %d, want %d", c.Net, 2*priceAmount)
	}
}
