// Package stripe is the payment provider adapter for Stripe's PaymentIntents
// API, on Stripe's Go library stripe-go (github.com/stripe/stripe-go/v84). It
// is the only package that imports stripe-go outside tests; it speaks to
// Stripe itself or to anything that serves Stripe's wire at another base URL
// (the simulator in provider/providersim, stripe-mock, a proxy). It maps
// Stripe's objects and errors to the provider-neutral types and sentinel
// errors of package provider.
//
// # Requests
//
// One payment attempt is one PaymentIntent, created and confirmed in one
// request (https://docs.stripe.com/api/payment_intents/create):
//
//	POST /v1/payment_intents   Idempotency-Key: K
//	  amount, currency (lower case), payment_method, confirm=true,
//	  automatic_payment_methods[enabled]=true,
//	  automatic_payment_methods[allow_redirects]=never,
//	  metadata[order_id], metadata[attempt], metadata[deployment] (optional),
//	  description (optional)
//	GET  /v1/payment_intents/{id}?expand[]=latest_charge
//	GET  /v1/payment_intents?created[gte]=…&created[lte]=…&limit=100&expand[]=data.latest_charge (paged with starting_after)
//	GET  /v1/payment_intents/search?query=…&limit=100&expand[]=data.latest_charge (paged with page)
//	POST /v1/payment_intents/{id}/cancel   Idempotency-Key: K   cancellation_reason=abandoned
//	POST /v1/refunds   Idempotency-Key: K   payment_intent, amount (omitted: what remains), metadata
//	GET  /v1/refunds?payment_intent=…&limit=100 (paged with starting_after)
//
// Stripe enables automatic payment methods by default, and then refuses to
// confirm without a return_url unless redirects are ruled out; the adapter
// rules them out, so a payment needs no redirect back to the service
// (https://docs.stripe.com/api/payment_intents/create#create_payment_intent-automatic_payment_methods-allow_redirects).
//
// A Payment's AmountRefunded is its latest charge's amount_refunded
// (https://docs.stripe.com/api/charges/object#charge_object-amount_refunded),
// so retrieve, list and search expand latest_charge
// (https://docs.stripe.com/api/expanding_objects); a created, cancelled or
// declined Payment reports 0.
//
// # Idempotency and retries
//
// Every POST carries the caller's Idempotency-Key (1 to 255 printable ASCII
// characters). Stripe saves the status and body of the first request that
// began executing, 500s included, and replays them for the same key
// (header Idempotent-Replayed: true, reported as Payment.Replayed); a key
// reused with other parameters is an idempotency_error; keys may be pruned
// after 24 hours (https://docs.stripe.com/api/idempotent_requests).
//
// The adapter never retries: stripe-go's own retries are off
// (MaxNetworkRetries 0), and the Go HTTP transport's silent resend of a
// request carrying an Idempotency-Key on a reused connection is disabled,
// so the caller's recorded retries are the only ones.
//
// # Errors
//
// Every error wraps one of provider's sentinels (errors.Is) and, for an
// answer from the API, is a *provider.APIError (errors.As):
//
//   - ErrDeclined: 402 card_error; APIError.Payment is the declined
//     PaymentIntent (requires_payment_method, LastError set) from the
//     error's payment_intent (https://docs.stripe.com/api/errors).
//   - ErrOutcomeUnknown: a POST that was sent and may have executed — a
//     5xx (a replayed 500 too: it was saved because the request began
//     executing), a dropped connection or a timeout after the request was
//     written, or an unreadable answer.
//   - ErrKeyInUse: 409, a request with the same key is still executing.
//   - ErrIdempotency: 400 idempotency_error.
//   - ErrUnauthorized (with ErrUnavailable): 401 or 403.
//   - ErrNotFound: 404.
//   - ErrUnavailable: nothing was sent (connection refused, DNS failure,
//     context done before sending), a 429, or any failure of a GET.
//   - ErrInvalidRequest: any other 4xx (APIError.Code says which, e.g.
//     payment_intent_unexpected_state, charge_already_refunded,
//     amount_too_large), or a request refused before sending.
//
// # Secrets
//
// The secret key goes only into the Authorization header
// (https://docs.stripe.com/api/authentication). stripe-go's logger is
// replaced by a silent one (its default logs API errors, whose objects hold
// payment method ids, and unreadable bodies, which can hold a
// client_secret). Error texts are built from Stripe's error type, code,
// decline code and parameter name only, never from Stripe's message or
// body: a message can quote a payment method id and an error's
// payment_intent holds the client_secret.
//
// # Webhooks
//
// ParseWebhook verifies the Stripe-Signature header with stripe-go's webhook
// package against each configured endpoint secret (several during a
// rotation; several v1 signatures in one header are accepted too), checks
// its timestamp against the caller's clock within a tolerance (default 5
// minutes), and refuses an event rendered in another API version than
// stripe-go's (APIVersion) unless IgnoreAPIVersionMismatch is set
// (https://docs.stripe.com/webhooks#verify-official-libraries,
// https://docs.stripe.com/webhooks/versioning). Create the webhook
// endpoint with api_version APIVersion, so its events decode as the
// library expects. CheckWebhookHeader checks the header alone (its form and
// timestamp), so a receiver can refuse a missing, malformed or stale one
// before it reads the body.
package stripe
