// Package provider is the payment port of the booking service: the
// provider-neutral types an adapter of a payment provider's API returns
// (Payment, PaymentRequest, PaymentRefund, WebhookEvent), its sentinel
// errors and *APIError. It imports only the standard library. The use cases
// of package commands declare the port itself (commands.Payments); the
// adapter for Stripe's PaymentIntents API is package provider/stripe, and
// package provider/providersim simulates Stripe's wire for dev mode and
// tests.
//
// # What an adapter supplies
//
// An adapter of another provider implements commands.Payments with these
// guarantees, on which the service's promise of one charge per order rests:
//
//   - Idempotency keys with Stripe's semantics
//     (https://docs.stripe.com/api/idempotent_requests): the first answer
//     of a key whose request began executing is saved and replayed for the
//     same key and parameters; other parameters are ErrIdempotency; a
//     request with the key still executing is ErrKeyInUse; the window is
//     known (BOOKING_PROVIDER_RETENTION). CreatePayment confirms at once:
//     one payment per request.
//   - A consistent list of the payments created in a time range
//     (ListPayments), with the metadata the request set (MetadataOrderID,
//     MetadataAttempt, MetadataDeployment): a payment is listed as soon as
//     it exists. Reconciliation proves an attempt made no payment with it;
//     a search (SearchPayments) may lag and is only a fallback.
//   - Errors classified as below, without retrying on its own: the service's
//     fenced, recorded retries are the only ones.
//   - Webhooks verified on the raw body with a signature, a timestamp
//     tolerance and several secrets (ParseWebhook), and events that name the
//     payment, which the service then fetches (GetPayment).
//   - Cancel (for a payment that waits for the customer's action) and
//     refunds under idempotency keys, refunds listed per payment.
//
// # Which errors may have charged
//
// Only ErrOutcomeUnknown (a timeout, a lost connection, or a 5xx after the
// request was sent — also a 500 the provider saved and replays) and
// ErrKeyInUse (another request with the key is still executing) leave the
// outcome open: repeat the same request with the same key inside the
// window, and list the payments to learn what happened. ErrDeclined records
// a declined payment (no money moved). ErrUnavailable (nothing was sent, or
// 429), ErrInvalidRequest, ErrNotFound, ErrIdempotency and ErrUnauthorized
// (the API key was refused; it also matches ErrUnavailable) never charged.
//
// Payment methods, client secrets and API keys are secrets: the types here
// redact them when formatted, and no error holds one.
package provider
