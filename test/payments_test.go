package test

// End-to-end payment scenarios: leases and fencing, reconciliation of
// unknown outcomes, refunds of redundant effects, webhooks. Every test counts the simulator's charges net of refunds and the
// events of the order stream, and asserts exact statuses.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// ---------------------------------------------------------------------------
// Orders and their streams

// placeOrderWait posts an order with Prefer: wait=N (N < 0 sends no Prefer).
func (s *server) placeOrderWait(t testing.TB, key, resID, token string, wait int) *resp {
	t.Helper()
	c := orderCall(tokAlice, key, resID, token)
	if wait >= 0 {
		c.Header = map[string]string{"Prefer": "wait=" + strconv.Itoa(wait)}
	}
	return s.doCall(t, c)
}

// mustPlaceOrder posts an order like placeOrderWait, stops the test unless
// the answer's status is one of want, and returns the order id.
func (s *server) mustPlaceOrder(t testing.TB, key, resID, token string, wait int, want ...int) string {
	t.Helper()
	r := s.placeOrderWait(t, key, resID, token, wait)
	if !slices.Contains(want, r.Status) {
		t.Fatalf("%s, want a status in %v", r, want)
	}
	return orderIDOf(t, r)
}

// waitStatus polls GET /v1/orders/{id} until its status is one of want, for
// up to d, and returns the last answer.
func (s *server) waitStatus(t testing.TB, id string, d time.Duration, want ...string) *resp {
	t.Helper()
	var r *resp
	if !eventually(d, func() bool {
		r = s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
		return slices.Contains(want, r.str("status"))
	}) {
		t.Fatalf("%s after %s, want status in %v", r, d, want)
	}
	return r
}

// orderEvent is an event of an order stream.
type orderEvent struct {
	Revision   int64
	Type       string
	RecordedAt time.Time
	Data       map[string]any
}

func (e orderEvent) str(k string) string { v, _ := e.Data[k].(string); return v }
func (e orderEvent) num(k string) int    { v, _ := e.Data[k].(float64); return int(v) }

// orderEvents returns the events of order-{id} in revision order, read
// through the event log (eventstore.Store) the service writes.
func (s *server) orderEvents(t testing.TB, id string) []orderEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs, err := s.log.ReadStream(ctx, "order-"+id, 0, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("read order-%s: %v", id, err)
	}
	out := make([]orderEvent, len(recs))
	for i, r := range recs {
		out[i] = orderEvent{Revision: int64(r.Revision), Type: r.Type, RecordedAt: r.RecordedAt}
		_ = json.Unmarshal(r.Data, &out[i].Data)
	}
	return out
}

func ofType(evs []orderEvent, typ string) []orderEvent {
	var out []orderEvent
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func typesOf(evs []orderEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// wantCounts checks the number of events of each type in evs.
func wantCounts(t testing.TB, id string, evs []orderEvent, want map[string]int) {
	t.Helper()
	for typ, n := range want {
		if got := len(ofType(evs, typ)); got != n {
			t.Errorf("order-%s: %d %s, want %d (stream %v)", id, got, typ, n, typesOf(evs))
		}
	}
}

// wantOneAttempt checks the number of events of each type in evs
// (wantCounts) and that the order never started a second payment attempt
// (wantNoSecondAttempt).
func wantOneAttempt(t testing.TB, id string, evs []orderEvent, want map[string]int) {
	t.Helper()
	wantCounts(t, id, evs, want)
	wantNoSecondAttempt(t, id, evs)
}

// wantNoSecondAttempt checks that every PaymentAttemptStarted is attempt 1.
func wantNoSecondAttempt(t testing.TB, id string, evs []orderEvent) {
	t.Helper()
	for _, e := range ofType(evs, "PaymentAttemptStarted") {
		if e.num("attempt") != 1 {
			t.Errorf("order-%s: PaymentAttemptStarted of attempt %d at revision %d, want only attempt 1 (stream %v)",
				id, e.num("attempt"), e.Revision, typesOf(evs))
		}
	}
}

// checkRefundsRecordedFirst checks that every refund the simulator made has
// its RefundRequested (key refund-{paymentID}, sent as the refund's
// metadata[refund_key]) in some order stream, recorded no later than the
// refund was created (the simulator's clock, converted to the base clock
// with offset, at its 1 s resolution).
func (s *server) checkRefundsRecordedFirst(t testing.TB, offset time.Duration) {
	t.Helper()
	rows := s.queryRows(t, `SELECT convert_from(data,'UTF8')::jsonb->>'key', stream,
			to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
		FROM events WHERE type = 'RefundRequested'`)
	requested := map[string]time.Time{}
	for _, r := range rows {
		at, err := time.Parse("2006-01-02T15:04:05.999999Z", r[2])
		if err != nil {
			t.Fatalf("recorded_at %q: %v", r[2], err)
		}
		requested[r[0]] = at
	}
	for _, re := range s.simRefunds(t) {
		key := re.Metadata["refund_key"]
		at, ok := requested[key]
		if !ok {
			t.Errorf("the simulator made refund %s of payment %s under key %q, but no RefundRequested records that key (requested: %v)",
				re.ID, re.PaymentIntent, key, requested)
			continue
		}
		created := time.Unix(re.Created, 0)
		if created.After(time.Now().Add(time.Hour)) { // made after the clock was advanced
			created = created.Add(-offset)
		}
		if at.Truncate(time.Second).After(created) {
			t.Errorf("refund %s of payment %s was created at %s, before its RefundRequested was recorded (%s)",
				re.ID, re.PaymentIntent, created.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339Nano))
		}
	}
}

// metric returns the value of a counter line of GET /metrics of the
// booking serve whose API is at base (its admin listener, adminOf), 0 when
// absent.
func (s *server) metric(t testing.TB, base, line string) float64 {
	t.Helper()
	for _, l := range strings.Split(s.scrape(t, s.adminOf(t, base)), "\n") {
		if strings.HasPrefix(l, line+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(l, line)), 64)
			return v
		}
	}
	return 0
}

// ---------------------------------------------------------------------------
// Processes: pause/resume the serve process, and a second serve process on
// the same database and simulator.

// signalServe sends sig to the current booking serve process.
func (s *server) signalServe(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to booking serve: %v", sig, err)
	}
	fmt.Fprintf(s.logs, "=== e2e: %v sent to booking serve (pid %d)\n", sig, p.cmd.Process.Pid)
}

// pauseServe SIGSTOPs booking serve; a cleanup resumes it (SIGCONT) before
// the harness stops it.
func (s *server) pauseServe(t *testing.T) {
	t.Helper()
	s.signalServe(t, syscall.SIGSTOP)
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
}

// peer is a second booking serve on the same database and provider.
type peer struct {
	URL  string
	proc *proc
}

// startPeer starts another booking serve on the database of s, with its own
// HTTP and NATS ports and data directory, against the external simulator of
// s. A cleanup stops it.
func (s *server) startPeer(t *testing.T) *peer {
	t.Helper()
	if !s.opts.ExternalSim {
		t.Fatal("startPeer needs Options.ExternalSim")
	}
	httpAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	natsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	adminAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.admins.Store("http://"+httpAddr, "http://"+adminAddr)
	env := s.env()
	env = append(env, "BOOKING_HTTP_ADDR="+httpAddr, "BOOKING_NATS_ADDR="+natsAddr, "BOOKING_ADMIN_ADDR="+adminAddr,
		"BOOKING_DATA_DIR="+t.TempDir(), "BOOKING_TEST_CRASH_AT=", "BOOKING_TEST_HOLD_AT=")
	fmt.Fprintf(s.logs, "=== e2e: starting a second booking serve on %s\n", httpAddr)
	p, err := startProc("booking serve (peer)", []string{"serve"}, env, s.logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.hasExited() && !p.signalAndWait(syscall.SIGTERM, 60*time.Second) {
			p.signalAndWait(syscall.SIGKILL, 10*time.Second)
			t.Errorf("the second booking serve did not exit within 60 s of SIGTERM; killed")
		}
	})
	s.waitHealthy(t, p, "http://"+httpAddr+"/healthz")
	return &peer{URL: "http://" + httpAddr, proc: p}
}

