// Package provider is the payment provider's HTTP client and webhook
// verification. It imports only the standard library; the simulator lives in
// provider/providersim.
//
// # Provider API
//
// The provider's API is modelled on Stripe's charges and refunds:
//
//	POST /v1/charges   Idempotency-Key: K   {"amount":1500,"currency":"EUR","token":"tok_visa","metadata":{"attempt":"1","order_id":"…"}}
//	GET  /v1/charges?idempotency_key=K
//	GET  /v1/charges?order_id=O&attempt=N
//	GET  /v1/charges/{id}
//	POST /v1/refunds   Idempotency-Key: K   {"charge":"ch_…","amount":500}
//	GET  /v1/refunds?idempotency_key=K | ?charge=ch_…
//	GET  /v1/refunds/{id}
//
// Errors are {"error":{"type","code","decline_code","message","param","charge"}}
// as in Stripe's API (https://docs.stripe.com/api/errors). A decline (402
// card_error) also carries the failed charge object at the top level, beside
// "error", so a caller never needs a second request to record it.
//
// # Idempotency
//
// Every POST carries an Idempotency-Key (draft-ietf-httpapi-idempotency-key-header,
// https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/;
// Stripe, https://docs.stripe.com/api/idempotent_requests). The provider keeps a
// key for its retention window (24 hours at Stripe, https://docs.stripe.com/api/idempotent_requests):
// repeating the request with the same key and parameters replays the first
// response (header Idempotent-Replayed: true); the same key with other
// parameters is a 400 idempotency_error; a repeat while the first request is
// still executing is a 409 idempotency_key_in_use. After the window the key is
// forgotten, so a repeat would charge again: callers reconcile with ChargeByKey
// inside the window, and with SearchCharges by metadata after it.
//
// # Which errors may have charged
//
// Only ErrOutcomeUnknown (a timeout, a lost connection, or a 5xx after the
// request was sent) and ErrKeyInUse (another request with the key is still
// executing) leave the outcome open; resolve them with ChargeByKey, or by
// repeating the same request with the same key. ErrDeclined records a failed
// charge (no money moved). ErrUnavailable (nothing was sent, or 429),
// ErrInvalidRequest, ErrNotFound, ErrIdempotency and ErrUnauthorized (a 401
// or 403: the API key was refused) never charged.
//
// # Authentication
//
// With WithAPIKey every request carries "Authorization: Bearer <key>", as
// Stripe's API expects (https://docs.stripe.com/api/authentication). A
// refused key is ErrUnauthorized, which also matches ErrUnavailable: retry
// after fixing the configuration; it is never a decline.
//
// # Webhooks
//
// Events are signed with the header
//
//	Provider-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
//
// following Stripe's scheme (https://docs.stripe.com/webhooks#verify-manually):
// the HMAC is computed over the raw body bytes, compared in constant time, any
// of several v1 signatures may match (secret rotation), and the timestamp must
// be within a tolerance (default 5 minutes) of the receiver's clock to limit
// replays. Delivery is at least once and may be duplicated or reordered
// (https://docs.stripe.com/webhooks#handle-duplicate-events), so receivers
// dedupe by event id and fetch the charge's current state.
//
// Payment tokens are secrets: this package never logs them and never puts them
// in an error.
package provider
