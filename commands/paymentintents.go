package commands

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/provider"
)

// Payments at the provider: what an attempt sends, what a payment states,
// how an attempt's payment is found without a lookup by idempotency key, and
// how a payment waiting for the customer's action is settled.

// resultOf returns the fact a provider payment (a PaymentIntent) states,
// by its status (https://docs.stripe.com/payments/paymentintents/lifecycle):
// succeeded; failed when canceled or declined (requires_payment_method,
// with its last payment error's code); requires_action; unknown while
// processing or in any other status. The attempt comes from the payment's
// metadata when it has one.
func resultOf(attempt int, p provider.Payment) domain.PaymentResult {
	if n := p.Attempt(); n > 0 {
		attempt = n
	}
	r := domain.PaymentResult{Attempt: attempt, ChargeID: p.ID, Amount: domain.Money{Amount: p.Amount, Currency: strings.ToUpper(p.Currency)}}
	switch p.Status {
	case provider.PaymentSucceeded:
		r.Outcome = domain.OutcomeSucceeded
	case provider.PaymentCanceled:
		r.Outcome, r.Code, r.Reason = domain.OutcomeFailed, string(provider.PaymentCanceled), "the payment was canceled"
	case provider.PaymentRequiresPaymentMethod:
		r.Outcome, r.Code, r.Reason = domain.OutcomeFailed, provider.CodeCardDeclined, "the payment was declined"
		if e := p.LastError; e != nil {
			if e.Code != "" {
				r.Code = e.Code
			}
			if e.DeclineCode != "" {
				r.Reason += " (" + e.DeclineCode + ")"
			}
		} else {
			r.Code, r.Reason = string(provider.PaymentRequiresPaymentMethod), "the payment has no usable payment method"
		}
	case provider.PaymentRequiresAction:
		r.Outcome = domain.OutcomeRequiresAction
	default:
		r.Outcome, r.Reason = domain.OutcomeUnknown, "the payment is "+string(p.Status)+" at the provider"
	}
	return r
}

// attemptRange returns the time range, by the provider's clock, in which
// attempt a's payment can have been created: from the attempt's first
// start to its last lease's end plus the settling margin (no send can
// reach the provider later: a send needs now + ProviderTimeout +
// SendMargin before the lease's end, and one still executing at the
// provider is over SettleMargin after it), padded by ClockSkew on both
// sides for the difference between the database clock and the provider's.
func (h *core) attemptRange(a domain.Attempt) (from, to time.Time) {
	return a.StartedAt.Add(-h.cfg.ClockSkew), a.LeaseUntil.Add(h.cfg.SettleMargin + h.cfg.ClockSkew)
}

// lookupPayments asks the provider for attempt a's payments without a
// lookup by idempotency key (Stripe has none): it lists every payment
// created in the attempt's range (attemptRange), paged to the end, and
// keeps those whose metadata names the order, the attempt and the
// attempt's deployment (another deployment's payments on a shared account
// are not this order's). A list is
// consistent (https://docs.stripe.com/search, "Data freshness": list APIs
// have no availability delay), so once the attempt settled, an empty
// result proves that it made no payment. When the list fails, search by
// metadata stands in: what it finds is a fact, but a miss proves nothing
// (search lags), so unproven returns why absence is not proved. Succeeded
// payments come first, then failed ones.
func (h *core) lookupPayments(ctx context.Context, o domain.Order, a domain.Attempt) (found []provider.Payment, unproven error) {
	from, to := h.attemptRange(a)
	qctx, cancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
	list, err := h.payments.ListPayments(qctx, from, to)
	cancel()
	deployment := attemptDeployment(o, a)
	if err == nil {
		return paymentsOfAttempt(list, o.ID, a.N, deployment), nil
	}
	h.metrics.Reconciliation("list_failed")
	h.log.WarnContext(ctx, "the provider's list of payments failed; searching instead, which cannot prove a payment absent",
		"order_id", o.ID, "attempt", a.N, "err", err)
	sctx, scancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
	defer scancel()
	if hits, serr := h.payments.SearchPayments(sctx, o.ID, a.N); serr == nil {
		found = paymentsOfAttempt(hits, o.ID, a.N, deployment)
	}
	return found, fmt.Errorf("list of the payments created from %s to %s: %w", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), err)
}