// executorsIn returns the executor ids (owners of payment leases) that
// booking serve logged at start in logs, in the order they were logged.
func executorsIn(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if !strings.Contains(l, "booking serve listening") {
			continue
		}
		if _, v, ok := strings.Cut(l, "executor="); ok {
			out = append(out, strings.Fields(v)[0])
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// 1. Killed after the provider charged, before the outcome was recorded.

// TestPayment_KilledAfterChargeBeforeRecordIsReconciled: booking serve is
// SIGKILLed right after the provider answered a successful charge and before
// the outcome was recorded (payment.sent); webhooks are paused, so after a
// restart only the reconciler can learn the charge: it records it without a
// repeat from the client; one charge, the order confirmed, no second attempt.
func TestPayment_KilledAfterChargeBeforeRecordIsReconciled(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{CrashAt: []string{"payment.sent"}, Env: fastEnv(), ExternalSim: true}, 2)
	s.pauseWebhooks(t)
	_, id := s.crashOrder(t, res, "tok_visa", "payment.sent")
	if m := s.orderMoney(t, id); m.Succeeded != 1 || m.Net != 2*priceAmount {
		t.Fatalf("simulator after the crash: %+v, want 1 succeeded charge of %d (the provider charged)", m, 2*priceAmount)
	}
	evs := s.orderEvents(t, id)
	wantCounts(t, id, evs, map[string]int{"PaymentAttemptStarted": 1, "PaymentSucceeded": 0, "PaymentOutcomeUnknown": 0, "OrderConfirmed": 0})

	s.Restart(withoutCrash)
	r := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review", "cancelled")
	if r.str("status") != "confirmed" {
		t.Fatalf("%s, want status confirmed", r)
	}
	if tickets, _ := r.get("tickets").([]any); len(tickets) != 2 {
		t.Errorf("%s: want 2 tickets", r)
	}
	if found := s.metric(t, s.URL, `booking_payment_reconciliations_total{result="found_succeeded"}`); found < 1 {
		t.Errorf("GET /metrics: booking_payment_reconciliations_total{result=\"found_succeeded\"} = %v, want ≥ 1 (the reconciler found the charge)", found)
	}

	// Webhooks delivered now change nothing.
	s.resumeWebhooks(t, "payment_intent.succeeded")
	s.settle(t)
	evs = s.orderEvents(t, id)
	wantOneAttempt(t, id, evs, map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "PaymentFailed": 0,
		"RefundRequested": 0, "OrderFailed": 0, "OrderNeedsReview": 0})
	if m := s.orderMoney(t, id); m.Succeeded != 1 || m.Failed != 0 || m.Net != 2*priceAmount {
		t.Errorf("simulator: order %s charges %+v, want exactly 1 succeeded, net %d", id, m, 2*priceAmount)
	}
	s.checkCharges(t, 1, 0)
	s.checkOrders(t, tokAlice, 1, id)
	s.wantAvailable(t, show, 8)
}

// ---------------------------------------------------------------------------
// 2. Provider slower than the lease.

// TestPayment_ProviderSlowerThanLeaseIsTakenOver: with the shortest valid
// lease (provider timeout 1 s, lease 3.5 s) and tok_slow taking 30 s, the
// owner is paused (SIGSTOP) while its send is in flight; a second booking
// serve on the same database takes the attempt over once the lease expired
// (a fenced PaymentAttemptStarted of the same attempt and key, by another
// owner), retries with the same key until the provider's slow charge
// commits, and confirms (the charge takes 30 s so that the takeover, due
// when the lease expires 3.5 s after the send, comes first even on a
// starved machine: at 7 s, a run under make test-stress once saw the charge
// commit first, and the second process recorded it without a takeover); after the owner resumes it appends no lease of its
// own (its stale state is fenced by revision); one charge.
func TestPayment_ProviderSlowerThanLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{ExternalSim: true, Env: fastEnv(
		"BOOKING_PROVIDER_TIMEOUT", "1s", "BOOKING_PAYMENT_LEASE", "3500ms", "BOOKING_PROVIDER_SLOW_DELAY", "30s")}, 1)
	key := newKey()
	// The owner's send (1 s timeout) returns into a hold at payment.sent,
	// whenever that is, and records nothing until the test releases it
	// after the resume: so the test knows what the stale owner did last.
	s.armHold(t, "payment.sent")
	id := s.mustPlaceOrder(t, key, res, "tok_slow", 0, http.StatusAccepted)
	var first orderEvent
	if !eventually(30*time.Second, func() bool {
		a := ofType(s.orderEvents(t, id), "PaymentAttemptStarted")
		if len(a) > 0 {
			first = a[0]
		}
		return len(a) > 0
	}) {
		t.Fatalf("order-%s: no PaymentAttemptStarted within 30 s", id)
	}
	owner := first.str("owner")
	s.waitInFlight(t, first.str("provider_key")) // the send is at the provider (tok_slow: 30 s)
	s.pauseServe(t)
	b := s.startPeer(t)

	// The client repeats on the second process; the lease has expired by then
	// or expires while it waits.
	var rb *resp
	if !eventually(120*time.Second, func() bool {
		rb = s.doCall(t, call{Method: "POST", Path: b.URL + "/v1/orders", Token: tokAlice, Key: keyOf(key),
			Body: orderBody(res, "tok_slow"), Header: map[string]string{"Prefer": "wait=5"}})
		return rb.Status == http.StatusCreated
	}) {
		t.Fatalf("%s: the second process did not confirm the order within 120 s", rb)
	}
	if rb.str("status") != "confirmed" || rb.str("id") != id {
		t.Errorf("%s: want order %s confirmed", rb, id)
	}
	evs := s.orderEvents(t, id)
	var takeover *orderEvent
	for i, e := range ofType(evs, "PaymentAttemptStarted") {
		if i > 0 && e.str("owner") != owner {
			takeover = &e
			break
		}
	}
	if takeover == nil {
		t.Fatalf("order-%s: no PaymentAttemptStarted by another owner than %s (stream %v)", id, owner, typesOf(evs))
	}
	if takeover.num("attempt") != 1 || takeover.str("provider_key") != first.str("provider_key") ||
		takeover.str("request_sha256") != first.str("request_sha256") {
		t.Errorf("order-%s: takeover %v is not the same attempt, key and request as %v", id, takeover.Data, first.Data)
	}
	leaseUntil, _ := time.Parse(time.RFC3339Nano, first.str("lease_until"))
	// The last lease of the first owner ended before the takeover was recorded.
	for _, e := range ofType(evs, "PaymentAttemptStarted") {
		if e.Revision < takeover.Revision && e.str("owner") == owner {
			leaseUntil, _ = time.Parse(time.RFC3339Nano, e.str("lease_until"))
		}
	}
	if takeover.RecordedAt.Before(leaseUntil) {
		t.Errorf("order-%s: takeover recorded at %s, inside the owner's lease (until %s)", id, takeover.RecordedAt, leaseUntil)
	}

	// The stale owner resumes: it must not append a lease after the takeover.
	s.signalServe(t, syscall.SIGCONT)
	s.waitHeld(t, "payment.sent", 1)
	s.releaseHold(t, "payment.sent")
	s.settle(t)
	evs = s.orderEvents(t, id)
	for _, e := range ofType(evs, "PaymentAttemptStarted") {
		if e.Revision > takeover.Revision && e.str("owner") == owner {
			t.Errorf("order-%s: the stale owner %s appended PaymentAttemptStarted at revision %d after the takeover at %d",
				id, owner, e.Revision, takeover.Revision)
		}
	}
	wantOneAttempt(t, id, evs, map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "PaymentFailed": 0, "RefundRequested": 0,
		"OrderNeedsReview": 0})
	if st := s.orderStatus(t, tokAlice, id); st != "confirmed" {
		t.Errorf("GET /v1/orders/%s: status %q, want confirmed", id, st)
	}
	if m := s.orderMoney(t, id); m.Succeeded != 1 || m.Net != priceAmount {
		t.Errorf("simulator: order %s charges %+v, want 1 succeeded, net %d", id, m, priceAmount)
	}
	s.checkCharges(t, 1, 0)
	t.Logf("lease_fenced on the resumed owner: %v", s.metric(t, s.URL, `booking_payment_reconciliations_total{result="lease_fenced"}`))
}

// ---------------------------------------------------------------------------
// 3. Connection dropped after commit.

