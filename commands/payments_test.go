package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/provider"
)

// Fixtures of the payment tests: order payOrder of payActor for 2 seats of
// payShow (reservation payRes), placed at payT0 with the default windows.
const (
	payOrder  = "0197c000-0000-7000-8000-0000000000a1"
	payShow   = "0197c000-0000-7000-8000-0000000000b1"
	payRes    = "0197c000-0000-7000-8000-0000000000c1"
	payActor  = "user-pay"
	payIntent = "intent-pay"
	execA     = "exec-a"
	execB     = "exec-b"
)

var (
	payT0     = time.Date(2030, 7, 1, 10, 0, 0, 0, time.UTC)
	payPrice  = domain.Money{Amount: 1500, Currency: "EUR"}
	payAmount = payPrice.Times(2)
)

// payFix is one order on fakes, and the handler of executor execA.
type payFix struct {
	t       *testing.T
	store   *memStore
	clock   *fakeClock
	pay     *fakePayments
	metrics *recordingMetrics
	keys    *memKeys
	cfg     Config
	h       *Handler
	base    int // order events before the test's when
}

func payConfig() Config {
	cfg := DefaultConfig()
	cfg.Executor = execA
	return cfg
}

// newPayFix places the order (token tok) on a scheduled show with a held,
// ordered reservation, then appends given to the order stream.
func newPayFix(t *testing.T, cfg Config, token string, faults []payFault, given ...domain.Event) *payFix {
	t.Helper()
	keys := newMemKeys()
	// The order's data key, as PlaceOrder and its follow-up leave it.
	var sealed []byte
	if token != "" {
		dk := testDataKey(payOrder)
		sealed = dk.Seal([]byte(token), TokenAAD(payOrder))
		if _, err := keys.Create(context.Background(), payOrder, "", dk, nil, payT0.Add(cfg.PaymentDeadline)); err != nil {
			t.Fatal(err)
		}
	}
	placed := domain.PlacedFrom(domain.OrderClaimed{ReservationID: payRes, OrderID: payOrder, ShowID: payShow, Actor: payActor,
		Intent: payIntent, Quantity: 2, Amount: payAmount}, payT0.Add(cfg.PaymentDeadline), sealed)
	return newPayFixPlaced(t, cfg, keys, placed, faults, given...)
}

// newPayFixPlaced is newPayFix with the order's first event and key table given.
func newPayFixPlaced(t *testing.T, cfg Config, keys *memKeys, placed domain.OrderPlaced, faults []payFault, given ...domain.Event) *payFix {
	t.Helper()
	f := &payFix{t: t, store: newMemStore(), clock: newFakeClock(payT0), pay: newFakePayments(faults...), metrics: newRecordingMetrics(), cfg: cfg}
	f.store.SetClock(f.clock)
	f.pay.clock = f.clock // the provider's clock agrees with the database's
	f.keys = keys
	f.h = f.handler(cfg)
	mustAppend(t, f.store, domain.ShowStream(payShow),
		domain.ShowScheduled{ShowID: payShow, Name: "Pay Show", StartsAt: payT0.Add(48 * time.Hour), Capacity: 10, Price: payPrice},
		domain.SeatsHeld{ShowID: payShow, ReservationID: payRes, Actor: payActor, Intent: payIntent, Quantity: 2, Amount: payAmount, ExpiresAt: payT0.Add(10 * time.Minute)})
	mustAppend(t, f.store, domain.ReservationStream(payRes),
		domain.ReservationHeld{ReservationID: payRes, ShowID: payShow, Actor: payActor, Quantity: 2, Amount: payAmount, ExpiresAt: payT0.Add(10 * time.Minute)},
		domain.ReservationOrdered{ReservationID: payRes, OrderID: payOrder})
	mustAppend(t, f.store, domain.OrderStream(payOrder), placed)
	if len(given) > 0 {
		mustAppend(t, f.store, domain.OrderStream(payOrder), given...)
	}
	f.base = len(f.store.Types(domain.OrderStream(payOrder)))
	return f
}

// handler returns a handler on the fixture's fakes with cfg (another
// executor id makes another process).
func (f *payFix) handler(cfg Config) *Handler {
	return New(cfg, f.store, f.clock, f.pay, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithMetrics(f.metrics), WithKeys(f.keys))
}

// appended returns the types of the order events appended since the fixture was built.
func (f *payFix) appended() []string {
	if all := f.store.Types(domain.OrderStream(payOrder)); len(all) > f.base {
		return all[f.base:]
	}
	return nil
}