// paymentsOfAttempt returns the payments of list whose metadata names order
// orderID, attempt n and deployment (absent for ""), succeeded first, then
// failed, then the others.
func paymentsOfAttempt(list []provider.Payment, orderID string, n int, deployment string) []provider.Payment {
	var out []provider.Payment
	for _, p := range list {
		if p.OrderID() == orderID && p.Attempt() == n && p.Metadata[provider.MetadataDeployment] == deployment {
			out = append(out, p)
		}
	}
	rank := func(p provider.Payment) int {
		switch resultOf(n, p).Outcome {
		case domain.OutcomeSucceeded:
			return 0
		case domain.OutcomeFailed:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(x, y provider.Payment) int { return rank(x) - rank(y) })
	return out
}

// recordFound records what the payments found for attempt a state. A
// payment still processing is recorded as an unknown outcome and waited
// for (the webhook or the next pass settles it); anything else is decided
// again at once.
func (h *core) recordFound(ctx context.Context, o domain.Order, a domain.Attempt, found []provider.Payment) (step, error) {
	next := stepDone
	for _, p := range found {
		res := resultOf(a.N, p)
		h.metrics.Reconciliation("found_" + res.Outcome)
		if res.Outcome == domain.OutcomeRequiresAction {
			res.SealedAction = h.sealAction(ctx, o, a.N, p, nil)
		}
		if err := h.recordPayment(ctx, o.ID, res, ObservedByReconciliation); err != nil {
			return stepDone, err
		}
		if res.Outcome != domain.OutcomeUnknown {
			next = stepAgain
		}
	}
	return next, nil
}

// unproven handles an attempt that settled without a payment found, when
// the list that would prove it made none failed (cause). A provider that
// is down or slow is retried on the next pass. A list the provider refuses
// cannot be repaired by retrying, and only such a proof allows what the
// caller was deciding (a new attempt, the order's failure past its
// deadline, a finished cancel): the order goes to review rather than risk
// a second charge.
func (h *core) unproven(ctx context.Context, o domain.Order, s *stream, a domain.Attempt, cause error) error {
	if errors.Is(cause, provider.ErrUnavailable) || errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		return unavailable(cause)
	}
	code := "error"
	var apiErr *provider.APIError
	if errors.As(cause, &apiErr) {
		code = strings.TrimSpace(apiErr.Type + " " + apiErr.Code)
	}
	return h.endOrder(ctx, o, s, []domain.Event{domain.OrderNeedsReview{OrderID: o.ID,
		Reason: fmt.Sprintf("attempt %d cannot be proved to have made no payment: the provider refused the list of payments (%s)", a.N, code)}},
		"the attempt's payment cannot be proved absent")
}

// awaitAction settles attempt a, whose payment waits for the customer's
// action (requires_action): it fetches the payment and records its state
// once it changed (the webhook may be late or lost). While it still waits,
// a cancelling order has it cancelled, and past the payment deadline the
// order fails (seats released) and the payment is cancelled
// (afterOrderEvents); before the deadline the customer has time.
func (h *core) awaitAction(ctx context.Context, o domain.Order, s *stream, a domain.Attempt, now time.Time) (step, error) {
	qctx, cancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
	p, err := h.payments.GetPayment(qctx, a.ChargeID)
	cancel()
	if err != nil {
		return stepDone, unavailable(err)
	}
	res := resultOf(a.N, p)
	switch {
	case res.Outcome == domain.OutcomeSucceeded || res.Outcome == domain.OutcomeFailed:
		h.metrics.Reconciliation("found_" + res.Outcome)
		return stepAgain, h.recordPayment(ctx, o.ID, res, ObservedByReconciliation)
	case o.Status == domain.OrderStatusCancelling:
		return stepAgain, h.cancelPayment(ctx, o.ID, a.N, a.ChargeID)
	case !now.Before(o.PaymentDeadline):
		h.metrics.Reconciliation("action_abandoned")
		return stepDone, h.endOrder(ctx, o, s, o.FailPastDeadline(now, h.cfg.SettleMargin, true),
			"payment deadline passed while the payment waited for the customer's action")
	}
	return stepDone, nil
}

