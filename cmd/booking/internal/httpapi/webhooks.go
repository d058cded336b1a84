package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

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
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxWebhookBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				a.writeError(w, req, httpError(domain.TooLarge, codeBodyTooLarge, "the webhook body is too large"))
				return
			}
			a.writeError(w, req, bodyReadError(err))
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), webhookTimeout)
		defer cancel()
		if err := r.ReceiveWebhook(ctx, req.Header.Get(headerSignature), body); err != nil {
			if domain.KindOf(err) == domain.Invalid {
				a.log.WarnContext(req.Context(), "provider webhook refused", "err", err)
			}
			a.writeError(w, req, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