// wantAppended fails t unless the types of the order events appended since
// the fixture was built are want; what names them in the failure message.
func (f *payFix) wantAppended(t *testing.T, what string, want []string) {
	t.Helper()
	if diff := cmp.Diff(want, f.appended()); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// wantCalls fails t unless the payment fake received want calls of op
// ("create", "refund", "get", "cancel", "list", "search").
func (f *payFix) wantCalls(t *testing.T, op string, want int) {
	t.Helper()
	if n := f.pay.count(op); n != want {
		t.Errorf("%s calls = %d, want %d", op, n, want)
	}
}

func (f *payFix) order() domain.Order {
	f.t.Helper()
	o, _, err := f.h.LoadOrder(context.Background(), payOrder)
	if err != nil {
		f.t.Fatalf("LoadOrder: %v", err)
	}
	return o
}

// payKey is the provider key of attempt n.
func payKey(n int) string { return fmt.Sprintf("order-%s-%d", payOrder, n) }

// payRequest is attempt n's request with payment method tok_visa.
func payRequest(n int) provider.PaymentRequest {
	return provider.PaymentRequest{Amount: payAmount.Amount, Currency: payAmount.Currency, PaymentMethod: "tok_visa", OrderID: payOrder,
		Attempt: n, Description: fmt.Sprintf("2 ticket(s), order %s", payOrder)}
}

// payStarted is attempt n's lease by owner: first started at first, lease until until.
func payStarted(n int, owner string, first, until time.Time) domain.PaymentAttemptStarted {
	req := payRequest(n)
	return domain.PaymentAttemptStarted{OrderID: payOrder, Attempt: n, ProviderKey: payKey(n), Owner: owner, LeaseUntil: until,
		Amount: payAmount, StartedAt: first, RequestSHA256: attemptDigest(req), Description: req.Description}
}

var (
	evAction    = "PaymentActionRequired"
	evStarted   = "PaymentAttemptStarted"
	evSucceeded = "PaymentSucceeded"
	evFailed    = "PaymentFailed"
	evUnknown   = "PaymentOutcomeUnknown"
	evConfirmed = "OrderConfirmed"
	evOrderFail = "OrderFailed"
	evCancelReq = "OrderCancelRequested"
	evCancelled = "OrderCancelled"
	evRefundReq = "RefundRequested"
	evRefunded  = "RefundSucceeded"
	evRefused   = "RefundRefused"
	evReview    = "OrderNeedsReview"
)

func TestDrivePayment(t *testing.T) {
	t.Parallel()
	lease := DefaultConfig().PaymentLease
	expiredLease := payStarted(1, execB, payT0, payT0.Add(lease)) // evaluated at payT0+1m: expired and settled
	liveLeaseB := payStarted(1, execB, payT0, payT0.Add(2*time.Minute))
	narrowWindow := func() Config {
		c := payConfig()
		c.ProviderWindow = time.Hour
		c.PaymentDeadline = 3 * time.Hour
		return c
	}
	listDown := fmt.Errorf("%w: connection refused", provider.ErrUnavailable)
	listRefused := apiError(provider.ErrInvalidRequest, provider.APIError{StatusCode: 400, Type: provider.TypeInvalidRequestError, Code: "parameter_invalid_integer"})
	tests := []struct {
		name   string
		cfg    func() Config
		token  string
		faults []payFault
		given  []domain.Event
		// before runs on the fakes before the when (stray payments, forgotten keys).
		before func(f *payFix)
		after  time.Duration // clock advance from payT0 before the when
		// then
		want         []string
		wantStatus   string
		wantNet      int64
		wantCharges  int      // succeeded payments at the provider
		wantPayments int      // payments at the provider, whatever their status (-1: not checked)
		wantSends    []string // keys of the CreatePayment calls
		wantMetric   string
		foreignNet   int64 // of the provider's net, what another deployment's payments hold
	}{
		{name: "A payment that succeeds confirms the order with one PaymentIntent.",
			want: []string{evStarted, evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantSends: []string{payKey(1)}},
		{name: "A decline fails the order; no money moves.",
			faults: []payFault{faultDecline},
			want:   []string{evStarted, evFailed, evOrderFail}, wantStatus: domain.OrderStatusFailed, wantPayments: 1, wantSends: []string{payKey(1)}},
		{name: "A provider 409 is in progress, never a decline: the same key is repeated and the order confirmed.",
			faults: []payFault{faultInUse, faultInUse},
			want:   []string{evStarted, evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantSends: []string{payKey(1), payKey(1), payKey(1)}, wantMetric: "provider_in_use"},
		{name: "A connection dropped after the commit is unknown; the list finds the payment: no second one.",
			faults: []payFault{faultTimeoutAfter},
			want:   []string{evStarted, evUnknown, evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantSends: []string{payKey(1)}, wantMetric: "found_succeeded"},
		{name: "A 500 saved after the payment executed is unknown, never a failure; the list finds the payment.",
			faults: []payFault{faultErrorAfter},
			want:   []string{evStarted, evUnknown, evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantSends: []string{payKey(1)}, wantMetric: "found_succeeded"},
		{name: "A 500 before executing is retried inside the window with the same key and parameters.",
			faults: []payFault{faultErrorBefore},
			want:   []string{evStarted, evUnknown, evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantSends: []string{payKey(1), payKey(1)}, wantMetric: "not_found"},
		{name: "An idempotency error is an alert, never a decline; the order stays pending.",
			faults: []payFault{faultIdempotency},
			want:   []string{evStarted}, wantStatus: domain.OrderStatusPending, wantSends: []string{payKey(1)}, wantMetric: "idempotency_error"},
		{name: "A payment method the provider refuses fails the order; nothing was charged.",
			faults: []payFault{faultInvalid},
			want:   []string{evStarted, evFailed, evOrderFail}, wantStatus: domain.OrderStatusFailed, wantSends: []string{payKey(1)}},
		{name: "A provider that cannot be reached sends nothing and keeps the lease for a retry.",
			faults: []payFault{faultUnavailable},
			want:   []string{evStarted}, wantStatus: domain.OrderStatusPending, wantSends: []string{payKey(1)}},
		{name: "A payment that requires the customer's action is recorded; the order stays pending and nothing more is sent.",
			faults: []payFault{faultAction},
			want:   []string{evStarted, evAction}, wantStatus: domain.OrderStatusPending, wantPayments: 1, wantSends: []string{payKey(1)}},
		{name: "A payment still processing is recorded unknown and waited for; no second send.",
			faults: []payFault{faultProcessing},
			want:   []string{evStarted, evUnknown}, wantStatus: domain.OrderStatusPending, wantPayments: 1, wantSends: []string{payKey(1)},
			wantMetric: "found_unknown"},
		{name: "Another executor's live lease is left alone: no provider call.",
			given: []domain.Event{liveLeaseB}, after: time.Minute,
			wantStatus: domain.OrderStatusPending},
		{name: "An expired lease is reconciled by the list first: the owner's payment is recorded, none is sent.",
			given:  []domain.Event{expiredLease},
			before: func(f *payFix) { f.pay.addPayment(payOrder, 1, payAmount) },
			after:  time.Minute,
			want:   []string{evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantMetric: "found_succeeded"},
		{name: "Another deployment's payment with the order's metadata is not the attempt's: the attempt is taken over and sent.",
			given: []domain.Event{expiredLease}, after: time.Minute,
			before: func(f *payFix) {
				p := f.pay.addPayment(payOrder, 1, payAmount)
				f.pay.mu.Lock()
				f.pay.paymentLocked(p.ID).Metadata[provider.MetadataDeployment] = "staging"
				f.pay.mu.Unlock()
			},
			want: []string{evStarted, evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: 2 * payAmount.Amount, foreignNet: payAmount.Amount, wantCharges: 2, wantPayments: 2, wantSends: []string{payKey(1)},
			wantMetric: "lease_taken_over"},
		{name: "An expired lease with nothing listed is taken over and sent with the same key inside the window.",
			given: []domain.Event{expiredLease}, after: time.Minute,
			want: []string{evStarted, evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantSends: []string{payKey(1)}, wantMetric: "lease_taken_over"},
		{name: "Outside the window a payment found by the list is recorded and no new attempt starts.",
			cfg: narrowWindow, given: []domain.Event{expiredLease},
			before: func(f *payFix) {
				f.pay.addPayment(payOrder, 1, payAmount)
				f.pay.forgetKeys()
				f.pay.searchBlind = true
			}, after: 2 * time.Hour,
			want: []string{evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1},
		{name: "Outside the window, with nothing listed, attempt 2 starts with its own key.",
			cfg: narrowWindow, given: []domain.Event{expiredLease}, after: 2 * time.Hour,
			want: []string{evStarted, evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantSends: []string{payKey(2)}, wantMetric: "new_attempt"},
		{name: "Outside the window a new attempt waits until the last send settled.",
			cfg:   narrowWindow,
			given: []domain.Event{expiredLease, payStarted(1, execB, payT0, payT0.Add(2*time.Hour))}, after: 2*time.Hour + time.Second,
			wantStatus: domain.OrderStatusPending},
		{name: "Outside the window, while the list fails and search finds nothing, no new attempt starts.",
			cfg: narrowWindow, given: []domain.Event{expiredLease}, after: 2 * time.Hour,
			before:     func(f *payFix) { f.pay.listErr, f.pay.searchBlind = listDown, true },
			wantStatus: domain.OrderStatusPending, wantMetric: "list_failed"},
		{name: "Outside the window, while the list fails, a payment found by search is recorded.",
			cfg: narrowWindow, given: []domain.Event{expiredLease}, after: 2 * time.Hour,
			before: func(f *payFix) { f.pay.addPayment(payOrder, 1, payAmount); f.pay.listErr = listDown },
			want:   []string{evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed,
			wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1, wantMetric: "list_failed"},
		{name: "Outside the window, a list the provider refuses cannot prove the attempt made no payment: the order goes to review.",
			cfg: narrowWindow, given: []domain.Event{expiredLease}, after: 2 * time.Hour,
			before: func(f *payFix) { f.pay.listErr, f.pay.searchBlind = listRefused, true },
			want:   []string{evReview}, wantStatus: domain.OrderStatusNeedsReview, wantMetric: "needs_review"},
		{name: "Outside the window a payment token that is gone makes a new attempt impossible: the order fails.",
			cfg: narrowWindow, token: "-", given: []domain.Event{expiredLease}, after: 2 * time.Hour,
			want: []string{evOrderFail}, wantStatus: domain.OrderStatusFailed},
		{name: "Past the deadline without an attempt the order fails.",
			after: 16 * time.Minute,
			want:  []string{evOrderFail}, wantStatus: domain.OrderStatusFailed},
		{name: "Past the deadline a settled payment the list proves absent fails the order.",
			given: []domain.Event{expiredLease, domain.PaymentOutcomeUnknown{OrderID: payOrder, Attempt: 1}}, after: 16 * time.Minute,
			want: []string{evOrderFail}, wantStatus: domain.OrderStatusFailed, wantMetric: "deadline_failed"},
		{name: "Past the deadline, while the list fails, the order waits: nothing proves the payment absent.",
			given: []domain.Event{expiredLease, domain.PaymentOutcomeUnknown{OrderID: payOrder, Attempt: 1}}, after: 16 * time.Minute,
			before: func(f *payFix) { f.pay.listErr, f.pay.searchBlind = listDown, true }, wantStatus: domain.OrderStatusPending},
		{name: "Past the deadline a payment found at the provider still confirms the order.",
			given:  []domain.Event{expiredLease, domain.PaymentOutcomeUnknown{OrderID: payOrder, Attempt: 1}},
			before: func(f *payFix) { f.pay.addPayment(payOrder, 1, payAmount) }, after: 16 * time.Minute,
			want: []string{evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed, wantNet: payAmount.Amount, wantCharges: 1, wantPayments: 1},
		{name: "A cancelling order never sends; once its payment settled uncharged it ends cancelled.",
			given: []domain.Event{expiredLease, domain.OrderCancelRequested{OrderID: payOrder, Actor: payActor}}, after: time.Minute,
			want: []string{evCancelled}, wantStatus: domain.OrderStatusCancelled},
		{name: "A cancelling order whose payment is found is refunded and cancelled: net charge 0.",
			given:  []domain.Event{expiredLease, domain.OrderCancelRequested{OrderID: payOrder, Actor: payActor}},
			before: func(f *payFix) { f.pay.addPayment(payOrder, 1, payAmount) }, after: time.Minute,
			want:       []string{evSucceeded, evRefundReq, evCancelled, evRefunded},
			wantStatus: domain.OrderStatusCancelled, wantCharges: 1, wantPayments: 1},
		{name: "A cancelling order whose own lease is live waits for it to settle.",
			given: []domain.Event{payStarted(1, execA, payT0, payT0.Add(lease)), domain.OrderCancelRequested{OrderID: payOrder, Actor: payActor}},
			after: time.Second, wantStatus: domain.OrderStatusCancelling},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := payConfig()
			if tt.cfg != nil {
				cfg = tt.cfg()
			}
			token := "tok_visa"
			if tt.token == "-" {
				token = ""
			}
			f := newPayFix(t, cfg, token, tt.faults, tt.given...)
			if tt.before != nil {
				tt.before(f)
			}
			f.clock.Advance(tt.after)
			err := f.h.DrivePayment(context.Background(), payOrder)
			if err != nil && !errors.Is(err, domain.ErrUnavailable) {
				t.Fatalf("DrivePayment() error = %v", err)
			}
			f.wantAppended(t, "DrivePayment() appended", tt.want)
			o := f.order()
			if o.Status != tt.wantStatus {
				t.Errorf("order status = %s, want %s", o.Status, tt.wantStatus)
			}
			net, charges := f.pay.net()
			if net != tt.wantNet || charges != tt.wantCharges {
				t.Errorf("provider net = %d over %d succeeded payments, want %d over %d", net, charges, tt.wantNet, tt.wantCharges)
			}
			if n := f.pay.created(); n != tt.wantPayments {
				t.Errorf("provider payments = %d, want %d", n, tt.wantPayments)
			}
			if o.NetCharged() != net-tt.foreignNet {
				t.Errorf("order NetCharged() = %d, provider net = %d (%d of it another deployment's)", o.NetCharged(), net, tt.foreignNet)
			}
			var sends []string
			for _, c := range f.pay.calls {
				if c.Op == "create" {
					sends = append(sends, c.Key)
				}
			}
			if diff := cmp.Diff(tt.wantSends, sends); diff != "" {
				t.Errorf("CreatePayment sends (-want +got):\n%s", diff)
			}
			if tt.wantMetric != "" && f.metrics.get(tt.wantMetric) == 0 {
				t.Errorf("metric %q not counted; got %v", tt.wantMetric, f.metrics.results)
			}
			released := slices.Contains(f.store.Types(domain.ShowStream(payShow)), "SeatsReleased")
			if want := o.Status == domain.OrderStatusFailed || o.Status == domain.OrderStatusCancelled; released != want {
				t.Errorf("seats released = %v with the order %s", released, o.Status)
			}
		})
	}
}

// TestSendIsFencedWhenItStarts: the fence holds at the instant the call
// starts, not at the instant the drive decided to send: when reading the
// attempt's inputs stalls (the key table answers 25 s later, by the
// database clock), the send does not start with less than the provider
// timeout plus the send margin left on its lease; the lease is renewed
// first, and the order is paid once.
func TestSendIsFencedWhenItStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := payConfig()
	f := newPayFix(t, cfg, "tok_visa", nil, payStarted(1, execA, payT0, payT0.Add(cfg.PaymentLease)))
	var once sync.Once
	f.keys.onKey = func() { once.Do(func() { f.clock.Advance(25 * time.Second) }) }
	budget := cfg.ProviderTimeout + cfg.SendMargin
	var unfenced []string
	f.pay.onCreate = func(key string) {
		now, _ := f.clock.Now(ctx)
		o, _, err := f.h.LoadOrder(ctx, payOrder)
		if err != nil || !o.CanSend(1, execA, now, budget) {
			unfenced = append(unfenced, fmt.Sprintf("%s at %s, lease until %s", key, now.Format(time.TimeOnly), o.LastAttempt().LeaseUntil.Format(time.TimeOnly)))
		}
	}
	if err := f.h.DrivePayment(ctx, payOrder); err != nil {
		t.Fatalf("DrivePayment() = %v", err)
	}
	if len(unfenced) > 0 {
		t.Errorf("sends started without ProviderTimeout+SendMargin (%s) left on the lease: %v", budget, unfenced)
	}
	if o := f.order(); o.Status != domain.OrderStatusConfirmed {
		t.Errorf("order %s, want confirmed", o.Status)
	}
	if net, charges := f.pay.net(); net != payAmount.Amount || charges != 1 {
		t.Errorf("provider net = %d over %d payments, want %d over 1", net, charges, payAmount.Amount)
	}
}

// TestAttemptListRange: reconciliation lists the payments created from the
// attempt's first start to its last lease's end plus the settling margin,
// padded by the clock skew on both sides; a payment created just outside
// that range is not the attempt's.
func TestAttemptListRange(t *testing.T) {
	t.Parallel()
	cfg := payConfig()
	cfg.ClockSkew = 30 * time.Second
	first, until := payT0, payT0.Add(cfg.PaymentLease)
	renewed := payStarted(1, execB, first, until.Add(time.Minute))
	renewed.Description = ""
	f := newPayFix(t, cfg, "tok_visa", nil, payStarted(1, execB, first, until), renewed)
	f.clock.Advance(5 * time.Minute)
	if err := f.h.DrivePayment(context.Background(), payOrder); err != nil {
		t.Fatalf("DrivePayment() = %v", err)
	}
	var lists []string
	for _, c := range f.pay.calls {
		if c.Op == "list" {
			lists = append(lists, c.Key)
		}
	}
	want := first.Add(-30*time.Second).Format(time.RFC3339) + "/" + until.Add(time.Minute+cfg.SettleMargin+30*time.Second).Format(time.RFC3339)
	if len(lists) == 0 || lists[0] != want {
		t.Errorf("ListPayments ranges = %v, want first %s", lists, want)
	}
}

// TestCancelBeforeTheFirstSendFinishesAtOnce: a cancel that lands between
// this process's start of the attempt and its send needs no settling wait.
func TestCancelBeforeTheFirstSendFinishesAtOnce(t *testing.T) {
	t.Parallel()
	f := newPayFix(t, payConfig(), "tok_visa", nil)
	var once sync.Once
	f.store.SetAfterAppend(func(stream string, types []string) {
		if stream == domain.OrderStream(payOrder) && slices.Contains(types, evStarted) {
			once.Do(func() {
				mustAppend(t, f.store, stream, domain.OrderCancelRequested{OrderID: payOrder, Actor: payActor})
			})
		}
	})
	if err := f.h.DrivePayment(context.Background(), payOrder); err != nil {
		t.Fatalf("DrivePayment() = %v", err)
	}
	f.wantAppended(t, "appended", []string{evStarted, evCancelReq, evCancelled})
	f.wantCalls(t, "create", 0)
}

// TestStaleOwnerIsFenced shows the lease's fencing token at work: two
// executors decide on the same expired lease; the second append at the
// revision both loaded is rejected, and the loser sends nothing.
func TestStaleOwnerIsFenced(t *testing.T) {
	t.Parallel()
	f := newPayFix(t, payConfig(), "tok_visa", nil, payStarted(1, execA, payT0, payT0.Add(30*time.Second)))
	f.clock.Advance(time.Minute)
	ctx := context.Background()
	cfgB := payConfig()
	cfgB.Executor = execB
	b := f.handler(cfgB)

	staleOrder, staleStream, err := f.h.LoadOrder(ctx, payOrder) // A decides on what it loaded...
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DrivePayment(ctx, payOrder); err != nil { // ...while B takes over and pays
		t.Fatalf("B DrivePayment() = %v", err)
	}
	now, _ := f.clock.Now(ctx)
	err = f.h.takeOverAttempt(ctx, staleOrder, staleStream, *staleOrder.LastAttempt(), now, &driveState{})
	if !errors.Is(err, errRetry) {
		t.Fatalf("stale takeOverAttempt() = %v, want the revision conflict (errRetry)", err)
	}
	if f.metrics.get("lease_fenced") != 1 {
		t.Errorf("lease_fenced = %d, want 1", f.metrics.get("lease_fenced"))
	}
	if err := f.h.DrivePayment(ctx, payOrder); err != nil {
		t.Fatalf("A DrivePayment() after the takeover = %v", err)
	}
	f.wantAppended(t, "order events", []string{evStarted, evSucceeded, evConfirmed})
	f.wantCalls(t, "create", 1) // B's only
}

// TestConcurrentExecutorsStartOneAttempt races two executors on a placed order.
func TestConcurrentExecutorsStartOneAttempt(t *testing.T) {
	t.Parallel()
	for i := range 20 {
		f := newPayFix(t, payConfig(), "tok_visa", nil)
		cfgB := payConfig()
		cfgB.Executor = execB
		b := f.handler(cfgB)
		var wg sync.WaitGroup
		for _, h := range []*Handler{f.h, b} {
			wg.Go(func() {
				if err := h.DrivePayment(context.Background(), payOrder); err != nil {
					t.Errorf("run %d: DrivePayment() = %v", i, err)
				}
			})
		}
		wg.Wait()
		if diff := cmp.Diff([]string{evStarted, evSucceeded, evConfirmed}, f.appended()); diff != "" {
			t.Fatalf("run %d: order events (-want +got):\n%s", i, diff)
		}
		if n := f.pay.count("create"); n != 1 {
			t.Fatalf("run %d: CreatePayment sends = %d, want 1", i, n)
		}
	}
}

func TestReconcileOrderRetriesRefunds(t *testing.T) {
	t.Parallel()
	cancelledPaid := func(charge string) []domain.Event {
		return []domain.Event{payStarted(1, execA, payT0, payT0.Add(30*time.Second)),
			domain.PaymentSucceeded{OrderID: payOrder, Attempt: 1, ChargeID: charge, Amount: payAmount},
			domain.OrderConfirmed{OrderID: payOrder, Tickets: []domain.Ticket{{ID: "t1"}, {ID: "t2"}}},
			domain.RefundRequested{OrderID: payOrder, ChargeID: charge, Amount: payAmount, Key: domain.RefundKey(charge), Reason: domain.RefundCancelled},
			domain.OrderCancelled{OrderID: payOrder, VoidedTickets: []string{"t1", "t2"}}}
	}
	t.Run("A requested refund is sent with its key and recorded.", func(t *testing.T) {
		t.Parallel()
		pay := newFakePayments()
		ch := pay.addPayment(payOrder, 1, payAmount)
		f := newPayFix(t, payConfig(), "tok_visa", nil, cancelledPaid(ch.ID)...)
		f.pay = pay
		f.h = f.handler(f.cfg)
		for range 2 {
			if err := f.h.ReconcileOrder(context.Background(), payOrder); err != nil {
				t.Fatalf("ReconcileOrder() = %v", err)
			}
		}
		f.wantAppended(t, "appended", []string{evRefunded})
		if net, _ := pay.net(); net != 0 {
			t.Errorf("provider net = %d, want 0", net)
		}
		if n := pay.count("refund"); n != 1 {
			t.Errorf("refund calls = %d, want 1", n)
		}
	})
	t.Run("A refund made before its key was forgotten is found by listing the payment's refunds.", func(t *testing.T) {
		t.Parallel()
		pay := newFakePayments()
		ch := pay.addPayment(payOrder, 1, payAmount)
		if _, err := pay.Refund(context.Background(), domain.RefundKey(ch.ID), provider.PaymentRefundRequest{PaymentID: ch.ID, Amount: payAmount.Amount,
			Metadata: map[string]string{refundMetaKey: domain.RefundKey(ch.ID)}}); err != nil {
			t.Fatal(err)
		}
		pay.forgetKeys()
		f := newPayFix(t, payConfig(), "tok_visa", nil, cancelledPaid(ch.ID)...)
		f.pay = pay
		f.h = f.handler(f.cfg)
		if err := f.h.ReconcileOrder(context.Background(), payOrder); err != nil {
			t.Fatalf("ReconcileOrder() = %v", err)
		}
		f.wantAppended(t, "appended", []string{evRefunded})
		if net, _ := pay.net(); net != 0 {
			t.Errorf("provider net = %d, want 0 (one refund)", net)
		}
	})
	t.Run("A refund made whose 500 the provider saved and replays is found by listing the payment's refunds.", func(t *testing.T) {
		t.Parallel()
		pay := newFakePayments()
		ch := pay.addPayment(payOrder, 1, payAmount)
		pay.refundErrAfter = 1
		f := newPayFix(t, payConfig(), "tok_visa", nil, cancelledPaid(ch.ID)...)
		f.pay = pay
		f.h = f.handler(f.cfg)
		for range 3 {
			_ = f.h.ReconcileOrder(context.Background(), payOrder)
		}
		f.wantAppended(t, "appended (the refund was made; its key replays a 500)", []string{evRefunded})
		if net, _ := pay.net(); net != 0 {
			t.Errorf("provider net = %d, want 0 (one refund)", net)
		}
		if o := f.order(); o.NetCharged() != 0 || len(o.PendingRefunds()) != 0 {
			t.Errorf("order NetCharged() = %d with pending refunds %v, want 0 and none", o.NetCharged(), o.PendingRefunds())
		}
	})
	t.Run("A refund of a payment the provider does not know puts the order in review and is not sent again.", func(t *testing.T) {
		t.Parallel()
		f := newPayFix(t, payConfig(), "tok_visa", nil, cancelledPaid("pi_forgotten")...)
		for range 3 {
			if err := f.h.ReconcileOrder(context.Background(), payOrder); err != nil {
				t.Fatalf("ReconcileOrder() = %v", err)
			}
		}
		f.wantAppended(t, "appended", []string{evRefused, evReview})
		if o := f.order(); o.Status != domain.OrderStatusNeedsReview || len(o.PendingRefunds()) != 0 {
			t.Errorf("order is %s with pending refunds %v, want needs_review with none", o.Status, o.PendingRefunds())
		}
		if n, g := f.pay.count("refund"), f.pay.count("get"); n != 1 || g != 1 {
			t.Errorf("refund calls = %d, payment reads = %d; want 1 and 1 (three passes, no retry)", n, g)
		}
		if r, nr := f.metrics.get("refund_refused"), f.metrics.get("needs_review"); r != 1 || nr != 1 {
			t.Errorf("metrics: refund_refused %d, needs_review %d; want 1, 1", r, nr)
		}
	})
	t.Run("A 404 to the refund that a read of the payment contradicts is retried, not refused.", func(t *testing.T) {
		t.Parallel()
		pay := newFakePayments()
		ch := pay.addPayment(payOrder, 1, payAmount)
		pay.refund404 = 1
		f := newPayFix(t, payConfig(), "tok_visa", nil, cancelledPaid(ch.ID)...)
		f.pay = pay
		f.h = f.handler(f.cfg)
		if err := f.h.ReconcileOrder(context.Background(), payOrder); !errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("ReconcileOrder() with a 404 to the refund = %v, want the 404 (retried later)", err)
		}
		if got := f.appended(); len(got) != 0 {
			t.Fatalf("appended %v after a contradicted 404, want nothing", got)
		}
		if err := f.h.ReconcileOrder(context.Background(), payOrder); err != nil {
			t.Fatalf("ReconcileOrder() again = %v", err)
		}
		f.wantAppended(t, "appended", []string{evRefunded})
		if net, _ := pay.net(); net != 0 {
			t.Errorf("provider net = %d, want 0", net)
		}
	})
}

// TestReconcileOrderShortRefundNeedsReview: an operator refunded part of the
// charge (in the provider's dashboard) before the cancel's full refund was
// sent; the provider refuses that as amount_too_large. What was refunded is
// recorded, and the order, part of whose charge stands, goes to review.
func TestReconcileOrderShortRefundNeedsReview(t *testing.T) {
	t.Parallel()
	pay := newFakePayments()
	ch := pay.addPayment(payOrder, 1, payAmount)
	f := newPayFix(t, payConfig(), "tok_visa", nil, payStarted(1, execA, payT0, payT0.Add(30*time.Second)),
		domain.PaymentSucceeded{OrderID: payOrder, Attempt: 1, ChargeID: ch.ID, Amount: payAmount},
		domain.OrderConfirmed{OrderID: payOrder, Tickets: []domain.Ticket{{ID: "t1"}, {ID: "t2"}}},
		domain.RefundRequested{OrderID: payOrder, ChargeID: ch.ID, Amount: payAmount, Key: domain.RefundKey(ch.ID), Reason: domain.RefundCancelled},
		domain.OrderCancelled{OrderID: payOrder, VoidedTickets: []string{"t1", "t2"}})
	const partial = 1000
	if _, err := pay.Refund(context.Background(), "dashboard-refund", provider.PaymentRefundRequest{PaymentID: ch.ID, Amount: partial}); err != nil {
		t.Fatal(err)
	}
	f.pay = pay
	f.h = f.handler(f.cfg)
	for range 2 {
		if err := f.h.ReconcileOrder(context.Background(), payOrder); err != nil {
			t.Fatalf("ReconcileOrder() = %v", err)
		}
	}
	f.wantAppended(t, "appended (the provider refused the full amount: too large)", []string{evRefunded, evReview})
	if net, _ := pay.net(); net != payAmount.Amount-partial {
		t.Errorf("provider net = %d, want %d (only the operator's refund)", net, payAmount.Amount-partial)
	}
	if o := f.order(); o.Status != domain.OrderStatusNeedsReview || o.NetCharged() != payAmount.Amount-partial || len(o.PendingRefunds()) != 0 {
		t.Errorf("order is %s, NetCharged() %d, pending refunds %v; want needs_review, %d, none", o.Status, o.NetCharged(),
			o.PendingRefunds(), payAmount.Amount-partial)
	}
	if nr := f.metrics.get("needs_review"); nr != 1 {
		t.Errorf("metrics: needs_review %d, want 1", nr)
	}
}

// memProcessed is an in-memory ProcessedEvents.
type memProcessed struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (m *memProcessed) Processed(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.seen[id]
	return ok, nil
}

func (m *memProcessed) MarkProcessed(_ context.Context, id string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[string]time.Time{}
	}
	if _, ok := m.seen[id]; !ok {
		m.seen[id] = at
	}
	return nil
}

func (m *memProcessed) PruneProcessed(_ context.Context, before time.Time) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for id, at := range m.seen {
		if at.Before(before) {
			delete(m.seen, id)
			n++
		}
	}
	return n, nil
}

// payEvent is a webhook event about payment p: its metadata as a
// payment_intent.* event carries it (none for charge.*).
func payEvent(id, typ string, p provider.Payment) provider.WebhookEvent {
	ev := provider.WebhookEvent{ID: id, Type: typ, PaymentID: p.ID}
	if strings.HasPrefix(typ, "payment_intent.") {
		ev.Metadata = p.Metadata
	}
	return ev
}

func TestHandleProviderEvent(t *testing.T) {
	t.Parallel()
	live := payStarted(1, execA, payT0, payT0.Add(30*time.Second))
	failed := []domain.Event{live, domain.PaymentFailed{OrderID: payOrder, Attempt: 1, ChargeID: "pi_declined", Code: "card_declined"},
		domain.OrderFailed{OrderID: payOrder, Reason: domain.FailPaymentDeclined}}
	tests := []struct {
		name       string
		given      []domain.Event
		evType     string
		status     provider.PaymentStatus // the payment's status at the provider (default succeeded)
		meta       map[string]string      // the payment's metadata (default the order's, attempt 1)
		want       []string
		wantStatus string
		wantNet    int64
		wantGets   int
	}{
		{name: "A notice before the sender's answer confirms the order.",
			given: []domain.Event{live}, evType: provider.EventPaymentIntentSucceeded,
			want: []string{evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed, wantNet: payAmount.Amount, wantGets: 1},
		{name: "A stale failure notice of a succeeded payment is folded as the payment's current state.",
			given: []domain.Event{live}, evType: provider.EventPaymentIntentPaymentFailed,
			want: []string{evSucceeded, evConfirmed}, wantStatus: domain.OrderStatusConfirmed, wantNet: payAmount.Amount, wantGets: 1},
		{name: "A payment notice after the order failed is a redundant effect, refunded: net charge 0.",
			given: failed, evType: provider.EventPaymentIntentSucceeded,
			want: []string{evSucceeded, evRefundReq, evRefunded}, wantStatus: domain.OrderStatusFailed, wantGets: 1},
		{name: "A notice that the payment requires the customer's action records it; the order stays pending.",
			given: []domain.Event{live}, evType: provider.EventPaymentIntentRequiresAction, status: provider.PaymentRequiresAction,
			want: []string{evAction}, wantStatus: domain.OrderStatusPending, wantGets: 1},
		{name: "A notice about a payment of another deployment is acknowledged and ignored without a fetch.",
			given: []domain.Event{live}, evType: provider.EventPaymentIntentSucceeded,
			meta:       map[string]string{provider.MetadataOrderID: payOrder, provider.MetadataAttempt: "1", provider.MetadataDeployment: "staging"},
			wantStatus: domain.OrderStatusPending, wantNet: payAmount.Amount},
		{name: "A notice about a payment without an order is acknowledged and ignored without a fetch.",
			given: []domain.Event{live}, evType: provider.EventPaymentIntentSucceeded, meta: map[string]string{"cart": "42"},
			wantStatus: domain.OrderStatusPending, wantNet: payAmount.Amount},
		{name: "A charge notice about a payment of another deployment is ignored after the fetch.",
			given: []domain.Event{live}, evType: provider.EventChargeRefunded,
			meta:       map[string]string{provider.MetadataOrderID: payOrder, provider.MetadataAttempt: "1", provider.MetadataDeployment: "staging"},
			wantStatus: domain.OrderStatusPending, wantNet: payAmount.Amount, wantGets: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newPayFix(t, payConfig(), "tok_visa", nil, tt.given...)
			processed := &memProcessed{}
			f.h = New(f.cfg, f.store, f.clock, f.pay, newTestRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), WithMetrics(f.metrics),
				WithKeys(f.keys), WithProcessedEvents(processed))
			p := f.pay.addPayment(payOrder, 1, payAmount)
			if tt.status != "" {
				f.pay.setStatus(p.ID, tt.status)
			}
			if tt.meta != nil {
				f.pay.mu.Lock()
				f.pay.paymentLocked(p.ID).Metadata = tt.meta
				f.pay.mu.Unlock()
			}
			p, _ = f.pay.GetPayment(context.Background(), p.ID)
			ev := payEvent("evt_1", tt.evType, p)
			for range 3 { // redeliveries change nothing, and are not fetched again
				if err := f.h.HandleProviderEvent(context.Background(), ev); err != nil {
					t.Fatalf("HandleProviderEvent() = %v", err)
				}
			}
			f.wantAppended(t, "appended", tt.want)
			if o := f.order(); o.Status != tt.wantStatus {
				t.Errorf("order status = %s, want %s", o.Status, tt.wantStatus)
			}
			if net, _ := f.pay.net(); net != tt.wantNet {
				t.Errorf("provider net = %d, want %d", net, tt.wantNet)
			}
			if g := f.pay.count("get") - 1; g != tt.wantGets { // less the test's own read
				t.Errorf("payment fetches = %d, want %d (once, then deduplicated by event id)", g, tt.wantGets)
			}
		})
	}
	t.Run("A payment of an order the event store does not know is refused, so the provider redelivers.", func(t *testing.T) {
		t.Parallel()
		f := newPayFix(t, payConfig(), "tok_visa", nil)
		p := f.pay.addPayment("0197c000-0000-7000-8000-0000000000ff", 1, payAmount)
		err := f.h.HandleProviderEvent(context.Background(), payEvent("evt_2", provider.EventPaymentIntentSucceeded, p))
		if !errors.Is(err, domain.ErrOrderNotFound) {
			t.Errorf("HandleProviderEvent() = %v, want ErrOrderNotFound", err)
		}
	})
	t.Run("A refund notice records the refund of a cancelled order.", func(t *testing.T) {
		t.Parallel()
		pay := newFakePayments()
		p := pay.addPayment(payOrder, 1, payAmount)
		f := newPayFix(t, payConfig(), "tok_visa", nil, live, domain.PaymentSucceeded{OrderID: payOrder, Attempt: 1, ChargeID: p.ID, Amount: payAmount},
			domain.OrderConfirmed{OrderID: payOrder, Tickets: []domain.Ticket{{ID: "t1"}, {ID: "t2"}}},
			domain.RefundRequested{OrderID: payOrder, ChargeID: p.ID, Amount: payAmount, Key: domain.RefundKey(p.ID), Reason: domain.RefundCancelled},
			domain.OrderCancelled{OrderID: payOrder, VoidedTickets: []string{"t1", "t2"}})
		f.pay = pay
		f.h = f.handler(f.cfg)
		if _, err := pay.Refund(context.Background(), domain.RefundKey(p.ID), provider.PaymentRefundRequest{PaymentID: p.ID,
			Metadata: map[string]string{refundMetaKey: domain.RefundKey(p.ID)}}); err != nil {
			t.Fatal(err)
		}
		if err := f.h.HandleProviderEvent(context.Background(), payEvent("evt_3", provider.EventChargeRefunded, p)); err != nil {
			t.Fatalf("HandleProviderEvent() = %v", err)
		}
		f.wantAppended(t, "appended", []string{evRefunded})
	})
}

func TestReceiveWebhookVerifiesBeforeRecording(t *testing.T) {
	t.Parallel()
	f := newPayFix(t, payConfig(), "tok_visa", nil, payStarted(1, execA, payT0, payT0.Add(30*time.Second)))
	p := f.pay.addPayment(payOrder, 1, payAmount)
	body, err := json.Marshal(fakeEvent{ID: "evt_1", Type: provider.EventPaymentIntentSucceeded, PaymentID: p.ID, Metadata: p.Metadata})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		sig     string
		body    []byte
		wantErr error
	}{
		{name: "A signature under another secret is refused.", sig: fakeSign(body, payT0, "whsec_other"), body: body, wantErr: ErrWebhookSignature},
		{name: "A missing signature is refused.", sig: "", body: body, wantErr: ErrWebhookSignature},
		{name: "A signature of other bytes is refused.", sig: fakeSign(append(body, ' '), payT0, fakeWebhookSecret), body: body, wantErr: ErrWebhookSignature},
		{name: "A timestamp older than five minutes (by the database clock) is refused.", sig: fakeSign(body, payT0.Add(-6*time.Minute), fakeWebhookSecret), body: body, wantErr: ErrWebhookStale},
		{name: "A timestamp five minutes in the future is refused.", sig: fakeSign(body, payT0.Add(6*time.Minute), fakeWebhookSecret), body: body, wantErr: ErrWebhookStale},
		{name: "A signed body that is not an event is refused.", sig: fakeSign([]byte(`{}`), payT0, fakeWebhookSecret), body: []byte(`{}`), wantErr: ErrWebhookMalformed},
	}
	for _, tt := range tests {
		if err := f.h.ReceiveWebhook(context.Background(), tt.sig, tt.body); !errors.Is(err, tt.wantErr) {
			t.Errorf("%s ReceiveWebhook() = %v, want %v", tt.name, err, tt.wantErr)
		}
	}
	if got := f.appended(); len(got) != 0 || f.pay.count("get") != 0 {
		t.Fatalf("refused webhooks recorded %v and fetched %d payments, want nothing", got, f.pay.count("get"))
	}
	if err := f.h.ReceiveWebhook(context.Background(), fakeSign(body, payT0.Add(-4*time.Minute), fakeWebhookSecret), body); err != nil {
		t.Fatalf("ReceiveWebhook(valid) = %v", err)
	}
	f.wantAppended(t, "appended", []string{evSucceeded, evConfirmed})
}

// TestCheckWebhookHeader: the header alone is checked against the database
// clock before a body is read: missing or malformed is a bad signature,
// outside five minutes stale, and nothing is fetched or recorded.
func TestCheckWebhookHeader(t *testing.T) {
	t.Parallel()
	f := newPayFix(t, payConfig(), "tok_visa", nil)
	body := []byte(`{}`)
	for _, tt := range []struct {
		sig  string
		want error
	}{
		{"", ErrWebhookSignature},
		{"v1=00", ErrWebhookSignature},
		{"t=soon,v1=00", ErrWebhookSignature},
		{fakeSign(body, payT0.Add(-6*time.Minute), fakeWebhookSecret), ErrWebhookStale},
		{fakeSign(body, payT0.Add(6*time.Minute), fakeWebhookSecret), ErrWebhookStale},
		{fakeSign(body, payT0.Add(-4*time.Minute), "whsec_other"), nil}, // the signature needs the body
		{fakeSign(body, payT0, fakeWebhookSecret), nil},
	} {
		if err := f.h.CheckWebhookHeader(context.Background(), tt.sig); !errors.Is(err, tt.want) {
			t.Errorf("CheckWebhookHeader(%q) = %v, want %v", tt.sig, err, tt.want)
		}
	}
	if got := f.appended(); len(got) != 0 || f.pay.count("get") != 0 {
		t.Fatalf("header checks recorded %v and fetched %d payments, want nothing", got, f.pay.count("get"))
	}
}

func TestCancelOrder(t *testing.T) {
	t.Parallel()
	req := func(key string) Request {
		return Request{Actor: payActor, Operation: OpCancelOrder, Key: key}
	}
	t.Run("A confirmed order is refunded, its tickets voided and it is cancelled at once.", func(t *testing.T) {
		t.Parallel()
		f := newPayFix(t, payConfig(), "tok_visa", nil)
		if err := f.h.DrivePayment(context.Background(), payOrder); err != nil {
			t.Fatal(err)
		}
		f.base = len(f.store.Types(domain.OrderStream(payOrder)))
		res, err := f.h.CancelOrder(context.Background(), req("c1"), payOrder)
		if err != nil {
			t.Fatalf("CancelOrder() = %v", err)
		}
		if !res.Final || res.Order.Status != domain.OrderStatusCancelled {
			t.Errorf("CancelOrder() = final %v, status %s, want final cancelled", res.Final, res.Order.Status)
		}
		f.wantAppended(t, "appended", []string{evRefundReq, evCancelled, evRefunded})
		if net, _ := f.pay.net(); net != 0 {
			t.Errorf("provider net = %d, want 0", net)
		}
	})
	t.Run("A cancel during a payment in flight makes the order cancelling; the charge is refunded and it ends cancelled.", func(t *testing.T) {
		t.Parallel()
		f := newPayFix(t, payConfig(), "tok_visa", nil)
		inFlight, release := make(chan struct{}), make(chan struct{})
		f.pay.onCreate = func(string) { close(inFlight); <-release }
		done := make(chan error, 1)
		go func() { done <- f.h.DrivePayment(context.Background(), payOrder) }()
		<-inFlight
		res, err := f.h.CancelOrder(context.Background(), req("c2"), payOrder)
		if err != nil {
			t.Fatalf("CancelOrder() = %v", err)
		}
		if res.Final || res.Order.Status != domain.OrderStatusCancelling {
			t.Errorf("CancelOrder() = final %v, status %s, want not final, cancelling", res.Final, res.Order.Status)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("DrivePayment() = %v", err)
		}
		f.wantAppended(t, "appended", []string{evStarted, evCancelReq, evSucceeded, evRefundReq, evCancelled, evRefunded})
		if o := f.order(); o.Status != domain.OrderStatusCancelled || o.NetCharged() != 0 {
			t.Errorf("order %s with net %d, want cancelled with 0", o.Status, o.NetCharged())
		}
		if net, charges := f.pay.net(); net != 0 || charges != 1 {
			t.Errorf("provider net = %d over %d payments, want 0 over 1", net, charges)
		}
		res, err = f.h.CancelOrder(context.Background(), req("c2"), payOrder)
		if err != nil || !res.Final || !res.Replayed {
			t.Errorf("repeat CancelOrder() = final %v replayed %v, %v; want a final replay", res.Final, res.Replayed, err)
		}
	})
	t.Run("A cancel whose payment the provider no longer knows is final and leaves the order in review; repeats answer the same.", func(t *testing.T) {
		t.Parallel()
		f := newPayFix(t, payConfig(), "tok_visa", nil)
		if err := f.h.DrivePayment(context.Background(), payOrder); err != nil {
			t.Fatal(err)
		}
		f.pay.forgetPayments()
		f.base = len(f.store.Types(domain.OrderStream(payOrder)))
		res, err := f.h.CancelOrder(context.Background(), req("c5"), payOrder)
		if err != nil || !res.Final || res.Order.Status != domain.OrderStatusNeedsReview {
			t.Fatalf("CancelOrder() = final %v, status %s, %v; want final, needs_review", res.Final, res.Order.Status, err)
		}
		want := []string{evRefundReq, evCancelled, evRefused, evReview}
		f.wantAppended(t, "appended", want)
		for _, key := range []string{"c5", "c6"} {
			res, err = f.h.CancelOrder(context.Background(), req(key), payOrder)
			if err != nil || !res.Final || res.Order.Status != domain.OrderStatusNeedsReview || res.Replayed != (key == "c5") {
				t.Errorf("CancelOrder(%s) again = final %v, status %s, replayed %v, %v; want final, needs_review, no 409",
					key, res.Final, res.Order.Status, res.Replayed, err)
			}
		}
		f.wantAppended(t, "appended after the repeats", want)
		f.wantCalls(t, "refund", 1)
	})
	t.Run("A cancel of a failed order is refused with 409 and changes nothing.", func(t *testing.T) {
		t.Parallel()
		f := newPayFix(t, payConfig(), "tok_visa", []payFault{faultDecline})
		if err := f.h.DrivePayment(context.Background(), payOrder); err != nil {
			t.Fatal(err)
		}
		f.base = len(f.store.Types(domain.OrderStream(payOrder)))
		_, err := f.h.CancelOrder(context.Background(), req("c3"), payOrder)
		if !errors.Is(err, domain.ErrNotCancellable) || domain.KindOf(err) != domain.Conflict {
			t.Errorf("CancelOrder() = %v, want ErrNotCancellable (409)", err)
		}
		if got := f.appended(); len(got) != 0 {
			t.Errorf("appended %v, want nothing", got)
		}
	})
	t.Run("A cancel after the show started is refused with 409; the tickets stay valid.", func(t *testing.T) {
		t.Parallel()
		f := newPayFix(t, payConfig(), "tok_visa", nil)
		if err := f.h.DrivePayment(context.Background(), payOrder); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(49 * time.Hour)
		_, err := f.h.CancelOrder(context.Background(), req("c4"), payOrder)
		if !errors.Is(err, domain.ErrShowStarted) {
			t.Errorf("CancelOrder() = %v, want ErrShowStarted", err)
		}
		if o := f.order(); o.Status != domain.OrderStatusConfirmed || len(o.Tickets) != 2 {
			t.Errorf("order %s with %d tickets, want confirmed with 2", o.Status, len(o.Tickets))
		}
	})
}

// ensure the fakes satisfy the interfaces.
var (
	_ EventStore = (*memStore)(nil)
	_ Log        = (*memStore)(nil)
	_ Clock      = (*fakeClock)(nil)
	_ Payments   = (*fakePayments)(nil)
	_            = eventstore.Any
)

// TestMemStoreSubscribeAll checks the fake's log order, so tests of the
// process manager can rely on it.
func TestMemStoreSubscribeAll(t *testing.T) {
	t.Parallel()
	m := newMemStore()
	mustAppend(t, m, "a", domain.OrderCancelled{OrderID: "1"})
	mustAppend(t, m, "b", domain.OrderCancelled{OrderID: "2"}, domain.OrderCancelled{OrderID: "3"})
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	err := m.SubscribeAll(ctx, eventstore.Position{}, func(_ context.Context, batch []eventstore.RecordedEvent) error {
		for _, r := range batch {
			got = append(got, r.Stream)
		}
		if len(got) == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("SubscribeAll() = %v, want context.Canceled", err)
	}
	if diff := cmp.Diff([]string{"a", "b", "b"}, got); diff != "" {
		t.Errorf("streams in log order (-want +got):\n%s", diff)
	}
}

// TestPaymentActionRequired: a payment that requires the customer's action
// (Strong Customer Authentication) keeps the order pending with its client
// secret sealed; the reconciler's fetch settles it once the customer acted;
// a cancel cancels it; at the deadline the order fails, its seats are
// released and the payment is cancelled, and a success that meets that
// cancel is recorded and refunded.
func TestPaymentActionRequired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// waiting drives the order into requires_action and returns its payment id.
	waiting := func(t *testing.T) (*payFix, string) {
		t.Helper()
		f := newPayFix(t, payConfig(), "tok_visa", []payFault{faultAction})
		if err := f.h.DrivePayment(ctx, payOrder); err != nil {
			t.Fatalf("DrivePayment() = %v", err)
		}
		f.wantAppended(t, "appended", []string{evStarted, evAction})
		o := f.order()
		return f, o.LastAttempt().ChargeID
	}
	t.Run("The customer's client gets the client secret and next action; they are sealed in the log.", func(t *testing.T) {
		t.Parallel()
		f, id := waiting(t)
		p, _ := f.pay.GetPayment(ctx, id)
		a, err := f.h.PaymentAction(ctx, f.order())
		if err != nil || a == nil || a.ClientSecret != p.ClientSecret || string(a.NextAction) != string(p.NextAction) {
			t.Fatalf("PaymentAction() = %v, %v; want the payment's client secret and next action", a, err)
		}
		for _, raw := range rawData(t, f.store, domain.OrderStream(payOrder)) {
			if strings.Contains(string(raw), "_secret_") || strings.Contains(string(raw), "tok_visa") {
				t.Errorf("an order event holds a secret in clear: %s", raw)
			}
		}
		if s := fmt.Sprintf("%v %+v %#v", a, a, *a); strings.Contains(s, "_secret_") {
			t.Errorf("a formatted PaymentAction shows the client secret: %s", s)
		}
		if err := f.keys.Shred(ctx, payOrder); err != nil {
			t.Fatal(err)
		}
		if a, err := f.h.PaymentAction(ctx, f.order()); a != nil || err != nil {
			t.Errorf("PaymentAction() after the key was shredded = %v, %v; want nothing", a, err)
		}
	})
	t.Run("Once the customer authenticated, the reconciler's fetch confirms the order.", func(t *testing.T) {
		t.Parallel()
		f, id := waiting(t)
		f.pay.setStatus(id, provider.PaymentSucceeded)
		if err := f.h.ReconcileOrder(ctx, payOrder); err != nil {
			t.Fatalf("ReconcileOrder() = %v", err)
		}
		f.wantAppended(t, "appended", []string{evStarted, evAction, evSucceeded, evConfirmed})
		f.wantCalls(t, "create", 1)
		if a, _ := f.h.PaymentAction(ctx, f.order()); a != nil {
			t.Errorf("PaymentAction() of a confirmed order = %v, want nothing", a)
		}
	})
	t.Run("A failed authentication fails the order and releases its seats.", func(t *testing.T) {
		t.Parallel()
		f, id := waiting(t)
		f.pay.setStatus(id, provider.PaymentRequiresPaymentMethod)
		if err := f.h.ReconcileOrder(ctx, payOrder); err != nil {
			t.Fatalf("ReconcileOrder() = %v", err)
		}
		f.wantAppended(t, "appended", []string{evStarted, evAction, evFailed, evOrderFail})
		if !slices.Contains(f.store.Types(domain.ShowStream(payShow)), "SeatsReleased") {
			t.Errorf("seats not released")
		}
	})
	t.Run("Before the deadline an abandoned payment waits; at the deadline the order fails and the payment is cancelled.", func(t *testing.T) {
		t.Parallel()
		f, id := waiting(t)
		f.clock.Advance(14 * time.Minute)
		if err := f.h.ReconcileOrder(ctx, payOrder); err != nil {
			t.Fatalf("ReconcileOrder() = %v", err)
		}
		f.wantAppended(t, "appended before the deadline", []string{evStarted, evAction})
		f.clock.Advance(time.Minute)
		for range 2 {
			if err := f.h.ReconcileOrder(ctx, payOrder); err != nil {
				t.Fatalf("ReconcileOrder() = %v", err)
			}
		}
		f.wantAppended(t, "appended", []string{evStarted, evAction, evOrderFail, evFailed})
		if p, _ := f.pay.GetPayment(ctx, id); p.Status != provider.PaymentCanceled {
			t.Errorf("payment %s is %s, want canceled", id, p.Status)
		}
		f.wantCalls(t, "cancel", 1)
		if o := f.order(); o.FailReason != domain.FailPaymentDeadline || len(o.PaymentsToCancel()) != 0 {
			t.Errorf("order failed with %q, payments to cancel %v; want payment_deadline, none", o.FailReason, o.PaymentsToCancel())
		}
		if !slices.Contains(f.store.Types(domain.ShowStream(payShow)), "SeatsReleased") {
			t.Errorf("seats not released")
		}
		if net, _ := f.pay.net(); net != 0 {
			t.Errorf("provider net = %d, want 0", net)
		}
	})
	t.Run("A cancel whose saved 500 the provider replays is settled by reading the payment.", func(t *testing.T) {
		t.Parallel()
		f, id := waiting(t)
		f.pay.cancelErrAfter = 1
		f.clock.Advance(16 * time.Minute)
		for range 3 {
			_ = f.h.ReconcileOrder(ctx, payOrder)
		}
		f.wantAppended(t, "appended (the payment was canceled; its cancel key replays a 500)", []string{evStarted, evAction, evOrderFail, evFailed})
		if p, _ := f.pay.GetPayment(ctx, id); p.Status != provider.PaymentCanceled {
			t.Errorf("payment %s is %s, want canceled", id, p.Status)
		}
		if o := f.order(); len(o.PaymentsToCancel()) != 0 {
			t.Errorf("payments to cancel %v, want none", o.PaymentsToCancel())
		}
	})
	t.Run("A success that meets the deadline's cancel is recorded and refunded as a redundant effect.", func(t *testing.T) {
		t.Parallel()
		f, id := waiting(t)
		var once sync.Once
		f.store.SetAfterAppend(func(stream string, types []string) {
			if stream == domain.OrderStream(payOrder) && slices.Contains(types, evOrderFail) {
				once.Do(func() { f.pay.setStatus(id, provider.PaymentSucceeded) }) // the customer authenticated just then
			}
		})
		f.clock.Advance(16 * time.Minute)
		if err := f.h.ReconcileOrder(ctx, payOrder); err != nil {
			t.Fatalf("ReconcileOrder() = %v", err)
		}
		f.wantAppended(t, "appended", []string{evStarted, evAction, evOrderFail, evSucceeded, evRefundReq, evRefunded})
		if net, charges := f.pay.net(); net != 0 || charges != 1 {
			t.Errorf("provider net = %d over %d payments, want 0 over 1", net, charges)
		}
		if o := f.order(); o.Status != domain.OrderStatusFailed {
			t.Errorf("order %s, want failed", o.Status)
		}
	})
	t.Run("A cancel cancels the payment; the order ends cancelled with nothing charged.", func(t *testing.T) {
		t.Parallel()
		f, id := waiting(t)
		res, err := f.h.CancelOrder(ctx, Request{Actor: payActor, Operation: OpCancelOrder, Key: "c"}, payOrder)
		if err != nil {
			t.Fatalf("CancelOrder() = %v", err)
		}
		if res.Order.Status != domain.OrderStatusCancelling && res.Order.Status != domain.OrderStatusCancelled {
			t.Fatalf("CancelOrder() answered %s, want cancelling or cancelled", res.Order.Status)
		}
		for deadline := time.Now().Add(30 * time.Second); f.order().Status != domain.OrderStatusCancelled; {
			if time.Now().After(deadline) {
				t.Fatalf("order %s 30 s after the cancel, want cancelled (appended %v)", f.order().Status, f.appended())
			}
			_ = f.h.ReconcileOrder(ctx, payOrder)
			time.Sleep(10 * time.Millisecond) // polling for a state, with a deadline
		}
		f.wantAppended(t, "appended", []string{evStarted, evAction, evCancelReq, evFailed, evCancelled})
		if p, _ := f.pay.GetPayment(ctx, id); p.Status != provider.PaymentCanceled {
			t.Errorf("payment %s is %s, want canceled", id, p.Status)
		}
	})
	t.Run("A failed order's payment still waiting is cancelled by the reconciler, once.", func(t *testing.T) {
		t.Parallel()
		pay := newFakePayments(faultAction)
		p, err := pay.CreatePayment(ctx, payKey(1), payRequest(1))
		if err != nil {
			t.Fatal(err)
		}
		f := newPayFix(t, payConfig(), "tok_visa", nil, payStarted(1, execA, payT0, payT0.Add(30*time.Second)),
			domain.PaymentActionRequired{OrderID: payOrder, Attempt: 1, PaymentID: p.ID},
			domain.OrderFailed{OrderID: payOrder, Reason: domain.FailPaymentDeadline})
		f.pay = pay
		f.h = f.handler(f.cfg)
		for range 3 {
			if err := f.h.ReconcileOrder(ctx, payOrder); err != nil {
				t.Fatalf("ReconcileOrder() = %v", err)
			}
		}
		f.wantAppended(t, "appended", []string{evFailed})
		f.wantCalls(t, "cancel", 1)
	})
}

// TestPayAndWaitAnswersAnOrderInReviewAtOnce: an order in needs_review
// without a payment outcome cannot gain one before an operator acts, so a
// request on it (a repeat of its POST /v1/orders) is answered at once, not
// final, instead of polling through its whole wait.
func TestPayAndWaitAnswersAnOrderInReviewAtOnce(t *testing.T) {
	t.Parallel()
	cfg := payConfig()
	cfg.ProviderWindow, cfg.PaymentDeadline = time.Hour, 3*time.Hour
	f := newPayFix(t, cfg, "tok_visa", nil, payStarted(1, execB, payT0, payT0.Add(DefaultConfig().PaymentLease)))
	f.pay.listErr = apiError(provider.ErrInvalidRequest, provider.APIError{StatusCode: 400, Type: provider.TypeInvalidRequestError, Code: "parameter_invalid_integer"})
	f.pay.searchBlind = true
	f.clock.Advance(2 * time.Hour)
	if err := f.h.DrivePayment(context.Background(), payOrder); err != nil && !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("DrivePayment() error = %v", err)
	}
	if o := f.order(); o.Status != domain.OrderStatusNeedsReview || o.FirstOutcome != "" {
		t.Fatalf("order %s with first outcome %q, want needs_review with none", o.Status, o.FirstOutcome)
	}
	// A wait of an hour under a context of 30 s: polling through the wait
	// ends in the context's error.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, known := range []bool{false, true} {
		var st *orderState
		if known {
			o, s, err := f.h.loadOrder(ctx, payOrder)
			if err != nil {
				t.Fatal(err)
			}
			st = &orderState{o: o, s: s}
		}
		res, err := f.h.payAndWait(ctx, payOrder, time.Hour, Outcome{Replayed: true}, st)
		if err != nil || res.Final || res.Order.Status != domain.OrderStatusNeedsReview || !res.Replayed {
			t.Errorf("payAndWait(known %v) = final %v, status %s, replayed %v, %v; want at once: not final, needs_review, replayed",
				known, res.Final, res.Order.Status, res.Replayed, err)
		}
	}
	f.wantCalls(t, "create", 0)
}
