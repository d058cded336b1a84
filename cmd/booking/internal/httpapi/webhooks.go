package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// headerSignature is the header of a webhook's signature
// (https://docs.stripe.com/webhooks#verify-events).
const headerSignature = "Stripe-Signature"

// maxWebhookBytes bounds a webhook body.
const maxWebhookBytes = 1 << 20

// webhookTimeout bounds the work on one notification once its body is read;
// it runs detached from the provider's connection, so a hang-up does not cut
// recording short (a redelivery would only repeat it harmlessly).
const webhookTimeout = 30 * time.Second

// The results of a provider notification (Config.ObserveWebhook).
const (
	WebhookAccepted     = "accepted"      // verified, and a new fact recorded
	WebhookDuplicate    = "duplicate"     // verified, nothing new to record (a redelivery, or a fact another path recorded first)
	WebhookIgnored      = "ignored"       // verified, an event the service does not record
	WebhookBadSignature = "bad_signature" // the signature does not match, or its timestamp is outside the tolerance (400)
	WebhookInvalid      = "invalid"       // a body that is no provider event, or too large (400, 413)
	WebhookUnknownOrder = "unknown_order" // a charge of no order the event store knows (404: the provider redelivers)
	WebhookFailed       = "failed"        // a dependency failed or the body did not arrive (5xx, 408: the provider redelivers)
)

// WebhookResults lists every result of a notification, for metrics that
// start at 0.
var WebhookResults = []string{WebhookAccepted, WebhookDuplicate, WebhookIgnored, WebhookBadSignature, WebhookInvalid,
	WebhookUnknownOrder, WebhookFailed}

// webhookResult returns the result of a notification that ReceiveWebhook
// answered err, with rep what it did.
func webhookResult(err error, rep *commands.WebhookReport) string {
	switch {
	case err == nil && rep.Ignored():
		return WebhookIgnored
	case err == nil && rep.Appended() == 0:
		return WebhookDuplicate
	case err == nil:
		return WebhookAccepted
	case errors.Is(err, commands.ErrWebhookSignature) || errors.Is(err, commands.ErrWebhookStale):
		return WebhookBadSignature
	case errors.Is(err, domain.ErrOrderNotFound):
		return WebhookUnknownOrder
	case domain.KindOf(err) == domain.Invalid:
		return WebhookInvalid
	}
	return WebhookFailed
}

// webhookReceiver is the part of commands.Handler that takes notifications.
type webhookReceiver interface {
	ReceiveWebhook(ctx context.Context, signature string, body []byte) error
}

// newWebhookHandler returns POST /v1/provider/webhooks (docs/payments.md):
// the raw body and its Stripe-Signature header go to r, which verifies
// them against the webhook secrets before anything is parsed or recorded.
// Answers: 204 when the fact is recorded (or already was), and for an
// event that is not about a payment of this deployment (ignored); 400 for
// a bad signature, a stale timestamp or a malformed event, with nothing
// recorded; 408 for a body that did not arrive within the read timeout;
// 404 for a payment of this deployment whose order the event store does
// not know (yet), so the provider redelivers; 503 while a dependency is
// down.
func newWebhookHandler(a *api, r webhookReceiver) http.Handler {
	observe := func(result string) {
		if a.observeWebhook != nil {
			a.observeWebhook(result)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxWebhookBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				observe(WebhookInvalid)
				a.writeError(w, req, httpError(domain.TooLarge, codeBodyTooLarge, "the webhook body is too large"))
				return
			}
			observe(WebhookFailed)
			a.writeError(w, req, bodyReadError(err))
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), webhookTimeout)
		defer cancel()
		ctx, rep := commands.WithWebhookReport(ctx)
		err = r.ReceiveWebhook(ctx, req.Header.Get(headerSignature), body)
		observe(webhookResult(err, rep))
		if err != nil {
			if domain.KindOf(err) == domain.Invalid {
				a.log.WarnContext(req.Context(), "provider webhook refused", "err", err)
			}
			a.writeError(w, req, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
