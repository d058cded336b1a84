package httpapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// headerSignature is the header of a webhook's signature
// (https://docs.stripe.com/webhooks#verify-events).
const headerSignature = "Stripe-Signature"

// maxWebhookBytes bounds a webhook body: 64 KiB, as Stripe's own samples
// do (MaxBodyBytes in https://docs.stripe.com/webhooks/quickstart?lang=go);
// an event is a few KiB.
const maxWebhookBytes = 64 << 10

// The webhook route's budget when Config leaves it zero.
const (
	// DefaultWebhookTimeout bounds one notification from the end of its
	// headers to its answer (BOOKING_WEBHOOK_TIMEOUT).
	DefaultWebhookTimeout = 15 * time.Second
	// DefaultWebhookConcurrency bounds the notifications worked on at once
	// (BOOKING_WEBHOOK_CONCURRENCY).
	DefaultWebhookConcurrency = 16
)

// refusalLogEvery is the least time between two log lines about refused
// notifications of one kind (sampledLog): a stranger can send them at will.
const refusalLogEvery = 10 * time.Second

// The results of a provider notification (Config.ObserveWebhook).
const (
	WebhookAccepted     = "accepted"      // verified, and a new fact recorded
	WebhookDuplicate    = "duplicate"     // verified, nothing new to record (a redelivery, or a fact another path recorded first)
	WebhookIgnored      = "ignored"       // verified, an event the service does not record
	WebhookBadSignature = "bad_signature" // the signature header is missing or malformed, the signature does not match, or its timestamp is outside the tolerance (400)
	WebhookInvalid      = "invalid"       // a body that is no provider event, or too large (400, 413)
	WebhookUnknownOrder = "unknown_order" // a charge of no order the event store knows (404: the provider redelivers)
	WebhookFailed       = "failed"        // over the route's budget, a dependency failed or the body did not arrive (5xx, 408: the provider redelivers)
)

// WebhookResults lists every result of a notification, for metrics that
// start at 0.
var WebhookResults = []string{WebhookAccepted, WebhookDuplicate, WebhookIgnored, WebhookBadSignature, WebhookInvalid,
	WebhookUnknownOrder, WebhookFailed}

// webhookResult returns the result of a notification answered err, with
// rep what ReceiveWebhook did (nil when it did not run).
func webhookResult(err error, rep *commands.WebhookReport) string {
	switch {
	case err == nil && rep != nil && rep.Ignored():
		return WebhookIgnored
	case err == nil && rep != nil && rep.Appended() == 0:
		return WebhookDuplicate
	case err == nil:
		return WebhookAccepted
	case errors.Is(err, commands.ErrWebhookSignature) || errors.Is(err, commands.ErrWebhookStale):
		return WebhookBadSignature
	case errors.Is(err, domain.ErrOrderNotFound):
		return WebhookUnknownOrder
	case domain.KindOf(err) == domain.Invalid || domain.KindOf(err) == domain.TooLarge:
		return WebhookInvalid
	}
	return WebhookFailed
}

// kindWebhookBusy is the kind of the route's own 503s (over its budget):
// answered 503 with Retry-After like domain.Unavailable, but logged by the
// route (sampled), not once per request. Never recorded.
const kindWebhookBusy domain.Kind = 129

var (
	errWebhooksBusy = httpError(kindWebhookBusy, "unavailable",
		"as many provider notifications as this service works on at once are in progress; the provider redelivers")
	errWebhookTimeout = httpError(kindWebhookBusy, "unavailable",
		"the notification was not handled within the webhook timeout; what it recorded stands, and the provider redelivers")
	errWebhookTooLarge = httpError(domain.TooLarge, codeBodyTooLarge, "the webhook body must be at most 65536 bytes")
)

// webhookReceiver is the part of commands.Handler that takes notifications.
type webhookReceiver interface {
	CheckWebhookHeader(ctx context.Context, signature string) error
	ReceiveWebhook(ctx context.Context, signature string, body []byte) error
}

// webhookBudget is the webhook route's budget: how long one notification
// may take, and how many are worked on at once; now is the clock of its
// sampled log lines.
type webhookBudget struct {
	timeout     time.Duration
	concurrency int
	now         func() time.Time
}

// webhookRoute is POST /v1/provider/webhooks (newWebhookHandler).
type webhookRoute struct {
	a       *api
	r       webhookReceiver
	timeout time.Duration
	// slots holds a token per notification being worked on, from before
	// its body is read until ReceiveWebhook returns.
	slots chan struct{}
	// refused logs refusals of unauthenticated input; busy the answers
	// over the budget.
	refused, busy *sampledLog
}