// TestPayment_TimeoutAfterCommitIsReconciledWithoutSecondCharge:
// tok_timeout_after_commit makes the PaymentIntent succeed, then drops the
// connection: the outcome is recorded unknown, then reconciled by the list
// of PaymentIntents created in the attempt's range to succeeded; one
// PaymentIntent, no second attempt. Webhooks are paused so only the
// reconciliation can learn it, and their later delivery changes nothing.
func TestPayment_TimeoutAfterCommitIsReconciledWithoutSecondCharge(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{Env: fastEnv()}, 2)
	s.pauseWebhooks(t)
	id := s.mustPlaceOrder(t, newKey(), res, "tok_timeout_after_commit", 10, http.StatusCreated, http.StatusAccepted)
	g := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review")
	if g.str("status") != "confirmed" {
		t.Fatalf("%s, want confirmed", g)
	}
	evs := s.orderEvents(t, id)
	unknown := ofType(evs, "PaymentOutcomeUnknown")
	succ := ofType(evs, "PaymentSucceeded")
	if len(unknown) != 1 || len(succ) != 1 || unknown[0].Revision > succ[0].Revision {
		t.Errorf("order-%s: stream %v, want exactly one PaymentOutcomeUnknown followed by one PaymentSucceeded", id, typesOf(evs))
	}
	s.resumeWebhooks(t, "payment_intent.succeeded")
	s.settle(t)
	evs = s.orderEvents(t, id)
	wantOneAttempt(t, id, evs, map[string]int{"PaymentOutcomeUnknown": 1, "PaymentSucceeded": 1, "OrderConfirmed": 1,
		"PaymentFailed": 0, "RefundRequested": 0, "OrderNeedsReview": 0})
	if m := s.orderMoney(t, id); m.Succeeded != 1 || m.Net != 2*priceAmount {
		t.Errorf("simulator: order %s charges %+v, want 1 succeeded, net %d", id, m, 2*priceAmount)
	}
	s.checkCharges(t, 1, 0)
	if st := s.orderStatus(t, tokAlice, id); st != "confirmed" {
		t.Errorf("GET /v1/orders/%s: status %q, want confirmed", id, st)
	}
}

// ---------------------------------------------------------------------------
// 4. Webhooks: early, duplicated, late, reordered; forged and stale.

// postWebhook posts body to the API's webhook endpoint with signature sig
// (none if "").
func (s *server) postWebhook(t testing.TB, body []byte, sig string) *resp {
	t.Helper()
	c := call{Method: "POST", Path: "/v1/provider/webhooks", Body: body}
	if sig != "" {
		c.Header = map[string]string{"Stripe-Signature": sig}
	}
	return s.doCall(t, c)
}

// TestPayment_WebhooksEarlyDuplicatedLateAndReorderedConfirmOnce: the
// provider's success notice arrives (delay 0) while the API's own send of
// tok_slow has timed out and not recorded the outcome; it is delivered twice
// at once, again 10 minutes later (simulated clock, resent), and after an
// older failure notice of the same order held back (reorder). One
// PaymentSucceeded, one OrderConfirmed; the order stays confirmed; one
// successful charge.
func TestPayment_WebhooksEarlyDuplicatedLateAndReorderedConfirmOnce(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{ExternalSim: true, Env: fastEnv(
		"BOOKING_PROVIDER_TIMEOUT", "1s", "BOOKING_PAYMENT_LEASE", "3500ms", "BOOKING_PROVIDER_SLOW_DELAY", "2500ms")})
	// Every new event gets one duplicate; every other event is held back
	// until the next one overtakes it (the bound, 2 min, is only a safety
	// net: a busy machine may take seconds to commit the slow charge).
	s.simFaults(t, map[string]any{"webhook_delay_ms": 0, "webhook_duplicates": 1, "webhook_reorder": true,
		"webhook_reorder_hold_ms": 120000})
	show := s.mustCreateShow(t, 10)
	res := s.mustReserve(t, tokAlice, show, 2)
	// The order's send is held right before the provider call until the
	// older failure notice exists, however slow the machine.
	s.armHold(t, "payment.fenced")
	id := s.mustPlaceOrder(t, newKey(), res, "tok_slow", 0, http.StatusAccepted)
	s.waitHeld(t, "payment.fenced", 1)
	// An older failure notice about this order: a declined PaymentIntent
	// with its order_id but no attempt (not the outcome of any attempt of
	// the order: ignored), made before the slow one is sent. It is the
	// first new event, so it is held back until the success notice
	// overtakes it.
	failedCharge := s.simMakePayment(t, "tok_decline", id, 0, 2*priceAmount, nil)
	s.releaseHold(t, "payment.fenced")

	g := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review", "cancelled")
	if g.str("status") != "confirmed" {
		t.Fatalf("%s, want confirmed", g)
	}
	m := s.orderMoney(t, id)
	var okCharge string
	for _, c := range m.All {
		if c.Status == "succeeded" {
			okCharge = c.ID
		}
	}
	if m.Succeeded != 1 || m.Failed != 1 || okCharge == "" {
		t.Fatalf("simulator: order %s charges %+v, want 1 succeeded and the 1 declined", id, m)
	}
	succEv := s.simEventOf(t, "payment_intent.succeeded", okCharge)
	failEv := s.simEventOf(t, "payment_intent.payment_failed", failedCharge)
	if failEv.Created > succEv.Created {
		t.Errorf("the failure notice (created %d) is not older than the success notice (%d)", failEv.Created, succEv.Created)
	}
	// Wait for both notices and their duplicates to be acknowledged.
	firstAck := func(evID string) (time.Time, int) {
		var at time.Time
		n := 0
		for _, d := range s.simDeliveries(t) {
			if d.EventID == evID && d.Delivered {
				n++
				if at.IsZero() || d.At.Before(at) {
					at = d.At
				}
			}
		}
		return at, n
	}
	if !eventually(60*time.Second, func() bool {
		_, a := firstAck(succEv.ID)
		_, b := firstAck(failEv.ID)
		return a >= 2 && b >= 2
	}) {
		t.Fatalf("GET /_sim/webhooks: the notices and their duplicates were not all acknowledged: %+v", s.simDeliveries(t))
	}
	succAt, _ := firstAck(succEv.ID)
	failAt, _ := firstAck(failEv.ID)
	if !succAt.Before(failAt) {
		t.Errorf("GET /_sim/webhooks: the older failure notice was acknowledged at %s, before the success notice (%s): not reordered",
			failAt, succAt)
	}
	if st := s.orderStatus(t, tokAlice, id); st != "confirmed" {
		t.Errorf("GET /v1/orders/%s after the late failure notice: status %q, want confirmed", id, st)
	}
	before := s.settle(t)
	evs := s.orderEvents(t, id)
	// Was the outcome still unrecorded when the notice arrived? The API's own
	// send timed out (1 s) long before the slow charge (2.5 s) committed.
	if len(ofType(evs, "PaymentOutcomeUnknown")) != 1 {
		t.Logf("order-%s: stream %v (no PaymentOutcomeUnknown: the API's send did not time out)", id, typesOf(evs))
	}

	// Twice at once: the success notice, signed now, posted concurrently.
	body := []byte(succEv.raw)
	postNotice := func() *resp { // the success notice, signed at the time of sending
		a, _ := s.send(context.Background(), call{Method: "POST", Path: "/v1/provider/webhooks", Body: body,
			Header: map[string]string{"Stripe-Signature": signWebhook(body, time.Now(), []byte(webhookSecret))}})
		return a
	}
	var wg sync.WaitGroup
	answers := make([]*resp, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = postNotice()
		}()
	}
	wg.Wait()
	// A notice is answered 204 (processed, or a duplicate of a processed
	// event id), or 503 when the provider did not answer the payment's
	// fetch within its 1 s timeout (a busy machine): then it is delivered
	// again, as the provider would, until it is 204.
	for i, a := range answers {
		if a != nil && a.Status == http.StatusServiceUnavailable {
			eventually(60*time.Second, func() bool {
				a = postNotice()
				return a == nil || a.Status != http.StatusServiceUnavailable
			})
			answers[i] = a
		}
		if a == nil || a.Status != http.StatusNoContent {
			t.Errorf("concurrent duplicate webhook: %v, want 204 (after redeliveries of a 503)", a)
		}
	}
	// Again 10 minutes later (the simulator's clock; its signature uses the
	// base clock, so it is not stale), resent by the simulator.
	s.simAdvance(t, "10m")
	wantStatus(t, s.simDo(t, "POST", "/_sim/events/"+succEv.ID+"/resend", nil, nil), http.StatusAccepted)
	wantStatus(t, s.simDo(t, "POST", "/_sim/events/"+failEv.ID+"/resend", nil, nil), http.StatusAccepted)
	if !eventually(30*time.Second, func() bool {
		n := 0
		for _, d := range s.simDeliveries(t) {
			if d.Copy == -1 && d.Delivered {
				n++
			}
		}
		return n == 2
	}) {
		t.Errorf("GET /_sim/webhooks: the resent notices were not acknowledged: %+v", s.simDeliveries(t))
	}
	if after := s.settle(t); after != before {
		t.Errorf("event store: %d events after the duplicate and late notices, want %d (unchanged)", after, before)
	}
	evs = s.orderEvents(t, id)
	// The older failure notice is a decline of a payment that names no
	// attempt of the order: it is not an attempt's outcome, so it is not
	// folded into the order at all.
	wantCounts(t, id, evs, map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "PaymentFailed": 0, "OrderFailed": 0,
		"RefundRequested": 0, "OrderNeedsReview": 0, "OrderCancelled": 0})
	_ = failedCharge
	wantNoSecondAttempt(t, id, evs)
	g = s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
	if g.str("status") != "confirmed" || g.str("payment.charge_id") != okCharge {
		t.Errorf("%s, want confirmed, paid by %s", g, okCharge)
	}
	if tickets, _ := g.get("tickets").([]any); len(tickets) != 2 {
		t.Errorf("%s: want 2 tickets", g)
	}
	if m := s.orderMoney(t, id); m.Succeeded != 1 || m.Net != 2*priceAmount {
		t.Errorf("simulator: order %s charges %+v, want 1 succeeded, net %d", id, m, 2*priceAmount)
	}
}