// cancelPayments cancels the payments of o that wait for the customer's
// action while o can no longer use them (Order.PaymentsToCancel). Returns
// the first error; the reconciler retries.
func (h *core) cancelPayments(ctx context.Context, o domain.Order) error {
	var first error
	for _, id := range o.PaymentsToCancel() {
		n := 0
		for _, a := range o.Attempts {
			if a.ChargeID == id {
				n = a.N
			}
		}
		if err := h.cancelPayment(ctx, o.ID, n, id); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// cancelPayment cancels payment id of attempt n at the provider under key
// domain.CancelKey(id) and records its final state: PaymentFailed once
// canceled. When the provider refuses the cancel because of the payment's
// status (payment_intent_unexpected_state: it succeeded or failed
// meanwhile), or its outcome is unknown (a timeout, or a 500 the provider
// saved and replays for the key), that state is fetched and recorded
// instead; a late success of an order that can no longer use it is a
// redundant effect, refunded (Order.Record). Returns an error while the
// payment's final state is not recorded: a payment still waiting is
// cancelled again on the reconciler's next pass, under the same key, so a
// saved 500 whose request cancelled nothing is replayed until the provider
// forgets the key (24 hours at Stripe).
func (h *core) cancelPayment(ctx context.Context, orderID string, n int, id string) error {
	unlock := h.sends.Lock("cancel/" + id)
	defer unlock()
	cctx, cancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
	defer cancel()
	p, err := h.payments.CancelPayment(cctx, domain.CancelKey(id), id)
	var apiErr *provider.APIError
	if (errors.Is(err, provider.ErrInvalidRequest) && errors.As(err, &apiErr) && apiErr.Code == provider.CodePaymentIntentUnexpectedState) ||
		errors.Is(err, provider.ErrOutcomeUnknown) {
		// Refused for the payment's status, or no answer (the provider
		// replays a saved 500 for the key): the payment tells its state,
		// read on its own timeout (the cancel's may be spent).
		gctx, gcancel := context.WithTimeout(h.detach(ctx), h.cfg.ProviderTimeout)
		p, err = h.payments.GetPayment(gctx, id)
		gcancel()
	}
	if err != nil {
		return unavailable(err)
	}
	res := resultOf(n, p)
	if res.Outcome != domain.OutcomeSucceeded && res.Outcome != domain.OutcomeFailed {
		return fmt.Errorf("payment %s is still %s after its cancel: %w", id, p.Status, domain.ErrUnavailable)
	}
	if p.Status == provider.PaymentCanceled {
		h.metrics.Reconciliation("payment_cancelled")
	}
	return h.recordPayment(ctx, orderID, res, ObservedByReconciliation)
}

// attemptRequest returns the request of attempt a of o: rebuilt from the
// attempt's inputs with the order's payment method (opened under the
// order's data key, held when not nil), or, for an attempt stored as
// request bytes (schema versions 1 and 2), parsed from those bytes
// (legacyRequest); either is checked against the attempt's RequestSHA256,
// so every send of the attempt carries identical parameters. Returns
// errKeyGone (wrapped) when the key is gone.
func (h *core) attemptRequest(ctx context.Context, o domain.Order, a domain.Attempt, held *envelope.DataKey) (provider.PaymentRequest, error) {
	if a.Legacy() {
		return h.legacyRequest(ctx, o, a, held)
	}
	token, err := h.paymentMethod(ctx, o, held)
	if err != nil {
		return provider.PaymentRequest{}, err
	}
	req := provider.PaymentRequest{Amount: a.Amount.Amount, Currency: a.Amount.Currency, PaymentMethod: token, OrderID: o.ID, Attempt: a.N,
		Deployment: a.Deployment, Description: a.Description}
	if attemptDigest(req) != a.RequestSHA256 {
		return provider.PaymentRequest{}, fmt.Errorf("order %s attempt %d: the attempt's inputs do not match request_sha256", o.ID, a.N)
	}
	return req, nil
}

// paymentMethod returns o's payment method: its token opened under the
// order's data key (held when not nil), or the clear token of a version-1
// order, which is used only while the order's key exists (its deletion
// ends the sends, as it does for sealed tokens). Returns errKeyGone
// (wrapped) when the key is gone.
func (h *core) paymentMethod(ctx context.Context, o domain.Order, held *envelope.DataKey) (string, error) {
	dk := held
	if dk == nil {
		var err error
		if dk, err = h.orderKey(ctx, o, false); err != nil {
			return "", err
		}
	}
	if o.PaymentToken != "" {
		return o.PaymentToken, nil
	}
	pt, err := dk.Open(o.SealedPaymentToken, TokenAAD(o.ID))
	if err != nil {
		h.log.ErrorContext(ctx, "an order's sealed payment token does not open under its data key", "order_id", o.ID, "err", err)
		return "", fmt.Errorf("order %s: payment token: %w", o.ID, err)
	}
	return string(pt), nil
}

// attemptDigest returns the hex SHA-256 of a payment request's inputs in a
// fixed form (JSON with the members below, in this order; version 1 of
// the form): what PaymentAttemptStarted.RequestSHA256 holds since schema
// version 3. Equal inputs give equal digests in every build.
func attemptDigest(r provider.PaymentRequest) string {
	b, err := json.Marshal(struct {
		V             int    `json:"v"`
		Amount        int64  `json:"amount"`
		Currency      string `json:"currency"`
		PaymentMethod string `json:"payment_method"`
		OrderID       string `json:"order_id"`
		Attempt       int    `json:"attempt"`
		Deployment    string `json:"deployment"`
		Description   string `json:"description"`
	}{1, r.Amount, r.Currency, r.PaymentMethod, r.OrderID, r.Attempt, r.Deployment, r.Description})
	if err != nil {
		panic(err) // strings and integers always encode
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// legacyRequest upcasts an attempt stored as the bytes of a charge request
// (schema versions 1 and 2: {"amount", "currency", "token" — or "source" —,
// "metadata", "description"}) into the same inputs: amount, currency,
// payment method and description from the bytes, order id and attempt
// from the event, and the deployment from the attempt's provider key
// ("{deployment}-order-{id}-{n}"). The bytes are checked against the
// attempt's RequestSHA256 first, so every send of the attempt rebuilds the
// same parameters.
func (h *core) legacyRequest(ctx context.Context, o domain.Order, a domain.Attempt, held *envelope.DataKey) (provider.PaymentRequest, error) {
	body, err := h.legacyBody(ctx, o, a, held)
	if err != nil {
		return provider.PaymentRequest{}, err
	}
	var b struct {
		Amount      int64  `json:"amount"`
		Currency    string `json:"currency"`
		Token       string `json:"token"`
		Source      string `json:"source"`
		Description string `json:"description"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return provider.PaymentRequest{}, fmt.Errorf("order %s attempt %d: the stored charge request does not parse", o.ID, a.N)
	}
	if b.Token == "" {
		b.Token = b.Source
	}
	req := provider.PaymentRequest{Amount: b.Amount, Currency: b.Currency, PaymentMethod: b.Token, OrderID: o.ID, Attempt: a.N,
		Deployment: attemptDeployment(o, a), Description: b.Description}
	if err := req.Validate(); err != nil {
		return provider.PaymentRequest{}, fmt.Errorf("order %s attempt %d: the stored charge request: %w", o.ID, a.N, err)
	}
	return req, nil
}

// attemptDeployment returns the deployment attempt a's payment carries as
// metadata: its stored input, or for an attempt stored as request bytes
// (schema versions 1 and 2) the prefix of its provider key
// ("{deployment}-order-{id}-{n}"; none without a prefix).
func attemptDeployment(o domain.Order, a domain.Attempt) string {
	if !a.Legacy() {
		return a.Deployment
	}
	deployment, found := strings.CutSuffix(a.ProviderKey, "-order-"+o.ID+"-"+strconv.Itoa(a.N))
	if !found {
		return ""
	}
	return deployment
}

// ActionAAD is the associated data that binds the sealed client secret and
// next action of attempt n's payment to the order and the attempt.
func ActionAAD(orderID string, n int) []byte {
	return []byte("booking/order/" + orderID + "/attempt/" + strconv.Itoa(n) + "/payment_action")
}

// actionSecrets is the sealed JSON of a payment waiting for the customer's
// action (domain.ActionPrivate).
type actionSecrets struct {
	ClientSecret string          `json:"client_secret"`
	NextAction   json.RawMessage `json:"next_action,omitempty"`
}

// sealAction returns p's client secret and next action sealed under o's
// data key (held when not nil) for attempt n, or nil when p has neither or
// the key is gone (the payment is then recorded without them).
func (h *core) sealAction(ctx context.Context, o domain.Order, n int, p provider.Payment, held *envelope.DataKey) []byte {
	if p.ClientSecret == "" {
		return nil
	}
	dk := held
	if dk == nil {
		var err error
		if dk, err = h.orderKey(ctx, o, false); err != nil {
			h.log.InfoContext(ctx, "a payment waiting for the customer's action is recorded without its client secret", "order_id", o.ID,
				"attempt", n, "why", err)
			return nil
		}
	}
	sec := actionSecrets{ClientSecret: p.ClientSecret}
	if json.Valid(p.NextAction) {
		sec.NextAction = p.NextAction
	}
	b, err := json.Marshal(sec)
	if err != nil {
		return nil
	}
	return dk.Seal(b, ActionAAD(o.ID, n))
}

// PaymentAction is what the customer's client needs to finish a payment
// that requires its action (Strong Customer Authentication): the
// PaymentIntent's client secret, for Stripe.js's handleNextAction
// (https://docs.stripe.com/js/payment_intents/handle_next_action), and
// its next_action object as raw JSON. Both are secrets: String and
// GoString redact them, and they are shown only to the order's actor.
type PaymentAction struct {
	ClientSecret string
	NextAction   json.RawMessage
}

// String returns a description without the secrets.
func (a PaymentAction) String() string { return "PaymentAction{[redacted]}" }

// GoString returns the same as String.
func (a PaymentAction) GoString() string { return a.String() }

// PaymentAction returns what o's customer needs to finish its payment
// while o is pending and its last attempt's payment waits for the
// customer's action, opened under o's data key; nil otherwise, or once the
// key is gone. The caller shows it only to o's actor. Returns an error
// wrapping domain.ErrUnavailable when the key table cannot be read.
func (h *Queries) PaymentAction(ctx context.Context, o domain.Order) (*PaymentAction, error) {
	a := o.LastAttempt()
	if o.Status != domain.OrderStatusPending || a == nil || a.Outcome != domain.OutcomeRequiresAction || len(a.SealedAction) == 0 {
		return nil, nil
	}
	dk, err := h.orderKey(ctx, o, false)
	if errors.Is(err, errKeyGone) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b, err := dk.Open(a.SealedAction, ActionAAD(o.ID, a.N))
	if err != nil {
		return nil, fmt.Errorf("order %s attempt %d: payment action: %w", o.ID, a.N, err)
	}
	var sec actionSecrets
	if err := json.Unmarshal(b, &sec); err != nil {
		return nil, fmt.Errorf("order %s attempt %d: payment action does not parse", o.ID, a.N)
	}
	return &PaymentAction{ClientSecret: sec.ClientSecret, NextAction: sec.NextAction}, nil
}
