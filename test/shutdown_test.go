package test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShutdown_BoundedWhileAPaymentStepHangs: booking serve is killed right
// after an order's unit committed (order.claimed: its intent, the claim,
// the order placed and attempt 1's lease, nothing sent); the restarted
// process's reconciler takes the attempt over once that lease (75 s) has
// passed and sends it (not the request or recovery, whose background steps
// are not waited for at shutdown). The provider holds that send (tok_slow,
// 80 s, longer than the 70 s provider timeout, so the send is still in
// flight when SIGTERM arrives even on a starved machine). With
// BOOKING_SHUTDOWN_TIMEOUT=1s the process abandons the step after the
// grace period and exits with status 0 well before the send could end
// (the bound is 30 s; it takes about 2 s, and a shutdown that waited for
// the step took 21 s with a 20 s provider timeout), logging that recovery
// finishes the step. The next process does: one order, confirmed, one
// charge, the seats ordered.
func TestShutdown_BoundedWhileAPaymentStepHangs(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{CrashAt: []string{"order.claimed"}, ExternalSim: true, Env: fastEnv(
		"BOOKING_PROVIDER_TIMEOUT", "70s", "BOOKING_PAYMENT_LEASE", "75s", "BOOKING_PROVIDER_SLOW_DELAY", "80s",
		"BOOKING_SHUTDOWN_TIMEOUT", "1s")}, 2)
	s.crashCall(t, orderCall(tokAlice, newKey(), res, "tok_slow"), "order.claimed")
	id := s.onlyClaimedOrder(t, "after the crash at order.claimed")
	attempts := ofType(s.orderEvents(t, id), "PaymentAttemptStarted")
	if len(attempts) != 1 {
		t.Fatalf("order-%s after the crash: stream %v, want attempt 1 started (the order's unit), nothing sent", id, typesOf(s.orderEvents(t, id)))
	}
	s.Restart(withoutCrash)

	// The attempt is sent once its lease (75 s from the unit) has passed.
	var inFlight struct {
		Keys []string `json:"idempotency_keys"`
	}
	if !eventually(180*time.Second, func() bool {
		s.simGet(t, "/_sim/in-flight", &inFlight)
		return slices.Contains(inFlight.Keys, attempts[0].str("provider_key"))
	}) {
		t.Fatalf("GET /_sim/in-flight = %v 180 s after the restart, want %s in flight (order-%s: %v)",
			inFlight.Keys, attempts[0].str("provider_key"), id, typesOf(s.orderEvents(t, id)))
	}

	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	mark := len(s.logs.String())
	start := time.Now()
	if !p.signalAndWait(syscall.SIGTERM, 60*time.Second) {
		p.signalAndWait(syscall.SIGKILL, 10*time.Second)
		t.Fatalf("booking serve did not exit within 60 s of SIGTERM with BOOKING_SHUTDOWN_TIMEOUT=1s")
	}
	took := time.Since(start)
	if code := p.exitCode(); code != 0 {
		t.Errorf("booking serve exited with status %d after SIGTERM, want 0", code)
	}
	if took > 30*time.Second {
		t.Errorf("booking serve exited %s after SIGTERM with BOOKING_SHUTDOWN_TIMEOUT=1s and a send in flight for up to 70 s; want within 30 s",
			took.Round(100*time.Millisecond))
	}
	if out := s.logs.String()[mark:]; !strings.Contains(out, "shutdown timeout passed with background work still running; it is abandoned") {
		t.Errorf("booking serve's shutdown did not log that a payment step was left to recovery:\n%s", out)
	}
	t.Logf("exited %s after SIGTERM", took.Round(100*time.Millisecond))

	s.Restart()
	s.waitRecovered(t, id, 240*time.Second) // after the lease (75 s) and the charge (80 s)
	if evs := s.orderEvents(t, id); len(ofType(evs, "OrderConfirmed")) != 1 || len(ofType(evs, "PaymentSucceeded")) != 1 {
		t.Errorf("order-%s: stream %v, want one PaymentSucceeded and one OrderConfirmed", id, typesOf(evs))
	}
	s.checkPaidOnce(t, id)
	s.wantAvailable(t, show, 8)
	if r := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil); r.Status != http.StatusOK {
		t.Errorf("%s: want 200", r)
	}
}

// TestShutdown_RequestStillRunningAfterTheGracePeriod: a request still
// running when BOOKING_SHUTDOWN_TIMEOUT (1 s) has passed (an order waiting,
// with Prefer: wait=10, for a payment the provider takes 15 s to answer) is
// cut off as a crash would cut it: booking serve exits with status 0 within
// seconds, logs that requests were cut off, the client gets no answer
// (nothing acknowledged), and after a restart the order is paid once and
// its repeat under the same key answers it.
func TestShutdown_RequestStillRunningAfterTheGracePeriod(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{ExternalSim: true, Env: fastEnv(
		"BOOKING_PROVIDER_TIMEOUT", "20s", "BOOKING_PAYMENT_LEASE", "25s", "BOOKING_PROVIDER_SLOW_DELAY", "15s",
		"BOOKING_SHUTDOWN_TIMEOUT", "1s")}, 2)
	key := newKey()
	answered := make(chan *resp, 1)
	go func() {
		r, err := s.send(context.Background(), orderCall(tokAlice, key, res, "tok_slow"))
		if err != nil {
			r = nil
		}
		answered <- r
	}()
	var inFlight struct {
		Keys []string `json:"idempotency_keys"`
	}
	if !eventually(60*time.Second, func() bool {
		s.simGet(t, "/_sim/in-flight", &inFlight)
		return len(inFlight.Keys) == 1
	}) {
		t.Fatalf("GET /_sim/in-flight = %v, want the order's payment in flight", inFlight.Keys)
	}

	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	mark := len(s.logs.String())
	if !p.signalAndWait(syscall.SIGTERM, 30*time.Second) {
		p.signalAndWait(syscall.SIGKILL, 10*time.Second)
		t.Fatalf("booking serve did not exit within 30 s of SIGTERM with BOOKING_SHUTDOWN_TIMEOUT=1s and a request running")
	}
	if code := p.exitCode(); code != 0 {
		t.Errorf("booking serve exited with status %d after SIGTERM with a request running past the grace period, want 0 (logs: %s)",
			code, tail(s.logs.String()[mark:], 5))
	}
	if out := s.logs.String()[mark:]; !strings.Contains(out, "shutdown timeout passed with requests still running") {
		t.Errorf("booking serve's shutdown did not log that requests were cut off:\n%s", tail(out, 10))
	}
	if r := <-answered; r != nil {
		t.Errorf("the request cut off at shutdown was answered %s; want no answer", r)
	}

	s.Restart()
	id := s.onlyClaimedOrder(t, "after the shutdown")
	s.waitRecovered(t, id, 120*time.Second) // after the lease (25 s) and the charge (15 s)
	r := s.mustOrder(t, tokAlice, key, res, "tok_slow")
	if got := orderIDOf(t, r); got != id || !r.replayed() {
		t.Errorf("the repeat after the restart answered order %s (replayed %v), want order %s replayed", got, r.replayed(), id)
	}
	s.checkPaidOnce(t, id)
	s.wantAvailable(t, show, 8)
}