// TestPayment_OtherPaymentsOfTheAccountAreIgnored: a Stripe webhook
// endpoint receives every event of the account. While the order's attempt
// 1 (tok_slow) is at the provider, a declined PaymentIntent carrying the
// same order_id and attempt but another deployment's metadata appears, and
// a succeeded one of no order at all: their notices are answered 204 and
// ignored (not folded, nothing refunded); the order ends confirmed with its
// own PaymentIntent.
func TestPayment_OtherPaymentsOfTheAccountAreIgnored(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{ExternalSim: true, Env: fastEnv(
		"BOOKING_PROVIDER_TIMEOUT", "1s", "BOOKING_PAYMENT_LEASE", "3500ms", "BOOKING_PROVIDER_SLOW_DELAY", "2500ms")}, 1)
	id := s.mustPlaceOrder(t, newKey(), res, "tok_slow", 0, http.StatusAccepted)
	foreign := s.simMakePayment(t, "tok_decline", id, 1, priceAmount, map[string]string{"deployment": "staging"})
	stray := s.simMakePayment(t, "tok_visa", "", 0, priceAmount, map[string]string{"cart": "42"})
	g := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review", "cancelled")
	var m chargeSummary
	if !eventually(60*time.Second, func() bool { m = s.orderMoney(t, id); return m.Succeeded+m.Failed == 2 }) {
		t.Fatalf("simulator: order %s PaymentIntents %+v, want the other deployment's decline and attempt 1's", id, m)
	}
	s.waitWebhooksDelivered(t)
	for _, d := range s.simDeliveries(t) {
		if d.Delivered && d.StatusCode != http.StatusNoContent {
			t.Errorf("delivery %+v answered %d, want 204", d, d.StatusCode)
		}
	}
	evs := s.orderEvents(t, id)
	m = s.orderMoney(t, id)
	if g.str("status") != "confirmed" {
		t.Errorf("%s, want confirmed: the decline of %s (another deployment) was taken as attempt 1's outcome (stream %v, payments %+v)",
			g, foreign, typesOf(evs), m.All)
	}
	wantOneAttempt(t, id, evs, map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "PaymentFailed": 0, "OrderFailed": 0, "RefundRequested": 0})
	if m.Succeeded != 1 || m.Failed != 1 || m.Net != priceAmount {
		t.Errorf("simulator: order %s PaymentIntents %+v, want the foreign decline and 1 succeeded, net %d", id, m, priceAmount)
	}
	if n := s.countType(t, "order-", "RefundRequested"); n != 0 {
		t.Errorf("event store: %d RefundRequested, want 0 (the stray PaymentIntent %s is no order's)", n, stray)
	}
}

// TestPayment_ForgedOrStaleWebhookIsRefusedAndRecordsNothing: a genuine
// notice of a redundant charge (which, accepted, records a refund) is posted
// with a wrong secret, a tampered body, a timestamp 10 minutes old or ahead,
// a malformed or no signature: each is 400 and the event store is
// unchanged. The same bytes correctly signed are then accepted (204) and
// recorded: the control that the refused ones would have recorded something.
func TestPayment_ForgedOrStaleWebhookIsRefusedAndRecordsNothing(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{ExternalSim: true, Env: fastEnv()}, 1)
	id := s.mustPlaceOrder(t, newKey(), res, "tok_visa", -1, http.StatusCreated)
	s.pauseWebhooks(t)
	extra := s.simMakePayment(t, "tok_visa", id, 1, priceAmount, nil)
	ev := s.simEventOf(t, "payment_intent.succeeded", extra)
	body := []byte(ev.raw)
	before := s.settle(t)
	secret := []byte(webhookSecret)
	now := time.Now()
	tampered := []byte(strings.Replace(string(body), `"object":"event"`, `"object":"event" `, 1))
	cases := []struct {
		name string
		body []byte
		sig  string
		code string
	}{
		{"wrong secret", body, signWebhook(body, now, []byte("whsec_wrong")), "invalid-signature"},
		{"tampered body", tampered, signWebhook(body, now, secret), "invalid-signature"},
		{"stale timestamp", body, signWebhook(body, now.Add(-10*time.Minute), secret), "stale-signature"},
		{"future timestamp", body, signWebhook(body, now.Add(10*time.Minute), secret), "stale-signature"},
		{"malformed header", body, "v1=abc", "invalid-signature"},
		{"no header", body, "", "invalid-signature"},
	}
	for _, c := range cases {
		a := s.postWebhook(t, c.body, c.sig)
		if checkProblem(t, a, http.StatusBadRequest, c.code) {
			if strings.Contains(string(a.Body), webhookSecret) {
				t.Errorf("%s: %s shows the secret", c.name, a)
			}
		}
		if n := s.totalEvents(t); n != before {
			t.Errorf("%s: event store has %d events after the refused webhook, want %d", c.name, n, before)
		}
	}
	if n := s.settle(t); n != before {
		t.Errorf("event store: %d events after the refused webhooks, want %d (nothing recorded)", n, before)
	}
	if m := s.orderMoney(t, id); m.Succeeded != 2 || m.Net != 2*priceAmount {
		t.Errorf("simulator: order %s charges %+v, want 2 succeeded (the paying one and the unrefunded extra one)", id, m)
	}

	// The control: the same bytes, correctly signed, are recorded.
	a := s.postWebhook(t, body, signWebhook(body, time.Now(), secret))
	wantStatus(t, a, http.StatusNoContent)
	if !eventually(30*time.Second, func() bool { return s.orderMoney(t, id).Net == priceAmount }) {
		t.Errorf("simulator: order %s charges %+v, want the extra charge refunded (net %d)", id, s.orderMoney(t, id), priceAmount)
	}
	s.simFaults(t, map[string]any{"webhooks_paused": false})
	s.waitWebhooksDelivered(t)
	evs := s.orderEvents(t, id)
	wantCounts(t, id, evs, map[string]int{"PaymentSucceeded": 2, "OrderConfirmed": 1, "RefundRequested": 1, "RefundSucceeded": 1,
		"OrderNeedsReview": 0})
	if st := s.orderStatus(t, tokAlice, id); st != "confirmed" {
		t.Errorf("GET /v1/orders/%s: status %q, want confirmed", id, st)
	}
	s.checkRefundsRecordedFirst(t, 0)
}

// ---------------------------------------------------------------------------
// 5. Provider 409 key in use, then 200.

// TestPayment_ProviderKeyInUseIsRetriedThenConfirmed: the provider answers
// the first two sends 409 idempotency_key_in_use; the attempt is retried
// with the same key after a backoff (never a decline, never a new attempt)
// and the order is confirmed with one charge.
func TestPayment_ProviderKeyInUseIsRetriedThenConfirmed(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{Env: fastEnv()}, 3)
	s.simFaults(t, map[string]any{"in_use_409": 2})
	r := s.placeOrderWait(t, newKey(), res, "tok_visa", 10)
	wantStatus(t, r, http.StatusCreated)
	id := orderIDOf(t, r)
	if r.str("status") != "confirmed" {
		t.Errorf("%s, want confirmed", r)
	}
	if tickets, _ := r.get("tickets").([]any); len(tickets) != 3 {
		t.Errorf("%s: want 3 tickets", r)
	}
	f := s.simDo(t, "GET", "/_sim/faults", nil, nil)
	if n := f.num("in_use_409"); n != 0 {
		t.Errorf("%s: in_use_409 = %v left, want 0 (both 409s answered)", f, n)
	}
	if n := s.metric(t, s.URL, `booking_payment_reconciliations_total{result="provider_in_use"}`); n != 2 {
		t.Errorf("GET /metrics: provider_in_use = %v, want 2", n)
	}
	s.settle(t)
	evs := s.orderEvents(t, id)
	wantOneAttempt(t, id, evs, map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "PaymentFailed": 0, "OrderFailed": 0,
		"PaymentOutcomeUnknown": 0, "RefundRequested": 0})
	if m := s.orderMoney(t, id); m.Succeeded != 1 || m.Failed != 0 || m.Net != 3*priceAmount {
		t.Errorf("simulator: order %s charges %+v, want 1 succeeded, net %d", id, m, 3*priceAmount)
	}
	s.checkCharges(t, 1, 0)
}