// newWebhookHandler returns POST /v1/provider/webhooks (docs/payments.md).
// In order, each step before the next:
//
//  1. The Stripe-Signature header is checked alone (r.CheckWebhookHeader,
//     the service's clock): missing, malformed or signed outside the
//     tolerance → 400.
//  2. A Content-Length over 64 KiB → 413.
//  3. A slot of the route's own concurrency bound is taken; none free →
//     503 with Retry-After at once (the provider redelivers).
//
// An answer of steps 1–3 leaves the body unread and closes the connection.
//
//  4. The body is read, at most 64 KiB (more → 413, and net/http closes
//     the connection without reading the rest) within the server's read
//     timeout (408 after).
//  5. r.ReceiveWebhook verifies the signature over the raw bytes and
//     records the fact, detached from the provider's connection (a hang-up
//     does not cut recording short) and within the route's timeout,
//     counted from the end of the headers. Past it the answer is 503 with
//     Retry-After while the work ends in its slot (a redelivery repeats it
//     harmlessly).
//
// Answers: 204 when the fact is recorded (or already was), and for an
// event that is not about a payment of this deployment (ignored); 400 for
// a bad signature, a stale timestamp or a malformed event, with nothing
// recorded; 404 for a payment of this deployment whose order the event
// store does not know (yet), so the provider redelivers; 503 while a
// dependency is down or over the budget. Refusals of unauthenticated input
// and answers over the budget are logged at most once per refusalLogEvery
// each, with the number left out; every notification's result goes to
// a.observeWebhook.
func newWebhookHandler(a *api, r webhookReceiver, b webhookBudget) http.Handler {
	if b.timeout <= 0 {
		b.timeout = DefaultWebhookTimeout
	}
	if b.concurrency <= 0 {
		b.concurrency = DefaultWebhookConcurrency
	}
	if b.now == nil {
		b.now = time.Now
	}
	return &webhookRoute{a: a, r: r, timeout: b.timeout, slots: make(chan struct{}, b.concurrency),
		refused: &sampledLog{log: a.log, msg: "provider webhook refused", every: refusalLogEvery, now: b.now},
		busy:    &sampledLog{log: a.log, msg: "provider webhook answered 503: over the route's budget", every: refusalLogEvery, now: b.now}}
}

// ServeHTTP serves one notification (newWebhookHandler).
func (wr *webhookRoute) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	deadline := time.Now().Add(wr.timeout)
	sig := req.Header.Get(headerSignature)
	if err := wr.admit(req, sig); err != nil {
		// The body stays unread: close the connection after the answer,
		// or net/http would read up to 256 KiB of it first to reuse it.
		w.Header().Set("Connection", "close")
		wr.answer(w, req, err, nil)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxWebhookBytes))
	if err != nil {
		<-wr.slots
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			err = errWebhookTooLarge
		} else {
			err = bodyReadError(err)
		}
		wr.answer(w, req, err, nil)
		return
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(req.Context()), deadline)
	ctx, rep := commands.WithWebhookReport(ctx)
	done := make(chan error, 1)
	go func() { // the work keeps its slot until it ends, answered or not
		defer func() { <-wr.slots }()
		defer cancel()
		done <- wr.r.ReceiveWebhook(ctx, sig, body)
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done: // it ended right at the deadline
		default:
			err, rep = errWebhookTimeout, nil // the work goes on writing to rep
		}
	}
	wr.answer(w, req, err, rep)
}

// admit does the checks before the body is read (steps 1–3 of
// newWebhookHandler) and takes a slot when they pass; the caller gives the
// slot back.
func (wr *webhookRoute) admit(req *http.Request, sig string) error {
	if err := wr.r.CheckWebhookHeader(req.Context(), sig); err != nil {
		return err
	}
	if req.ContentLength > maxWebhookBytes {
		return errWebhookTooLarge
	}
	select {
	case wr.slots <- struct{}{}:
		return nil
	default:
		return errWebhooksBusy
	}
}

// answer counts the notification's result (rep: what ReceiveWebhook did,
// nil when it did not run or is still running), logs a refusal (sampled
// when a stranger could cause it at will) and answers.
func (wr *webhookRoute) answer(w http.ResponseWriter, req *http.Request, err error, rep *commands.WebhookReport) {
	result := webhookResult(err, rep)
	if wr.a.observeWebhook != nil {
		wr.a.observeWebhook(result)
	}
	if err == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	switch {
	case domain.KindOf(err) == kindWebhookBusy:
		wr.busy.warn(req.Context(), "err", err)
	case result == WebhookBadSignature || domain.KindOf(err) == domain.TooLarge || domain.KindOf(err) == domain.Timeout:
		wr.refused.warn(req.Context(), "err", err)
	case errors.Is(err, commands.ErrWebhookMalformed):
		// Correctly signed, so the provider's: each is worth a line (an
		// endpoint pinned to another API version, say).
		wr.a.log.WarnContext(req.Context(), "provider webhook refused", "err", err)
	}
	wr.a.writeError(w, req, err)
}

// sampledLog writes a warning at most once per interval, with the number
// of those it left out since the line before (suppressed): for what a
// client can cause at will, so a flood costs one line per interval (the
// metrics count each). The first call logs at once. Safe for concurrent use.
type sampledLog struct {
	log   *slog.Logger
	msg   string
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	last       time.Time // when the last line was written; zero: never
	suppressed int
}

// warn logs msg with args and the suppressed count, unless a line was
// written less than every ago; then it only counts the call.
func (s *sampledLog) warn(ctx context.Context, args ...any) {
	now := s.now()
	s.mu.Lock()
	if !s.last.IsZero() && now.Sub(s.last) < s.every {
		s.suppressed++
		s.mu.Unlock()
		return
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	s.mu.Unlock()
	s.log.WarnContext(ctx, s.msg, append(args, "suppressed", n, "interval", s.every.String())...)
}
