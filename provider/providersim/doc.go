// Package providersim is a Stripe-like payment provider simulator for dev
// mode and tests; it is never used in production. Run it
// in-process (New or Open, then Handler or Start) or alone (ListenAndServe,
// wired by `booking provider-sim`).
//
// New keeps everything in memory. Open with Config.DataDir keeps what a
// restart must not forget — charges, refunds, idempotency records (with their
// fingerprints, stored answers and times) and the clock offset — in an
// append-only state file in that directory, each commit written and fsynced
// before it is answered, as a real provider never forgets a charge it
// answered. See StateFile for the format, and what happens to a torn or a
// corrupt file.
//
// The provider's idempotency follows Stripe (https://docs.stripe.com/api/idempotent_requests)
// and draft-ietf-httpapi-idempotency-key-header; webhook signatures follow
// Stripe's scheme (https://docs.stripe.com/webhooks#verify-manually); see
// package provider for the client and the verifier.
//
// # Provider API (/v1)
//
// POST /v1/charges, header Idempotency-Key (required, 1–255 printable ASCII):
//
//	{"amount":1500,"currency":"EUR","token":"tok_visa","metadata":{"order_id":"o1","attempt":"1"},"description":"optional"}
//
// Unknown fields and non-integral amounts are 400 invalid_request_error.
// Success is 200 with the charge:
//
//	{"id":"ch_…","object":"charge","amount":1500,"currency":"EUR","status":"succeeded",
//	 "idempotency_key":"K","metadata":{…},"refunded_amount":0,"refunded":false,"created":1767225600}
//
// A decline is 402 and records a failed charge (status "failed",
// failure_code "card_declined", failure_message), which is also in the body:
//
//	{"error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline",
//	          "message":"Your card was declined.","charge":"ch_…"},
//	 "charge":{…the failed charge…}}
//
// Idempotency: keys are remembered for Config.Retention (24h) after their
// request committed, on the simulator's clock. Within the window a repeat with
// the same key and the same parameters (compared as canonical JSON, so
// whitespace and member order do not matter) replays the stored status and
// body byte for byte, with header Idempotent-Replayed: true — the body shows
// the object as it was then, as Stripe does. The same key with other
// parameters, or on the other endpoint, is 400
// {"error":{"type":"idempotency_error",…}}. A repeat while the first request
// is still executing is 409 {"error":{"type":"idempotency_key_in_use",…}}
// with Retry-After: 1. Requests that fail validation (400), and 5xx answers,
// do not use up the key. After the window the key is forgotten: a repeat
// executes again (a second charge), and GET /v1/charges?idempotency_key=K
// finds nothing. Charges themselves are kept forever, as at Stripe, so the
// metadata search still finds them.
//
// Payment tokens with fixed meaning (also with a "_suffix", e.g. tok_visa_7):
//
//	tok_visa                  succeeds
//	tok_decline               402 card_declined (definitive; failed charge recorded)
//	tok_error_before_commit   500 api_error, nothing recorded, key not used up — every time
//	tok_timeout_after_commit  the charge succeeds and is recorded, then the connection is
//	                          closed without an answer; a repeat with the key replays the 200
//	tok_slow                  succeeds after Config.SlowDelay (2 s); the key is in use meanwhile
//
// Any other token is 400 invalid_request_error, code "resource_missing",
// param "token" (as Stripe answers an unknown token): it is not a decline, and
// it does not use up the key. A token listed in the faults' decline_tokens is
// declined whatever it is. Tokens are never stored, echoed or logged.
//
// Work started by a request (latency, tok_slow) finishes even if the client
// hangs up, as a real provider's would; only Close aborts it (503, nothing
// committed).
//
//	GET /v1/charges?idempotency_key=K          the key's charge, while the key is retained
//	GET /v1/charges?order_id=O&attempt=N       search by metadata; either filter alone works
//	→ 200 {"object":"list","data":[charge…],"has_more":false,"url":"/v1/charges"} (oldest first; data may be [])
//	  400 parameter_missing without any filter
//	GET /v1/charges/{id}                       200 charge (current state) | 404 resource_missing
//
// POST /v1/refunds, header Idempotency-Key, body {"charge":"ch_…","amount":500}
// (amount optional: what remains). 200 with the refund
// {"id":"re_…","object":"refund","amount":500,"currency":"EUR","charge":"ch_…","status":"succeeded","idempotency_key":"K","created":…};
// it raises the charge's refunded_amount (and sets refunded when it reaches
// the amount) and emits charge.refunded. Idempotency as for charges. Refusals
// record nothing and do not use up the key: 404 resource_missing (no such
// charge), 400 charge_not_refundable (a failed charge),
// charge_already_refunded, amount_too_large.
//
//	GET /v1/refunds?idempotency_key=K | ?charge=ch_…   list as above
//	GET /v1/refunds/{id}                               200 refund | 404
//
// Every /v1 answer has a Request-Id header, and POST answers echo the
// Idempotency-Key. Errors have the shape
// {"error":{"type","code","decline_code","message","param","charge"}} with
// empty members omitted.
//
// # Authentication
//
// With Config.APIKey set (`booking provider-sim` reads it from
// BOOKING_PROVIDER_SIM_API_KEY), every /v1 request must carry
// "Authorization: Bearer <key>", as Stripe's API does
// (https://docs.stripe.com/api/authentication). Without it, or with another
// key, the answer is 401 with WWW-Authenticate: Bearer (RFC 6750) and
//
//	{"error":{"type":"invalid_request_error","message":"Invalid API Key provided."}}
//
// before anything runs: no charge, no key used up. The key is compared in
// constant time and never logged or echoed. /healthz and the control API
// (/_sim) need no key. Without Config.APIKey every request is accepted.
//
// # Webhooks
//
// After a charge or refund commits, an event is POSTed to the webhook URL:
//
//	{"id":"evt_…","object":"event","type":"charge.succeeded"|"charge.failed"|"charge.refunded",
//	 "created":1767225600,"data":{"object":{…the charge at commit time…}}}
//
// with headers Content-Type: application/json and
// Provider-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under
// Config.WebhookSecret>. Each attempt is signed afresh with the base clock
// (not the simulator's clock, so advancing it does not make signatures stale);
// the body is the same bytes for every delivery of an event. Delivery is at
// least once: retried with exponential backoff until a 2xx, at most
// Config.Webhooks.MaxAttempts (10) attempts per copy, stopped by Close.
// Delay, duplicates (the same event id sent again after the previous copy was
// acknowledged) and reordering (every other event held back until the next
// one's first attempt, bounded by the hold) come from Config.Webhooks plus the
// faults. Without a webhook URL, events are recorded but not sent.
//
// # Control API (/_sim)
//
//	GET    /_sim/charges   {"charges":[{"id","idempotency_key","amount","currency","status","refunded_amount","metadata"}]}
//	GET    /_sim/in-flight {"idempotency_keys":[…]}: requests received and not yet answered, sorted
//	GET    /_sim/refunds   {"refunds":[refund…]}
//	GET    /_sim/events    {"events":[event…]}
//	POST   /_sim/events/{id}/resend   202; delivers the event once more (404 if unknown)
//	GET    /_sim/webhooks  {"deliveries":[{"event_id","type","copy","attempt","status_code","error","at","delivered","url","signature"}]}
//	GET    /_sim/faults    the current faults (remaining counts)
//	POST   /_sim/faults    merge: members present replace current values; 200 with the result
//	DELETE /_sim/faults    clear all faults; 200 with the result
//	GET    /_sim/clock     {"now":"<RFC 3339>","offset":"25h0m0s"}
//	POST   /_sim/clock     {"advance":"25h"} and/or {"now":"2026-01-02T00:00:00Z"} (now first); answers as GET
//	DELETE /_sim/clock     back to the base clock
//	POST   /_sim/reset     204; forget all charges, refunds, keys, events, faults, clock offset
//	                       (the state file too)
//	GET    /healthz        {"status":"ok"}
//
// The faults body (every member optional; see Faults for exact semantics):
//
//	{
//	  "latency_ms": 0,                 delay of every /v1 request (processing time for executing POSTs)
//	  "error_before_commit": 0,        next n executing POSTs → 500, nothing recorded
//	  "error_before_commit_rate": 0.0, probability of the same per executing POST
//	  "drop_after_commit": 0,          next n executing POSTs commit, then the connection is closed
//	  "drop_after_commit_rate": 0.0,
//	  "in_use_409": 0,                 next n POSTs → 409 idempotency_key_in_use, nothing recorded
//	  "decline_tokens": [],            tokens declined whatever their meaning
//	  "webhook_delay_ms": 0,           delay before the first attempt of each new event
//	  "webhook_duplicates": 0,         extra copies of each new event
//	  "webhook_duplicate_rate": 0.0,   probability of one more copy
//	  "webhook_reorder": false,        hold every other new event back so the next overtakes it
//	  "webhook_reorder_hold_ms": 0,    longest hold (default Config.Webhooks.ReorderHold, 1 s)
//	  "webhooks_paused": false         no attempts until false again
//	}
//
// Counts and rates apply to POST /v1/charges and POST /v1/refunds; rates draw
// from a random source seeded by Config.Seed, so a seeded run is repeatable
// for a given request order.
package providersim