// ---------------------------------------------------------------------------
// 6. Decline.

// TestPayment_DeclineFailsOrderAndReleasesSeats: tok_decline is 402
// payment-declined; the order is failed, its reservation released, its
// seats available again (another customer can hold all of them); one
// failed charge, net 0.
func TestPayment_DeclineFailsOrderAndReleasesSeats(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{Env: fastEnv()})
	show := s.mustCreateShow(t, 5)
	res := s.mustReserve(t, tokAlice, show, 5)
	if got := s.available(t, show); got != 0 {
		t.Fatalf("GET /v1/shows/%s: available = %d after holding all 5, want 0", show, got)
	}
	r := s.placeOrderWait(t, newKey(), res, "tok_decline", -1)
	checkProblem(t, r, http.StatusPaymentRequired, "payment-declined")
	id := orderIDOf(t, r)
	g := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
	if g.str("status") != "failed" || g.str("failure_reason") != "payment_declined" {
		t.Errorf("%s, want status failed, failure_reason payment_declined", g)
	}
	if tickets, _ := g.get("tickets").([]any); len(tickets) != 0 {
		t.Errorf("%s: a failed order shows tickets", g)
	}
	if !eventually(30*time.Second, func() bool { return s.available(t, show) == 5 }) {
		t.Errorf("GET /v1/shows/%s: available = %d after the decline, want 5", show, s.available(t, show))
	}
	if rr := s.do(t, "GET", "/v1/reservations/"+res, tokAlice, "", nil); rr.str("status") != "released" {
		t.Errorf("%s, want status released", rr)
	}
	// Seats available again: Bob holds all of them.
	rb := s.do(t, "POST", "/v1/reservations", tokBob, newKey(), map[string]any{"show_id": show, "quantity": 5})
	wantStatus(t, rb, http.StatusCreated)
	s.settle(t)
	evs := s.orderEvents(t, id)
	wantCounts(t, id, evs, map[string]int{"PaymentAttemptStarted": 1, "PaymentFailed": 1, "OrderFailed": 1,
		"PaymentSucceeded": 0, "OrderConfirmed": 0, "RefundRequested": 0})
	s.wantCount(t, "show-", "SeatsReleased", 1)
	if m := s.orderMoney(t, id); m.Succeeded != 0 || m.Failed != 1 || m.Net != 0 {
		t.Errorf("simulator: order %s charges %+v, want 1 failed, net 0", id, m)
	}
	s.checkCharges(t, 0, 1)
	s.checkCapacity(t, show)
}

// ---------------------------------------------------------------------------
// 7. A charge notice after the order failed.

// TestPayment_ChargeAfterFailureIsRefunded: the order fails by decline;
// then a successful charge for its metadata (attempt 1, another key) is made
// at the provider and notified: a redundant effect, recorded
// (PaymentSucceeded + RefundRequested reason redundant_effect) before the
// refund is sent, then refunded (RefundSucceeded); the order stays failed;
// net charges for the order 0.
func TestPayment_ChargeAfterFailureIsRefunded(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{ExternalSim: true, Env: fastEnv()}, 2)
	r := s.placeOrderWait(t, newKey(), res, "tok_decline", -1)
	checkProblem(t, r, http.StatusPaymentRequired, "payment-declined")
	id := orderIDOf(t, r)
	late := s.simMakePayment(t, "tok_visa", id, 1, 2*priceAmount, nil)

	var m chargeSummary
	if !eventually(30*time.Second, func() bool {
		m = s.orderMoney(t, id)
		return m.Net == 0 && len(ofType(s.orderEvents(t, id), "RefundSucceeded")) == 1
	}) {
		t.Fatalf("simulator: order %s charges %+v; stream %v: want the late charge refunded and recorded",
			id, m, typesOf(s.orderEvents(t, id)))
	}
	s.waitWebhooksDelivered(t) // the charge.refunded notice
	evs := s.orderEvents(t, id)
	wantCounts(t, id, evs, map[string]int{"PaymentFailed": 1, "OrderFailed": 1, "PaymentSucceeded": 1, "RefundRequested": 1,
		"RefundSucceeded": 1, "OrderConfirmed": 0, "OrderNeedsReview": 0})
	if rq := ofType(evs, "RefundRequested"); len(rq) == 1 {
		if rq[0].str("charge_id") != late || rq[0].str("reason") != "redundant_effect" || rq[0].str("key") != "refund-"+late {
			t.Errorf("order-%s: RefundRequested %v, want charge %s, reason redundant_effect, key refund-%s", id, rq[0].Data, late, late)
		}
		if rs := ofType(evs, "RefundSucceeded"); len(rs) == 1 && rs[0].Revision < rq[0].Revision {
			t.Errorf("order-%s: RefundSucceeded before RefundRequested (%v)", id, typesOf(evs))
		}
	}
	if st := s.orderStatus(t, tokAlice, id); st != "failed" {
		t.Errorf("GET /v1/orders/%s: status %q, want failed", id, st)
	}
	if m := s.orderMoney(t, id); m.Succeeded != 1 || m.Failed != 1 || m.Net != 0 {
		t.Errorf("simulator: order %s charges %+v, want the declined one and the refunded late one, net 0", id, m)
	}
	if refs := s.simRefunds(t); len(refs) != 1 || refs[0].PaymentIntent != late || refs[0].Amount != 2*priceAmount {
		t.Errorf("simulator: refunds %+v, want exactly one of %d for %s", refs, 2*priceAmount, late)
	}
	s.checkRefundsRecordedFirst(t, 0)
	if n := s.metric(t, s.URL, `booking_redundant_effects_total`); n != 1 {
		t.Logf("GET /metrics: booking_redundant_effects_total = %v", n)
	}
	s.wantAvailable(t, show, 10)
}

// ---------------------------------------------------------------------------
// 8. Cancel racing a payment, 50 times.

