package test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The bounded wait (docs/api.md, The idempotency contract, "In flight"): a repeat
// that arrives while the first request with its key is before the commit
// point waits up to BOOKING_IN_USE_WAIT, then answers 409
// idempotency-key-in-use with Retry-After, or the outcome if the first
// request commits inside the wait. The first request is held right before
// the order's commit point (order.claiming); the intent lease is long (30 s)
// so that the wait, not the lease, bounds the repeat.

// sendTimed sends c on its own goroutine and delivers its answer and how
// long it took (the behaviour under test is a duration).
func (s *server) sendTimed(t testing.TB, c call) <-chan timedResp {
	out := make(chan timedResp, 1)
	go func() {
		start := time.Now()
		r, err := s.send(context.Background(), c)
		if err != nil {
			t.Errorf("%s %s: %v", c.Method, c.Path, err)
		}
		out <- timedResp{r, time.Since(start)}
	}()
	return out
}

type timedResp struct {
	r       *resp
	elapsed time.Duration
}

// TestBoundedWait_RepeatOfAHeldRequestIs409AfterTheWait: with
// BOOKING_IN_USE_WAIT=1s, a repeat of an order request held before its
// commit point answers 409 idempotency-key-in-use with a Retry-After of
// whole seconds, not before 1 s and before 6 s, counted once in
// booking_idempotency_in_use_total; the held request, released, answers 201
// and a later repeat replays it.
func TestBoundedWait_RepeatOfAHeldRequestIs409AfterTheWait(t *testing.T) {
	t.Parallel()
	const wait = time.Second
	s, _, res := mustStartReserved(t, Options{Env: map[string]string{
		"BOOKING_IN_USE_WAIT": wait.String(), "BOOKING_INTENT_LEASE": "30s"}}, 2)
	inUse := `booking_idempotency_in_use_total{operation="POST /v1/orders"}`
	before := s.metric(t, s.URL, inUse)
	s.armHold(t, "order.claiming")
	key := newKey()
	c := orderCall(tokAlice, key, res, "tok_visa")
	first := s.sendTimed(t, c)
	s.waitHeld(t, "order.claiming", 1)

	rep := <-s.sendTimed(t, c)
	if rep.r == nil {
		t.FailNow()
	}
	if checkProblem(t, rep.r, http.StatusConflict, "idempotency-key-in-use") {
		ra, err := strconv.Atoi(rep.r.Header.Get("Retry-After"))
		if err != nil || ra < 1 {
			t.Errorf("%s: Retry-After = %q, want whole seconds ≥ 1", rep.r, rep.r.Header.Get("Retry-After"))
		}
	}
	if rep.elapsed < wait || rep.elapsed >= wait+5*time.Second {
		t.Errorf("the repeat was answered after %v, want at least %v (the wait) and under %v", rep.elapsed, wait, wait+5*time.Second)
	}
	if got := s.metric(t, s.URL, inUse); got != before+1 {
		t.Errorf("%s = %v after one 409, want %v", inUse, got, before+1)
	}
	if n := s.streamEventCount(t, "reservation-order-"+res); n != 0 {
		t.Errorf("claim stream has %d events while the first request is held, want 0", n)
	}

	s.releaseHold(t, "order.claiming")
	f := <-first
	if f.r == nil {
		t.FailNow()
	}
	wantStatus(t, f.r, http.StatusCreated)
	s.checkReplayedOrder(t, c, f.r.str("id"))
	s.settle(t)
	s.checkOrders(t, tokAlice, 1, f.r.str("id"))
	s.checkCharges(t, 1, 0)
}

// TestBoundedWait_ReleasedInsideTheWaitAnswersTheOutcome: with
// BOOKING_IN_USE_WAIT=20s, a repeat that has started waiting for a held
// first request (it is parked at intent.waiting first, then let go) answers
// the outcome once the first request is released: 201 with the same order
// and Idempotent-Replayed: true, before the wait is over, and no 409 is
// counted.
func TestBoundedWait_ReleasedInsideTheWaitAnswersTheOutcome(t *testing.T) {
	t.Parallel()
	const wait = 20 * time.Second
	// The write timeout must outlast the longest wait a request may spend
	// (BOOKING_IN_USE_WAIT + Prefer: wait + 5 s; checked at start).
	s, _, res := mustStartReserved(t, Options{Env: map[string]string{
		"BOOKING_IN_USE_WAIT": wait.String(), "BOOKING_INTENT_LEASE": "30s", "BOOKING_HTTP_WRITE_TIMEOUT": "40s"}}, 2)
	inUse := `booking_idempotency_in_use_total{operation="POST /v1/orders"}`
	before := s.metric(t, s.URL, inUse)
	s.armHold(t, "order.claiming")
	s.armHold(t, "intent.waiting")
	c := orderCall(tokAlice, newKey(), res, "tok_visa")
	first := s.sendTimed(t, c)
	s.waitHeld(t, "order.claiming", 1)
	repeat := s.sendTimed(t, c)
	s.waitHeld(t, "intent.waiting", 1)
	// The repeat goes on into its wait; only then does the first request
	// reach its commit point.
	s.releaseHold(t, "intent.waiting")
	s.releaseHold(t, "order.claiming")

	f, rep := <-first, <-repeat
	if f.r == nil || rep.r == nil {
		t.FailNow()
	}
	wantStatus(t, f.r, http.StatusCreated)
	wantStatus(t, rep.r, http.StatusCreated)
	if rep.r.str("id") != f.r.str("id") || !rep.r.replayed() {
		t.Errorf("repeat: %s; want order %s with Idempotent-Replayed: true", rep.r, f.r.str("id"))
	}
	if rep.elapsed >= wait {
		t.Errorf("the repeat was answered after %v, want the outcome before the %v wait ended", rep.elapsed, wait)
	}
	if got := s.metric(t, s.URL, inUse); got != before {
		t.Errorf("%s = %v, want %v: no repeat was answered 409", inUse, got, before)
	}
	s.settle(t)
	s.checkOrders(t, tokAlice, 1, f.r.str("id"))
	s.checkCharges(t, 1, 0)
}
