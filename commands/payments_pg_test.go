package commands

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/commands/envelope/envelopetest"
	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
	"github.com/retrysafe/booking/provider/stripe"
)

// Integration tests of payments: real PostgreSQL (BOOKING_TEST_DATABASE_URL,
// pgstore, migrations), the real provider simulator in-process over HTTP,
// and its signed webhooks delivered to a receiver that calls
// Handler.ReceiveWebhook. Each test counts the charges at the simulator,
// net of refunds, and the events of the order stream.

const pgSecret = "whsec_pgtest"

// simClient returns the Stripe adapter pointed at the simulator at url,
// verifying webhooks under pgSecret. Without keep-alive: a dropped
// connection is never silently resent by the transport, so the tests see
// the outcome-unknown path every time.
func simClient(tb testing.TB, url string) *stripe.Client {
	tb.Helper()
	c, err := stripe.New(stripe.Config{BaseURL: url, WebhookSecrets: []string{pgSecret},
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// signWebhook returns the Stripe-Signature of body at t under secret:
// t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
// (https://docs.stripe.com/webhooks#verify-manually).
func signWebhook(body []byte, t time.Time, secret string) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// pgClock is the database clock (now()) plus an offset tests move forward.
type pgClock struct {
	pool   *pgxpool.Pool
	offset atomic.Int64
	moves  atomic.Uint64
}

func (c *pgClock) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := c.pool.QueryRow(ctx, "SELECT now()").Scan(&t)
	return t.UTC().Add(time.Duration(c.offset.Load())), err
}

// Advance moves the clock by d.
func (c *pgClock) Advance(d time.Duration) { c.offset.Add(int64(d)); c.moves.Add(1) }

// Moves implements movableClock: a Handler's clock reading taken before a
// move is not used after it.
func (c *pgClock) Moves() uint64 { return c.moves.Load() }

// clockedStore is the event store as a Handler on pgClock sees it: the
// clock its appends report (AppendResult.Now, PostgreSQL's now()) carries
// the clock's offset, as the service's store reports the service's clock.
type clockedStore struct {
	*pgstore.Store
	clock *pgClock
}

// Append implements EventStore.
func (s clockedStore) Append(ctx context.Context, stream string, exp eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	res, err := s.Store.Append(ctx, stream, exp, events...)
	if !res.Now.IsZero() {
		res.Now = res.Now.Add(time.Duration(s.clock.offset.Load()))
	}
	return res, err
}

// AppendMulti implements EventStore.
func (s clockedStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	res, err := s.Store.AppendMulti(ctx, appends...)
	for i := range res {
		if !res[i].Now.IsZero() {
			res[i].Now = res[i].Now.Add(time.Duration(s.clock.offset.Load()))
		}
	}
	return res, err
}

// events returns the fixture's event store for a Handler (see clockedStore).
func (f *pgFix) events() EventStore { return clockedStore{Store: f.store, clock: f.clock} }

// pgFix is a database, a simulator, and a show with seats to order.
type pgFix struct {
	t      *testing.T
	pool   *pgxpool.Pool
	store  *pgstore.Store
	keys   *keystore.Store
	clock  *pgClock
	sim    *providersim.Server
	client *stripe.Client
	recv   atomic.Pointer[Handler] // the webhook receiver's handler
	show   string
	seq    atomic.Int64
	log    *slog.Logger
}

func newPGFix(t *testing.T, simCfg providersim.Config) *pgFix {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	pool := pgtest.NewPool(t, dbURL)
	f := &pgFix{t: t, pool: pool, store: pgstore.New(pool, pgstore.WithAppendTimeout(time.Minute)), keys: keystore.New(pool, testKeyring(t)), clock: &pgClock{pool: pool},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if testing.Verbose() {
		f.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	recv := httptest.NewServer(http.HandlerFunc(f.receive))
	t.Cleanup(recv.Close)
	simCfg.WebhookSecret = pgSecret
	simCfg.WebhookURL = recv.URL + "/v1/provider/webhooks"
	simCfg.Webhooks.InitialBackoff = 50 * time.Millisecond
	simCfg.Webhooks.MaxBackoff = 200 * time.Millisecond
	f.sim = providersim.New(simCfg)
	simSrv := httptest.NewServer(f.sim.Handler())
	t.Cleanup(func() { f.sim.Close(); simSrv.Close() })
	f.client = simClient(t, simSrv.URL)
	return f
}

// testKeyring returns a keyring of one fresh master key.
func testKeyring(tb testing.TB) *envelope.Keyring {
	tb.Helper()
	return envelopetest.Keyring(tb, envelopetest.MasterKey(tb, "test"))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// receive is POST /v1/provider/webhooks of the tests, mapped as cmd/booking maps it.
func (f *pgFix) receive(w http.ResponseWriter, r *http.Request) {
	h := f.recv.Load()
	body, err := io.ReadAll(r.Body)
	if h == nil || err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	err = h.ReceiveWebhook(r.Context(), r.Header.Get("Stripe-Signature"), body)
	w.WriteHeader(webhookStatus(err))
}

func webhookStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusNoContent
	case domain.KindOf(err) == domain.Invalid:
		return http.StatusBadRequest
	case domain.KindOf(err) == domain.NotFound:
		return http.StatusNotFound
	case domain.KindOf(err) == domain.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// handler returns a handler of executor on the fixture (a process); the
// first one also receives the webhooks.
func (f *pgFix) handler(executor string, tune func(*Config), opts ...Option) *Handler {
	cfg := DefaultConfig()
	cfg.Executor = executor
	if tune != nil {
		tune(&cfg)
	}
	h := New(cfg, f.events(), f.clock, f.client, newTestRegistry(), f.log.With("executor", executor), append([]Option{WithKeys(f.keys)}, opts...)...)
	f.t.Cleanup(func() { h.FlushShreds(context.Background()) }) // before the pool closes
	f.recv.CompareAndSwap(nil, h)
	return h
}

const pgActor = "user-pg"

func (f *pgFix) req(op string) Request {
	return Request{Actor: pgActor, Operation: op, Key: fmt.Sprintf("k-%d", f.seq.Add(1))}
}

// placeOrder holds one seat and orders it with token, waiting up to wait.
func (f *pgFix) placeOrder(h *Handler, token string, wait time.Duration) OrderResult {
	f.t.Helper()
	ctx := context.Background()
	res, _, err := h.ReserveSeats(ctx, f.req(OpReserveSeats), ReserveSeatsCommand{ShowID: f.mustShow(h), Quantity: 1})
	if err != nil {
		f.t.Fatalf("ReserveSeats: %v", err)
	}
	req := f.req(OpPlaceOrder)
	req.Wait = wait
	out, err := h.PlaceOrder(ctx, req, PlaceOrderCommand{ReservationID: res.ID, PaymentToken: token})
	if err != nil {
		f.t.Fatalf("PlaceOrder: %v", err)
	}
	return out
}

// types returns the event types of the order's stream.
func (f *pgFix) types(orderID string) []string {
	f.t.Helper()
	recs, err := f.store.ReadStream(context.Background(), domain.OrderStream(orderID), 0, 0)
	if err != nil {
		f.t.Fatalf("read order stream: %v", err)
	}
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Type
	}
	return out
}

// wantEvents fails t unless the event types of order id's stream are want;
// what names the moment in the failure message.
func (f *pgFix) wantEvents(t *testing.T, id, what string, want []string) {
	t.Helper()
	if diff := cmp.Diff(want, f.types(id)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// wantCharges fails t unless the simulator holds n succeeded charges of order
// id whose net amount (charged minus refunded, minor units) is net.
func (f *pgFix) wantCharges(t *testing.T, id string, net int64, n int) {
	t.Helper()
	if gotNet, gotN := f.charges(id); gotNet != net || gotN != n {
		t.Errorf("simulator: net %d over %d charges, want %d over %d", gotNet, gotN, net, n)
	}
}

// charges returns the order's PaymentIntents at the simulator: net of
// refunds, and how many succeeded.
func (f *pgFix) charges(orderID string) (net int64, succeeded int) {
	for _, c := range f.sim.Charges() {
		if c.Metadata[provider.MetadataOrderID] == orderID && c.Status == provider.PaymentSucceeded {
			net += c.Amount - c.RefundedAmount
			succeeded++
		}
	}
	return net, succeeded
}

func (f *pgFix) order(h *Handler, id string) domain.Order {
	f.t.Helper()
	o, _, err := h.LoadOrder(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// eventually polls cond every 20 ms for up to d.
func (f *pgFix) eventually(d time.Duration, what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitDriveEnded waits up to a minute until no drive of order id's
// payment runs in h (DrivePayment's per-order lock is free), for a test
// that knows one began: a DrivePayment call of the test then decides.
func (f *pgFix) awaitDriveEnded(h *Handler, id string) {
	f.t.Helper()
	f.eventually(60*time.Second, "the order's payment drive to end", func() bool {
		unlock := h.sends.TryLock(id)
		if unlock != nil {
			unlock()
		}
		return unlock != nil
	})
}

func (f *pgFix) pauseWebhooks(paused bool) {
	flt := f.sim.Faults()
	flt.WebhooksPaused = paused
	if err := f.sim.SetFaults(flt); err != nil {
		f.t.Fatal(err)
	}
}

// quietWithSavedError waits until the simulator has delivered its
// webhooks, then pauses them and makes its next request commit and answer
// a 500 it saves under the request's key (ErrorAfterCommit).
func (f *pgFix) quietWithSavedError(ctx context.Context) {
	if err := f.sim.WaitWebhooks(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.pauseWebhooks(true)
	flt := f.sim.Faults()
	flt.ErrorAfterCommit = 1
	if err := f.sim.SetFaults(flt); err != nil {
		f.t.Fatal(err)
	}
}

// blockAt returns hooks that block the first time step is reached until
// release is closed; reached is closed when it blocks.
func blockAt(step string) (hooks Hooks, reached, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return Hooks{Step: func(s string) {
		if s != step {
			return
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(reached)
			<-release
		}
	}}, reached, release
}

var (
	placedStartedConfirmed = []string{"OrderPlaced", evStarted, evSucceeded, evConfirmed}
)

// TestPGDroppedConnectionIsReconciled: the provider commits, then drops the
// connection → outcome unknown → the list of PaymentIntents finds it
// succeeded, 1 PaymentIntent.
func TestPGDroppedConnectionIsReconciled(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	f.pauseWebhooks(true)
	h := f.handler("pg-a", nil)
	res := f.placeOrder(h, providersim.TokenTimeoutAfterCommit, 60*time.Second)
	if !res.Final || res.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder = final %v, %s; want confirmed", res.Final, res.Order.Status)
	}
	want := []string{"OrderPlaced", evStarted, evUnknown, evSucceeded, evConfirmed}
	f.wantEvents(t, res.Order.ID, "order events", want)
	f.pauseWebhooks(false) // the late notice changes nothing
	if err := f.sim.WaitWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.wantEvents(t, res.Order.ID, "order events after the webhook", want)
	f.wantCharges(t, res.Order.ID, 1500, 1)
}

// TestPGSlowProviderLeaseTakeover: the provider is slower than the lease;
// the owner is stuck after its send timed out; another executor on the same
// database takes the lease over (fenced by revision), resends the same key
// (409 while the first is executing, then the replay), and confirms. The
// stale owner's lease append at the revision it loaded is rejected. 1 charge.
func TestPGSlowProviderLeaseTakeover(t *testing.T) {
	t.Parallel()
	// The charge takes far longer than the owner's lease (3 s), so B finds
	// it still executing and must take the lease over, however late B runs
	// on a busy machine (at 6 s, a stall of 5 s would let the charge and its
	// notice confirm the order first); B's own lease (2 min) outlasts the
	// charge, so B takes over once, and B's calls get 30 s each (only the
	// owner's send is meant to time out: a call of B's timing out on a
	// starved machine would leave an unknown outcome, and B would renew its
	// own lease before the next send, a second Takeovers count). The
	// owner's lease leaves 2.6 s between the commit that starts it and its
	// send: with less, a starved machine could leave the owner too little
	// lease to send, and it would renew its own lease first, also counted.
	f := newPGFix(t, providersim.Config{SlowDelay: 20 * time.Second})
	short := func(c *Config) {
		c.PaymentLease, c.ProviderTimeout, c.SendMargin, c.SettleMargin = 3*time.Second, 300*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
	}
	long := func(c *Config) {
		short(c)
		c.PaymentLease, c.ProviderTimeout = 2*time.Minute, 30*time.Second
	}
	hooks, reached, release := blockAt("payment.sent")
	a := f.handler("pg-owner", short, WithHooks(hooks))
	b := f.handler("pg-reconciler", long)
	res := f.placeOrder(a, providersim.TokenSlow, 0)
	id := res.Order.ID
	<-reached // a's send timed out (the provider is still executing); a is stuck before recording

	staleOrder, staleStream, err := a.LoadOrder(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	f.eventually(60*time.Second, "the lease to expire by the database clock", func() bool {
		now, err := f.clock.Now(context.Background())
		return err == nil && now.After(staleOrder.LastAttempt().LeaseUntil)
	})
	// B drives the payment as the reconciler does: again after a transient
	// failure (a provider call that timed out on a busy machine), and again
	// while the charge is still executing (one call takes a bounded number
	// of steps).
	for begin := time.Now(); ; {
		err := b.DrivePayment(context.Background(), id)
		if err == nil && f.order(b, id).Status != domain.OrderStatusPending {
			break
		}
		if err != nil && !errors.Is(err, domain.ErrUnavailable) || time.Since(begin) > 3*time.Minute {
			t.Fatalf("B DrivePayment() = %v, order %s", err, f.order(b, id).Status)
		}
	}
	o := f.order(b, id)
	if o.Status != domain.OrderStatusConfirmed || o.LastAttempt().Owner != "pg-reconciler" || o.LastAttempt().Takeovers != 1 {
		t.Fatalf("order %s, attempt owner %s after %d takeovers; want confirmed by pg-reconciler after 1",
			o.Status, o.LastAttempt().Owner, o.LastAttempt().Takeovers)
	}
	now, _ := f.clock.Now(context.Background())
	if err := a.takeOverAttempt(context.Background(), staleOrder, staleStream, *staleOrder.LastAttempt(), now, &driveState{}); !errors.Is(err, errRetry) {
		t.Errorf("stale owner's lease append = %v, want a revision conflict (errRetry)", err)
	}
	close(release) // the owner resumes: its unknown outcome is moot
	f.eventually(60*time.Second, "the owner to finish", func() bool { return a.sends.TryLock(id) != nil })
	if err := f.sim.WaitWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"OrderPlaced", evStarted, evStarted, evSucceeded, evConfirmed}
	f.wantEvents(t, id, "order events", want)
	f.wantCharges(t, id, 1500, 1)
}

// TestPGWebhooks: a notice before the API records the outcome; the same
// notice twice at once, again after 10 minutes on the simulator's clock, and
// a stale failure notice after it → one confirmation.
func TestPGWebhooks(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	hooks, reached, release := blockAt("payment.sent")
	h := f.handler("pg-a", nil, WithHooks(hooks))
	res := f.placeOrder(h, providersim.TokenVisa, 0)
	id := res.Order.ID
	<-reached // the sender has its answer but has not recorded it
	f.eventually(60*time.Second, "the webhook to confirm the order", func() bool {
		return f.order(h, id).Status == domain.OrderStatusConfirmed
	})
	close(release)
	f.eventually(60*time.Second, "the sender to finish", func() bool { return h.sends.TryLock(id) != nil })
	if diff := cmp.Diff(placedStartedConfirmed, f.types(id)); diff != "" {
		t.Fatalf("order events (-want +got):\n%s", diff)
	}

	evs := f.sim.Events()
	if len(evs) != 1 || evs[0].Type != provider.EventPaymentIntentSucceeded {
		t.Fatalf("simulator events = %v, want one payment_intent.succeeded", evs)
	}
	var wg sync.WaitGroup
	for range 2 { // twice at once
		wg.Go(func() {
			if err := f.sim.Resend(evs[0].ID); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	f.sim.AdvanceClock(10 * time.Minute) // and again ten minutes later
	if err := f.sim.Resend(evs[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.WaitWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An older failure notice arriving out of order: its payload says failed,
	// the provider's current state says succeeded.
	var stale map[string]any
	if err := json.Unmarshal(evs[0].Body(), &stale); err != nil {
		t.Fatal(err)
	}
	stale["id"], stale["type"] = "evt_stale_failure", provider.EventPaymentIntentPaymentFailed
	stale["data"].(map[string]any)["object"].(map[string]any)["status"] = string(provider.PaymentRequiresPaymentMethod)
	body, err := json.Marshal(stale)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ReceiveWebhook(context.Background(), signWebhook(body, time.Now(), pgSecret), body); err != nil {
		t.Fatalf("stale failure notice: %v", err)
	}
	for _, d := range f.sim.Deliveries() {
		if d.StatusCode != http.StatusNoContent {
			t.Errorf("delivery %+v answered %d, want 204", d, d.StatusCode)
		}
	}
	f.wantEvents(t, id, "order events after duplicates", placedStartedConfirmed)
	f.wantCharges(t, id, 1500, 1)
}

// TestPGWebhookSignature: a bad signature or a stale timestamp → 400 and
// nothing recorded.
func TestPGWebhookSignature(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	f.pauseWebhooks(true)
	h := f.handler("pg-a", nil)
	res := f.placeOrder(h, providersim.TokenTimeoutAfterCommit, 0)
	id := res.Order.ID
	f.eventually(60*time.Second, "the PaymentIntent", func() bool { _, n := f.charges(id); return n == 1 })
	f.eventually(60*time.Second, "the sender to finish", func() bool { return h.sends.TryLock(id) != nil })
	before := f.types(id)
	ev := f.sim.Events()[0]
	body := ev.Body()
	for name, sig := range map[string]string{
		"another secret":  signWebhook(body, time.Now(), "whsec_other"),
		"no signature":    "",
		"stale timestamp": signWebhook(body, time.Now().Add(-6*time.Minute), pgSecret),
	} {
		err := h.ReceiveWebhook(context.Background(), sig, body)
		if got := webhookStatus(err); got != http.StatusBadRequest {
			t.Errorf("%s: status %d (%v), want 400", name, got, err)
		}
	}
	if diff := cmp.Diff(before, f.types(id)); diff != "" {
		t.Errorf("refused webhooks changed the order (-before +after):\n%s", diff)
	}
	f.wantCharges(t, id, 1500, 1)
}

// TestPGKeyInUseThenSuccess: 409 idempotency_key_in_use, then 200 →
// retried with the same key after a backoff, confirmed.
func TestPGKeyInUseThenSuccess(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	if err := f.sim.SetFaults(providersim.Faults{InUse409: 2}); err != nil {
		t.Fatal(err)
	}
	h := f.handler("pg-a", nil)
	res := f.placeOrder(h, providersim.TokenVisa, 60*time.Second)
	if !res.Final || res.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("PlaceOrder = final %v, %s; want confirmed", res.Final, res.Order.Status)
	}
	f.wantEvents(t, res.Order.ID, "order events", placedStartedConfirmed)
	f.wantCharges(t, res.Order.ID, 1500, 1)
}

// TestPGDeclineReleasesSeats: a decline fails the order, releases the
// reservation and its seats; no money moves.
func TestPGDeclineReleasesSeats(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	h := f.handler("pg-a", nil)
	res := f.placeOrder(h, providersim.TokenDecline, 60*time.Second)
	if !res.Final || res.Order.Status != domain.OrderStatusFailed || res.Order.FirstOutcome != domain.FailPaymentDeclined {
		t.Fatalf("PlaceOrder = final %v, %s (%s); want failed, payment_declined", res.Final, res.Order.Status, res.Order.FirstOutcome)
	}
	f.wantEvents(t, res.Order.ID, "order events", []string{"OrderPlaced", evStarted, evFailed, evOrderFail})
	// PlaceOrder answers once the order is final; the seats and then the
	// reservation are released right after, by the payment step's
	// follow-ups: wait for the reservation (the last of them).
	var (
		r   domain.Reservation
		err error
	)
	for deadline := time.Now().Add(30 * time.Second); ; {
		r, err = h.GetReservation(context.Background(), pgActor, res.Order.ReservationID)
		if (err == nil && r.Status == domain.ReservationStatusReleased) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || r.Status != domain.ReservationStatusReleased {
		t.Errorf("reservation %s (%v) after 30 s, want released", r.Status, err)
	}
	show, err := h.GetShow(context.Background(), f.show)
	if err != nil || show.Available() != show.Capacity {
		t.Errorf("show available %d of %d (%v), want all seats back", show.Available(), show.Capacity, err)
	}
	if net, n := f.charges(res.Order.ID); net != 0 || n != 0 {
		t.Errorf("simulator: net %d over %d succeeded charges, want 0", net, n)
	}
}

// TestPGChargeAfterFailureIsRefunded: a charge notice after the order failed
// is a redundant effect: RefundRequested before the refund call, refunded,
// net charges 0.
func TestPGChargeAfterFailureIsRefunded(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	h := f.handler("pg-a", nil)
	res := f.placeOrder(h, providersim.TokenDecline, 60*time.Second)
	id := res.Order.ID
	if res.Order.Status != domain.OrderStatusFailed {
		t.Fatalf("order %s, want failed", res.Order.Status)
	}
	// A stray PaymentIntent for the order (a stale sender, another system).
	stray := provider.PaymentRequest{Amount: 1500, Currency: "EUR", PaymentMethod: providersim.TokenVisa, OrderID: id, Attempt: 1}
	if _, err := f.client.CreatePayment(context.Background(), "stray-"+id, stray); err != nil {
		t.Fatal(err)
	}
	f.eventually(60*time.Second, "the redundant charge to be refunded", func() bool {
		return slices.Contains(f.types(id), evRefunded)
	})
	want := []string{"OrderPlaced", evStarted, evFailed, evOrderFail, evSucceeded, evRefundReq, evRefunded}
	f.wantEvents(t, id, "order events", want)
	if err := f.sim.WaitWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.wantEvents(t, id, "order events after every webhook", want)
	f.wantCharges(t, id, 0, 1)
	if o := f.order(h, id); o.Status != domain.OrderStatusFailed || o.NetCharged() != 0 {
		t.Errorf("order %s with net %d, want failed with 0", o.Status, o.NetCharged())
	}
}

// TestPGCancelRacesPayment: a cancel racing a successful payment, 50 times;
// every run ends in exactly one of {confirmed with tickets, cancelled with
// net charge 0}, never both, never neither.
func TestPGCancelRacesPayment(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	h := f.handler("pg-a", nil)
	ctx := context.Background()
	outcomes := map[string]int{}
	for i := range 50 {
		if i%2 == 1 {
			if err := f.sim.SetFaults(providersim.Faults{LatencyMS: rand.N(20)}); err != nil {
				t.Fatal(err)
			}
		} else {
			f.sim.ResetFaults()
		}
		res := f.placeOrder(h, providersim.TokenVisa, 0)
		id := res.Order.ID
		time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
		c, err := h.CancelOrder(ctx, f.req(OpCancelOrder), id)
		if err != nil {
			t.Fatalf("run %d: CancelOrder() = %v", i, err)
		}
		if c.Order.Status != domain.OrderStatusCancelled && c.Order.Status != domain.OrderStatusCancelling {
			t.Fatalf("run %d: CancelOrder() answered %s", i, c.Order.Status)
		}
		var o domain.Order
		f.eventually(60*time.Second, fmt.Sprintf("run %d to settle", i), func() bool {
			if err := h.ReconcileOrder(ctx, id); err != nil {
				t.Logf("run %d: ReconcileOrder: %v", i, err)
			}
			o = f.order(h, id)
			return (o.Status == domain.OrderStatusCancelled && len(o.PendingRefunds()) == 0) || o.Status == domain.OrderStatusConfirmed
		})
		net, n := f.charges(id)
		types := f.types(id)
		switch {
		case o.Status == domain.OrderStatusConfirmed && len(o.Tickets) == 1 && net == 1500 && n == 1:
			outcomes["confirmed"]++
		case o.Status == domain.OrderStatusCancelled && net == 0 && o.NetCharged() == 0 && n <= 1:
			outcomes["cancelled"]++
			if slices.Contains(types, evConfirmed) {
				outcomes["cancelled after confirmation"]++
			}
		default:
			t.Fatalf("run %d: order %s with %d tickets, net %d over %d charges, events %v", i, o.Status, len(o.Tickets), net, n, types)
		}
	}
	if outcomes["confirmed"]+outcomes["cancelled"] != 50 {
		t.Errorf("outcomes %v, want 50 runs", outcomes)
	}
	t.Logf("outcomes: %v", outcomes)
}

// TestPGProviderWindowPassed: an attempt's outcome stays unknown (its owner
// died after the provider charged) until the provider's window passed, so
// its key is forgotten; reconciliation (the list of PaymentIntents created
// in the attempt's range) records it before any new attempt, with search
// blind: never two PaymentIntents.
func TestPGProviderWindowPassed(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{SearchLag: 100 * time.Hour})
	f.pauseWebhooks(true)
	window := func(c *Config) { c.ProviderWindow = time.Hour; c.PaymentDeadline = 3 * time.Hour }
	hooks, reached, release := blockAt("payment.sent")
	a := f.handler("pg-dead-owner", window, WithHooks(hooks))
	b := f.handler("pg-reconciler", window)
	res := f.placeOrder(a, providersim.TokenTimeoutAfterCommit, 0)
	id := res.Order.ID
	<-reached // charged, connection dropped, owner gone before recording anything
	defer close(release)

	f.sim.AdvanceClock(25 * time.Hour) // the provider forgets the key
	f.clock.Advance(2 * time.Hour)     // past the window (measured from StartedAt) and the lease
	if err := b.ReconcileOrder(context.Background(), id); err != nil {
		t.Fatalf("ReconcileOrder() = %v", err)
	}
	want := []string{"OrderPlaced", evStarted, evSucceeded, evConfirmed}
	f.wantEvents(t, id, "order events", want)
	f.wantCharges(t, id, 1500, 1)
	if o := f.order(b, id); len(o.Attempts) != 1 {
		t.Errorf("attempts = %d, want 1 (no new attempt)", len(o.Attempts))
	}
}

// TestPGReconcilerFinishesAfterOwnerDied: the owner dies after the provider
// charged and before the outcome was recorded; the reconciler (another
// process, RunReconciler over a PendingOrders listing) records it. 1 charge.
func TestPGReconcilerFinishesAfterOwnerDied(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	f.pauseWebhooks(true)
	hooks, reached, release := blockAt("payment.sent")
	a := f.handler("pg-dead-owner", nil, WithHooks(hooks))
	b := f.handler("pg-reconciler", nil)
	res := f.placeOrder(a, providersim.TokenVisa, 0)
	id := res.Order.ID
	<-reached
	defer close(release)
	f.clock.Advance(time.Minute) // the dead owner's lease expires

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.RunReconciler(ctx, staticPending{id}, 50*time.Millisecond) }()
	f.eventually(60*time.Second, "the reconciler to confirm", func() bool {
		return f.order(b, id).Status == domain.OrderStatusConfirmed
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("RunReconciler() = %v, want context.Canceled", err)
	}
	f.wantEvents(t, id, "order events", placedStartedConfirmed)
	f.wantCharges(t, id, 1500, 1)
}

// staticPending lists fixed order ids.
type staticPending []string

func (p staticPending) PendingOrders(_ context.Context, after string, limit int) ([]string, error) {
	var out []string
	for _, id := range p {
		if id > after && len(out) < limit {
			out = append(out, id)
		}
	}
	return out, nil
}

var _ = eventstore.Any

// TestPGRefundUnderSavedServerErrorIsFoundInTheList: the cancel of a
// confirmed order is refunded, but the provider answers the refund with a
// 500 that it saved under the refund's key (the refund was made), and no
// webhook arrives: the reconciler finds the refund in the payment's list of
// refunds and records it, instead of retrying a replayed 500 for a day.
func TestPGRefundUnderSavedServerErrorIsFoundInTheList(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	h := f.handler("pg-a", nil)
	ctx := context.Background()
	res := f.placeOrder(h, providersim.TokenVisa, 60*time.Second)
	id := res.Order.ID
	if res.Order.Status != domain.OrderStatusConfirmed {
		t.Fatalf("order %s, want confirmed", res.Order.Status)
	}
	f.quietWithSavedError(ctx)
	if _, err := h.CancelOrder(ctx, f.req(OpCancelOrder), id); err != nil {
		t.Fatalf("CancelOrder() = %v", err)
	}
	f.wantCharges(t, id, 0, 1) // the provider refunded
	for range 3 {
		_ = h.ReconcileOrder(ctx, id)
	}
	o := f.order(h, id)
	if o.Status != domain.OrderStatusCancelled || len(o.PendingRefunds()) != 0 || o.NetCharged() != 0 {
		t.Errorf("order %s with pending refunds %v and net %d, want cancelled with none and 0 (events %v)", o.Status, o.PendingRefunds(), o.NetCharged(), f.types(id))
	}
}

// TestPGCancelUnderSavedServerErrorIsSettledByAFetch: past the payment
// deadline the order fails and its payment, still waiting for the
// customer's action, is cancelled; the provider cancels it but answers a
// 500 it saved under the cancel's key, and no webhook arrives. The
// reconciler reads the payment and records it canceled, instead of
// retrying a replayed 500 for a day.
func TestPGCancelUnderSavedServerErrorIsSettledByAFetch(t *testing.T) {
	t.Parallel()
	f := newPGFix(t, providersim.Config{})
	h := f.handler("pg-a", nil)
	ctx := context.Background()
	res := f.placeOrder(h, providersim.TokenAuthenticationRequired, 0)
	id := res.Order.ID
	f.eventually(30*time.Second, "the payment to require the customer's action", func() bool {
		return slices.Contains(f.types(id), evAction)
	})
	// The placing request's drive recorded that outcome and may still be
	// running; while it runs, ReconcileOrder's DrivePayment returns at once
	// (one drive per order in a process), deciding nothing.
	f.awaitDriveEnded(h, id)
	f.quietWithSavedError(ctx)
	f.clock.Advance(DefaultConfig().PaymentDeadline + time.Minute)
	for range 3 {
		_ = h.ReconcileOrder(ctx, id)
	}
	o := f.order(h, id)
	if o.Status != domain.OrderStatusFailed || len(o.PaymentsToCancel()) != 0 || !slices.Contains(f.types(id), evFailed) {
		t.Errorf("order %s with payments to cancel %v (events %v), want failed with its payment recorded canceled", o.Status, o.PaymentsToCancel(), f.types(id))
	}
	for _, c := range f.sim.Charges() {
		if c.Metadata[provider.MetadataOrderID] == id && c.Status != provider.PaymentCanceled {
			t.Errorf("PaymentIntent %s is %s at the provider, want canceled", c.ID, c.Status)
		}
	}
}