// TestPayment_CancelRacingPaymentEndsInExactlyOneOutcome: 50 orders, each
// raced by its cancel (no wait on the order, the cancel sent at once or
// after a short pause; tok_visa and a short tok_slow alternate). Every run
// ends, by polling, in exactly one of: cancel accepted → cancelled, no valid
// tickets, net charge 0; cancel refused → confirmed, tickets, charged once.
// Never both, never neither.
func TestPayment_CancelRacingPaymentEndsInExactlyOneOutcome(t *testing.T) {
	t.Parallel()
	const runs = 50
	s := mustStart(t, Options{ExternalSim: true, Env: fastEnv("BOOKING_PROVIDER_SLOW_DELAY", "300ms")})
	show := s.mustCreateShow(t, runs)
	type run struct {
		id, cancelStatus string
		cancelCode       int
	}
	out := make([]run, runs)
	sem := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i := range runs {
		res := s.mustReserve(t, tokAlice, show, 1)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			token := "tok_visa"
			if i%2 == 1 {
				token = "tok_slow"
			}
			r, err := s.send(context.Background(), call{Method: "POST", Path: "/v1/orders", Token: tokAlice, Key: keyOf(newKey()),
				Body: orderBody(res, token), Header: map[string]string{"Prefer": "wait=0"}})
			if err != nil || (r.Status != http.StatusCreated && r.Status != http.StatusAccepted) || r.str("id") == "" {
				t.Errorf("run %d: POST /v1/orders: %v %v", i, r, err)
				return
			}
			id := r.str("id")
			if i%3 == 2 {
				time.Sleep(time.Duration(i%7) * 40 * time.Millisecond)
			}
			// A 503/409-in-use is retryable: repeat with the key.
			c, err := s.sendRepeating(context.Background(), call{Method: "POST", Path: "/v1/orders/" + id + "/cancel", Token: tokAlice,
				Key: keyOf(newKey())})
			if err != nil {
				t.Errorf("run %d: cancel: %v", i, err)
				return
			}
			out[i] = run{id: id, cancelCode: c.Status, cancelStatus: c.str("status")}
			switch c.Status {
			case http.StatusOK:
				if c.str("status") != "cancelled" {
					t.Errorf("run %d: %s, want status cancelled with 200", i, c)
				}
			case http.StatusAccepted:
				if c.str("status") != "cancelling" {
					t.Errorf("run %d: %s, want status cancelling with 202", i, c)
				}
			case http.StatusConflict:
			default:
				t.Errorf("run %d: %s, want 200, 202 or 409", i, c)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	final := map[string]bool{"confirmed": true, "cancelled": true, "failed": true, "needs_review": true}
	statuses := map[string]*resp{}
	if !eventually(120*time.Second, func() bool {
		for _, r := range out {
			if g, ok := statuses[r.id]; ok && final[g.str("status")] {
				continue
			}
			g := s.do(t, "GET", "/v1/orders/"+r.id, tokAlice, "", nil)
			statuses[r.id] = g
			if !final[g.str("status")] {
				return false
			}
		}
		return true
	}) {
		for i, r := range out {
			if g := statuses[r.id]; !final[g.str("status")] {
				t.Errorf("run %d: %s 120 s after the race: not final", i, g)
			}
		}
		t.FailNow()
	}
	// Refunds of cancelled orders land shortly after.
	if !eventually(120*time.Second, func() bool {
		for _, r := range out {
			if statuses[r.id].str("status") == "cancelled" && s.orderMoney(t, r.id).Net != 0 {
				return false
			}
		}
		return true
	}) {
		t.Errorf("some cancelled orders still have a net charge after 120 s")
	}
	s.settle(t)
	var nConfirmed, nCancelled, nRefunded int
	for i, r := range out {
		g := statuses[r.id]
		m := s.orderMoney(t, r.id)
		evs := s.orderEvents(t, r.id)
		tickets, _ := g.get("tickets").([]any)
		switch st := g.str("status"); {
		case st == "cancelled" && (r.cancelCode == http.StatusOK || r.cancelCode == http.StatusAccepted):
			nCancelled++
			if m.Succeeded > 0 {
				nRefunded++
			}
			if m.Net != 0 || len(tickets) != 0 || m.Succeeded > 1 {
				t.Errorf("run %d: cancelled order %s with net charge %d, %d tickets, %d charges (%+v); want net 0, no tickets, at most 1 charge",
					i, r.id, m.Net, len(tickets), m.Succeeded, m.All)
			}
			if len(ofType(evs, "OrderCancelled")) != 1 {
				t.Errorf("run %d: order-%s: stream %v, want one OrderCancelled", i, r.id, typesOf(evs))
			}
			if len(ofType(evs, "RefundRequested")) != m.Succeeded || len(ofType(evs, "RefundSucceeded")) != m.Succeeded {
				t.Errorf("run %d: order-%s: stream %v for %d charge(s): want one recorded refund per charge", i, r.id, typesOf(evs), m.Succeeded)
			}
		case st == "confirmed" && r.cancelCode == http.StatusConflict:
			nConfirmed++
			if m.Succeeded != 1 || m.Net != priceAmount || len(tickets) != 1 {
				t.Errorf("run %d: confirmed order %s with %d charges, net %d, %d tickets; want 1 charge, net %d, 1 ticket",
					i, r.id, m.Succeeded, m.Net, len(tickets), priceAmount)
			}
		default:
			t.Errorf("run %d: order %s ended %q (%s) after the cancel was answered %d %q: neither confirmed-and-charged-once nor cancelled-with-net-0 (stream %v, charges %+v)",
				i, r.id, st, g, r.cancelCode, r.cancelStatus, typesOf(evs), m.All)
		}
		wantNoSecondAttempt(t, r.id, evs)
		if n := len(ofType(evs, "OrderConfirmed")) + len(ofType(evs, "OrderCancelled")) + len(ofType(evs, "OrderFailed")); n > 2 {
			t.Errorf("run %d: order-%s: stream %v has more than one ending", i, r.id, typesOf(evs))
		}
	}
	codes := map[int]int{}
	for _, r := range out {
		codes[r.cancelCode]++
	}
	t.Logf("%d runs: %d cancelled (%d of them charged, then refunded), %d confirmed (cancel refused); cancel answers %v",
		runs, nCancelled, nRefunded, nConfirmed, codes)
	if got := s.available(t, show); got != nCancelled {
		t.Errorf("GET /v1/shows/%s: available = %d, want %d (the seats of the cancelled orders)", show, got, nCancelled)
	}
	s.checkCapacity(t, show)
}

// ---------------------------------------------------------------------------
// 9. The provider's window passed for an unknown attempt.

// TestPayment_WindowPassedUnknownAttemptIsReconciledFirst: booking serve is
// killed after the provider charged and before the outcome was recorded;
// webhooks are paused; the provider's clock moves 25 h ahead, past its key
// window (it forgets the key: a resend with it would charge again), and its
// search lags far behind (a search finds nothing). After the restart, the
// reconciler finds the PaymentIntent in the list of those created in the
// attempt's range before any new send or attempt: one PaymentIntent, order
// confirmed, no attempt 2.
func TestPayment_WindowPassedUnknownAttemptIsReconciledFirst(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{CrashAt: []string{"payment.sent"}, Env: fastEnv(), ExternalSim: true}, 1)
	s.pauseWebhooks(t)
	_, id := s.crashOrder(t, res, "tok_timeout_after_commit", "payment.sent")
	if m := s.orderMoney(t, id); m.Succeeded != 1 {
		t.Fatalf("simulator: %+v, want the charge committed", m)
	}
	s.simAdvance(t, "25h")
	s.simFaults(t, map[string]any{"search_lag_ms": int64(1000 * time.Hour / time.Millisecond)})
	q := url.QueryEscape("metadata['order_id']:'" + id + "'")
	if r := s.simDo(t, "GET", "/v1/payment_intents/search?query="+q, nil, nil); r.Status != http.StatusOK || r.get("data") == nil ||
		len(r.get("data").([]any)) != 0 {
		t.Fatalf("%s: want search blind to the PaymentIntent (search_lag_ms)", r)
	}

	s.Restart(withoutCrash)
	g := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review", "cancelled")
	if g.str("status") != "confirmed" {
		t.Errorf("%s, want confirmed", g)
	}
	s.simFaults(t, map[string]any{"webhooks_paused": false})
	s.waitWebhooksDelivered(t)
	evs := s.orderEvents(t, id)
	wantOneAttempt(t, id, evs, map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "PaymentFailed": 0, "RefundRequested": 0,
		"OrderNeedsReview": 0})
	if m := s.orderMoney(t, id); m.Succeeded != 1 || m.Net != priceAmount || len(m.All) != 1 {
		t.Errorf("simulator: order %s PaymentIntents %+v, want exactly 1, succeeded, net %d (never two)", id, m, priceAmount)
	}
	s.checkCharges(t, 1, 0)
}

// ---------------------------------------------------------------------------
// 10. Paused owner, reconciler takeover, provider window passed, owner resumes.

// TestPayment_PausedOwnerResumedAfterTakeoverAndWindow: three orders pay
// with tok_slow (6 s) on booking serve A with the shortest valid lease; A is
// paused (SIGSTOP) with the sends in flight. A second booking serve B on the
// same database and simulator, with no client request, takes the attempts
// over through its reconciler once the leases expired. Then the simulator's
// clock moves past the key window and A resumes (SIGCONT). For every order:
// confirmed with net charge = price, or otherwise net 0; no attempt 2; every
// refund the provider made was recorded (RefundRequested) before it was
// created.
func TestPayment_PausedOwnerResumedAfterTakeoverAndWindow(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{ExternalSim: true, Env: fastEnv(
		"BOOKING_PROVIDER_TIMEOUT", "1s", "BOOKING_PAYMENT_LEASE", "3500ms", "BOOKING_PROVIDER_SLOW_DELAY", "6s")})
	b := s.startPeer(t)
	show := s.mustCreateShow(t, 10)
	var ids []string
	// Each owner's send (1 s timeout) returns into a hold at payment.sent
	// and records nothing until the test releases it after the resume.
	s.armHold(t, "payment.sent")
	for range 3 {
		res := s.mustReserve(t, tokAlice, show, 1)
		r := s.placeOrderWait(t, newKey(), res, "tok_slow", 0)
		wantStatus(t, r, http.StatusAccepted)
		ids = append(ids, orderIDOf(t, r))
	}
	owners := map[string]string{}
	if !eventually(30*time.Second, func() bool {
		for _, id := range ids {
			if a := ofType(s.orderEvents(t, id), "PaymentAttemptStarted"); len(a) > 0 {
				owners[id] = a[0].str("owner")
			}
		}
		return len(owners) == len(ids)
	}) {
		t.Fatalf("not every order started an attempt within 30 s: %v", owners)
	}
	var keys []string
	for _, id := range ids {
		keys = append(keys, ofType(s.orderEvents(t, id), "PaymentAttemptStarted")[0].str("provider_key"))
	}
	s.waitInFlight(t, keys...) // the sends are at the provider (tok_slow: 6 s)
	s.pauseServe(t)
	pausedAt := time.Now()

	// B takes over through its reconciler (no client request): it asks the
	// provider first, and either records the outcome it finds (the owner is
	// paused, so any outcome recorded now is B's) or takes the attempt over.
	takenOver := func(id string) bool {
		evs := s.orderEvents(t, id)
		if len(ofType(evs, "PaymentSucceeded"))+len(ofType(evs, "PaymentFailed")) > 0 {
			return true
		}
		for _, e := range ofType(evs, "PaymentAttemptStarted") {
			if e.str("owner") != owners[id] {
				return true
			}
		}
		return false
	}
	if !eventually(60*time.Second, func() bool {
		for _, id := range ids {
			if !takenOver(id) {
				return false
			}
		}
		return true
	}) {
		for _, id := range ids {
			t.Errorf("order-%s: 60 s after its owner %s was paused, no other executor took the attempt over (stream %v; second process %s)",
				id, owners[id], typesOf(s.orderEvents(t, id)), b.URL)
		}
		// Diagnosis: who holds the reconciler's session advisory lock
		// (pgcoord.Key: FNV-64a of "booking-worker:payment-reconciler")?
		h := fnv.New64a()
		h.Write([]byte("booking-worker:payment-reconciler"))
		k := h.Sum64()
		holders := s.queryRows(t, `SELECT l.pid::text, coalesce(a.state, ''), coalesce(to_char(a.state_change, 'HH24:MI:SS'), '')
			FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid`,
			int64(k>>32), int64(k&0xffffffff))
		t.Errorf("the payment reconciler's advisory lock is held by backend(s) %v (pid, state, since) while its process is paused at %s; "+
			"second process reconciliations: found_succeeded=%v not_found=%v lease_taken_over=%v",
			holders, pausedAt.UTC().Format("15:04:05"),
			s.metric(t, b.URL, `booking_payment_reconciliations_total{result="found_succeeded"}`),
			s.metric(t, b.URL, `booking_payment_reconciliations_total{result="not_found"}`),
			s.metric(t, b.URL, `booking_payment_reconciliations_total{result="lease_taken_over"}`))
	} else {
		t.Logf("taken over %s after the pause", time.Since(pausedAt).Round(100*time.Millisecond))
		// A is paused, so read the outcome from the event store, not A's API.
		for _, id := range ids {
			if !eventually(60*time.Second, func() bool {
				evs := s.orderEvents(t, id)
				return len(ofType(evs, "OrderConfirmed"))+len(ofType(evs, "OrderFailed"))+len(ofType(evs, "OrderNeedsReview"))+len(ofType(evs, "OrderCancelled")) > 0
			}) {
				t.Errorf("order-%s: no final outcome 60 s after the takeover while its owner is paused (stream %v)", id, typesOf(s.orderEvents(t, id)))
			}
		}
	}

	// The provider forgets the keys; then the owner resumes.
	s.simAdvance(t, "25h")
	s.signalServe(t, syscall.SIGCONT)
	for _, id := range ids {
		s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review", "cancelled")
	}
	// The resumed owner's stale sends go on; then whatever it still does.
	s.waitHeld(t, "payment.sent", len(ids))
	s.releaseHold(t, "payment.sent")
	s.settle(t)
	if !eventually(30*time.Second, func() bool {
		for _, id := range ids {
			o := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
			m := s.orderMoney(t, id)
			if (o.str("status") == "confirmed" && m.Net != priceAmount) || (o.str("status") != "confirmed" && m.Net != 0) {
				return false
			}
		}
		return true
	}) {
		t.Errorf("net charges did not settle within 30 s")
	}
	s.settle(t)
	for _, id := range ids {
		o := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
		m := s.orderMoney(t, id)
		evs := s.orderEvents(t, id)
		switch st := o.str("status"); st {
		case "confirmed":
			if m.Net != priceAmount {
				t.Errorf("confirmed order %s: net charge %d (%+v), want %d", id, m.Net, m.All, priceAmount)
			}
			wantCounts(t, id, evs, map[string]int{"OrderConfirmed": 1})
		default:
			if m.Net != 0 {
				t.Errorf("order %s %s: net charge %d (%+v), want 0", id, st, m.Net, m.All)
			}
		}
		if m.Succeeded > 1 {
			t.Logf("order %s: %d charges at the provider (redundant ones refunded): %+v", id, m.Succeeded, m.All)
		}
		wantNoSecondAttempt(t, id, evs)
		if n := len(ofType(evs, "RefundRequested")); n != m.Succeeded-min(m.Succeeded, 1) && o.str("status") == "confirmed" {
			t.Errorf("order-%s: %d RefundRequested for %d charges of a confirmed order (stream %v)", id, n, m.Succeeded, typesOf(evs))
		}
	}
	s.checkRefundsRecordedFirst(t, 25*time.Hour)
	t.Logf("executors: %v", executorsIn(s.logs.String()))
}

// ---------------------------------------------------------------------------
// 11. Stripe's rules: a lost outcome, a replayed 500, customer authentication.

// TestPayment_LostOutcomeIsLearnedByRepeatingTheSameKey: the provider is
// slower than the service's timeout (tok_slow 2.5 s, timeout 1 s), so the
// first send's outcome is lost and the PaymentIntent is created only after
// it; the list finds nothing yet, and inside the window the only retry is
// the same request under the same key: Stripe answers 409 while the first
// executes, then replays its saved answer. One PaymentIntent, under the
// attempt's key; the outcome recorded unknown first, then succeeded from a
// send; no second attempt.
func TestPayment_LostOutcomeIsLearnedByRepeatingTheSameKey(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{ExternalSim: true, Env: fastEnv(
		"BOOKING_PROVIDER_TIMEOUT", "1s", "BOOKING_PAYMENT_LEASE", "3500ms", "BOOKING_PROVIDER_SLOW_DELAY", "2500ms")}, 1)
	s.pauseWebhooks(t) // only the sends (and the list) learn the outcome
	id := s.mustPlaceOrder(t, newKey(), res, "tok_slow", 0, http.StatusAccepted)
	g := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review", "cancelled")
	if g.str("status") != "confirmed" {
		t.Fatalf("%s, want confirmed", g)
	}
	evs := s.orderEvents(t, id)
	wantOneAttempt(t, id, evs, map[string]int{"PaymentOutcomeUnknown": 1, "PaymentSucceeded": 1, "OrderConfirmed": 1, "PaymentFailed": 0})
	key := ofType(evs, "PaymentAttemptStarted")[0].str("provider_key")
	m := s.orderMoney(t, id)
	if len(m.All) != 1 || m.Succeeded != 1 || m.All[0].IdempotencyKey != key {
		t.Errorf("simulator: order %s PaymentIntents %+v, want exactly one, succeeded, created under the attempt's key %s", id, m.All, key)
	}
	s.simFaults(t, map[string]any{"webhooks_paused": false})
	s.waitWebhooksDelivered(t)
	wantCounts(t, id, s.orderEvents(t, id), map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1})
	s.checkCharges(t, 1, 0)
}

// TestPayment_ReplayedServerErrorIsNotAFailure: tok_error_after_commit makes
// the PaymentIntent succeed, then answers 500, which Stripe saves and
// replays for the key: the outcome is unknown, never a failure, and the
// order settles from the list of PaymentIntents (webhooks paused). One
// PaymentIntent, no PaymentFailed, no second attempt.
func TestPayment_ReplayedServerErrorIsNotAFailure(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{ExternalSim: true, Env: fastEnv()}, 2)
	s.pauseWebhooks(t)
	id := s.mustPlaceOrder(t, newKey(), res, "tok_error_after_commit", 10, http.StatusCreated, http.StatusAccepted)
	g := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review", "cancelled")
	if g.str("status") != "confirmed" {
		t.Fatalf("%s, want confirmed (a saved 500 is not a failure)", g)
	}
	evs := s.orderEvents(t, id)
	wantOneAttempt(t, id, evs, map[string]int{"PaymentOutcomeUnknown": 1, "PaymentSucceeded": 1, "OrderConfirmed": 1,
		"PaymentFailed": 0, "OrderFailed": 0, "RefundRequested": 0})
	if u := ofType(evs, "PaymentOutcomeUnknown"); len(u) == 1 && !strings.Contains(u[0].str("reason"), "replays") && !strings.Contains(u[0].str("reason"), "definitive") {
		t.Errorf("order-%s: PaymentOutcomeUnknown %v, want the reason of a server error", id, u[0].Data)
	}
	if m := s.orderMoney(t, id); len(m.All) != 1 || m.Succeeded != 1 || m.Net != 2*priceAmount {
		t.Errorf("simulator: order %s PaymentIntents %+v, want exactly one, succeeded, net %d", id, m.All, 2*priceAmount)
	}
	s.simFaults(t, map[string]any{"webhooks_paused": false})
	s.waitWebhooksDelivered(t)
	wantCounts(t, id, s.orderEvents(t, id), map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1})
	s.checkCharges(t, 1, 0)
}

// orderPaymentID returns the id of order id's only PaymentIntent at the
// simulator, waiting up to 30 s for it.
func (s *server) orderPaymentID(t testing.TB, id string) string {
	t.Helper()
	var m chargeSummary
	if !eventually(30*time.Second, func() bool { m = s.orderMoney(t, id); return len(m.All) == 1 }) {
		t.Fatalf("simulator: order %s PaymentIntents %+v, want one", id, m.All)
	}
	return m.All[0].ID
}

// TestPayment_RequiresActionIsConfirmedAfterAuthentication: a payment that
// needs Strong Customer Authentication (pm_card_authenticationRequired) is
// answered 202 at once with payment.status requires_action, the client
// secret and the next action — to the order's owner only, on the POST, its
// replay and GET; another actor gets 404. Once the customer authenticates
// (the simulator's /_sim/payment_intents/{id}/authenticate), the webhook
// confirms the order; the client secret is shown no more. One PaymentIntent.
func TestPayment_RequiresActionIsConfirmedAfterAuthentication(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{Env: fastEnv()}, 2)
	key := newKey()
	began := time.Now()
	r := s.placeOrderWait(t, key, res, "pm_card_authenticationRequired", 10)
	wantStatus(t, r, http.StatusAccepted)
	id := orderIDOf(t, r)
	secret := r.str("payment.client_secret")
	if r.str("status") != "pending" || r.str("payment.status") != "requires_action" || !strings.Contains(secret, "_secret_") ||
		r.str("payment.next_action.type") != "use_stripe_sdk" {
		t.Fatalf("%s, want pending with payment.status requires_action, a client secret and next_action use_stripe_sdk", r)
	}
	if d := time.Since(began); d > 9*time.Second {
		t.Errorf("the 202 took %s: it waited for an outcome that only the customer can bring (Prefer: wait=10)", d)
	}
	again := s.placeOrderWait(t, key, res, "pm_card_authenticationRequired", 0)
	if again.Status != http.StatusAccepted || !again.replayed() || again.str("payment.client_secret") != secret {
		t.Errorf("%s, want the 202 replayed with the same client secret", again)
	}
	if g := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil); g.str("payment.client_secret") != secret {
		t.Errorf("%s, want the owner shown the client secret", g)
	}
	if g := s.do(t, "GET", "/v1/orders/"+id, tokBob, "", nil); g.Status != http.StatusNotFound || strings.Contains(string(g.Body), secret) {
		t.Errorf("%s, want 404 to another actor, without the secret", g)
	}
	pi := s.orderPaymentID(t, id)
	if !strings.HasPrefix(secret, pi) {
		t.Errorf("client secret %q is not PaymentIntent %s's", secret, pi)
	}
	s.authenticate(t, pi, true)
	g := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review", "cancelled")
	if g.str("status") != "confirmed" || g.str("payment.charge_id") != pi || g.str("payment.client_secret") != "" {
		t.Fatalf("%s, want confirmed by %s without a client secret", g, pi)
	}
	s.waitWebhooksDelivered(t)
	if !slices.ContainsFunc(s.simDeliveries(t), func(d simDelivery) bool {
		return d.Type == "payment_intent.succeeded" && d.Delivered && d.StatusCode == http.StatusNoContent
	}) {
		t.Errorf("GET /_sim/webhooks: no payment_intent.succeeded acknowledged 204: %+v", s.simDeliveries(t))
	}
	evs := s.orderEvents(t, id)
	wantOneAttempt(t, id, evs, map[string]int{"PaymentActionRequired": 1, "PaymentSucceeded": 1, "OrderConfirmed": 1, "PaymentFailed": 0})
	if a := ofType(evs, "PaymentActionRequired"); len(a) == 1 && (a[0].str("payment_id") != pi || a[0].Data["private"] == nil) {
		t.Errorf("order-%s: PaymentActionRequired %v, want payment %s with a sealed private part", id, a[0].Data, pi)
	}
	if tickets, _ := g.get("tickets").([]any); len(tickets) != 2 {
		t.Errorf("%s: want 2 tickets", g)
	}
	s.checkCharges(t, 1, 0)
}

// TestPayment_RequiresActionAbandonedIsCancelledAtTheDeadline: the customer
// never authenticates. At the payment deadline (20 s here) the order fails
// (payment_deadline, 402 payment-failed to a repeat), its seats are
// released, and the PaymentIntent is cancelled at the provider; nothing
// moved. Its client secret is shown no more.
func TestPayment_RequiresActionAbandonedIsCancelledAtTheDeadline(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{Env: fastEnv("BOOKING_PAYMENT_DEADLINE", "20s")}, 3)
	key := newKey()
	r := s.placeOrderWait(t, key, res, "tok_authentication_required", 5)
	wantStatus(t, r, http.StatusAccepted)
	id := orderIDOf(t, r)
	if r.str("payment.status") != "requires_action" {
		t.Fatalf("%s, want payment.status requires_action", r)
	}
	pi := s.orderPaymentID(t, id)
	s.wantAvailable(t, show, 7, "while the payment waits for the customer")
	g := s.waitStatus(t, id, 90*time.Second, "failed", "confirmed", "cancelled", "needs_review")
	if g.str("status") != "failed" || g.str("failure_reason") != "payment_deadline" || g.str("payment.client_secret") != "" {
		t.Fatalf("%s, want failed with payment_deadline and no client secret", g)
	}
	if !eventually(60*time.Second, func() bool {
		m := s.orderMoney(t, id)
		return len(m.All) == 1 && m.All[0].Status == "canceled"
	}) {
		t.Errorf("simulator: PaymentIntent %s of order %s is %+v, want canceled", pi, id, s.orderMoney(t, id).All)
	}
	if !eventually(30*time.Second, func() bool { return s.available(t, show) == 10 }) {
		t.Errorf("GET /v1/shows/%s: available = %d after the deadline, want 10", show, s.available(t, show))
	}
	checkProblem(t, s.placeOrderWait(t, key, res, "tok_authentication_required", 0), http.StatusPaymentRequired, "payment-failed")
	s.settle(t)
	evs := s.orderEvents(t, id)
	wantOneAttempt(t, id, evs, map[string]int{"PaymentActionRequired": 1, "OrderFailed": 1, "PaymentFailed": 1, "PaymentSucceeded": 0,
		"RefundRequested": 0})
	if f := ofType(evs, "PaymentFailed"); len(f) == 1 && (f[0].str("charge_id") != pi || f[0].str("code") != "canceled") {
		t.Errorf("order-%s: PaymentFailed %v, want payment %s canceled", id, f[0].Data, pi)
	}
	s.checkCharges(t, 0, 1)
}

// TestPayment_CancelOfAConfirmedOrderIsRefunded: a confirmed order is
// cancelled (200): its PaymentIntent is refunded by payment_intent under
// refund-{paymentID}, recorded before it was sent; net 0, seats back.
func TestPayment_CancelOfAConfirmedOrderIsRefunded(t *testing.T) {
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{Env: fastEnv()}, 2)
	id := s.mustPlaceOrder(t, newKey(), res, "pm_card_visa", -1, http.StatusCreated)
	pi := s.orderPaymentID(t, id)
	if c := s.rbCancel(t, tokAlice, id); c.Status != http.StatusOK || c.str("status") != "cancelled" {
		t.Fatalf("%s, want 200 cancelled", c)
	}
	if !eventually(60*time.Second, func() bool { return s.orderMoney(t, id).Net == 0 }) {
		t.Fatalf("simulator: order %s PaymentIntents %+v, want refunded (net 0)", id, s.orderMoney(t, id).All)
	}
	if refs := s.simRefunds(t); len(refs) != 1 || refs[0].PaymentIntent != pi || refs[0].Metadata["refund_key"] != "refund-"+pi {
		t.Errorf("simulator: refunds %+v, want one of %s with metadata refund_key refund-%s", refs, pi, pi)
	}
	s.waitWebhooksDelivered(t)
	wantCounts(t, id, s.orderEvents(t, id), map[string]int{"PaymentSucceeded": 1, "OrderConfirmed": 1, "RefundRequested": 1,
		"RefundSucceeded": 1, "OrderCancelled": 1})
	s.checkRefundsRecordedFirst(t, 0)
	s.wantAvailable(t, show, 10, "after the cancel")
}
