// Package providersim is a stand-in for Stripe's API, for dev mode and
// tests; it is never used in production. It speaks Stripe's wire for the
// subset the service's adapter uses, so the same adapter (stripe-go) runs
// against it and against Stripe. Run it in-process (New or Open, then
// Handler or Start) or alone (ListenAndServe, wired by
// `booking provider-sim`).
//
// New keeps everything in memory. Open with Config.DataDir keeps what a
// restart must not forget — PaymentIntents, their charges, refunds,
// idempotency records (parameters, saved answers, times) and the clock
// offset — in an append-only state file in that directory, each commit
// written and fsynced before it is answered, as Stripe never forgets a
// payment it answered. See StateFile for the format, and what happens to a
// torn or a corrupt file.
//
// # Wire (https://docs.stripe.com/api)
//
// Parameters are form-encoded (application/x-www-form-urlencoded) with
// Stripe's brackets — metadata[order_id]=o1,
// automatic_payment_methods[enabled]=true, expand[]=latest_charge (or
// expand[0]), created[gte]=1767225600 — in the body of a POST and the
// query string of a GET. They are parsed strictly: a parameter the
// endpoint does not have is 400 invalid_request_error, code
// parameter_unknown, param naming it, message "Received unknown
// parameter: X"; malformed values are 400 too (parameter_invalid_integer,
// parameter_missing, …). Answers are JSON, objects as Stripe renders them
// (PaymentIntent, Charge, Refund; amounts in minor units, currency lower
// case, created in Unix seconds of the base clock, livemode false).
//
//	POST /v1/payment_intents                  create; confirm=true confirms at once
//	     amount, currency, payment_method, confirm, description, return_url,
//	     capture_method (automatic|automatic_async), metadata[…],
//	     automatic_payment_methods[enabled|allow_redirects],
//	     payment_method_types[] (card), expand[]=latest_charge
//	GET  /v1/payment_intents/{id}             expand[]=latest_charge; 404 resource_missing
//	GET  /v1/payment_intents                  created=N or created[gt|gte|lt|lte]=N, limit (1–100,
//	     default 10), starting_after | ending_before, expand[]=data.latest_charge:
//	     {"object":"list","data":[…],"has_more":…,"url":…}, newest first;
//	     consistent (a PaymentIntent is listed as soon as it exists)
//	GET  /v1/payment_intents/search           query, limit, page, expand[]=data.latest_charge:
//	     {"object":"search_result","data":[…],"has_more":…,"next_page":…,"url":…}
//	POST /v1/payment_intents/{id}/cancel      cancellation_reason, expand[]
//	POST /v1/refunds                          payment_intent | charge, amount (default: what
//	     remains), reason, metadata[…]
//	GET  /v1/refunds                          payment_intent, charge, created, limit, starting_after |
//	     ending_before; newest first
//	GET  /v1/refunds/{id}
//
// Confirming follows Stripe's rule for automatic payment methods, on by
// default: without return_url, a confirmation whose redirects are not
// ruled out (automatic_payment_methods[allow_redirects]=never, or
// payment_method_types[]=card, or automatic_payment_methods[enabled]=false,
// which leaves cards only) is refused with Stripe's 400 "A `return_url`
// must be specified…". A confirmation without
// payment_method is 400 payment_intent_unexpected_state.
//
// Search (https://docs.stripe.com/search) serves terms field:'value'
// joined by AND, where field is metadata['key'], status or currency
// (single or double quotes); anything else is 400 naming query. It is
// eventually consistent, as Stripe's: a PaymentIntent is found only once
// the simulator's clock has passed its creation plus the search lag
// (Config.SearchLag, default 3 s; the fault search_lag_ms overrides it).
// Moving the clock past the lag makes it searchable; a lag larger than the
// move keeps search blind. List by created has no lag.
//
// Cancel is allowed in requires_payment_method, requires_capture,
// requires_confirmation, requires_action and processing; otherwise 400
// payment_intent_unexpected_state with the PaymentIntent in the error.
// Refunds need a succeeded charge: 400 payment_intent_unexpected_state
// (a PaymentIntent without one), charge_already_refunded, amount_too_large.
//
// Errors are Stripe's error object, empty members omitted:
//
//	{"error":{"type","code","decline_code","message","param","charge","payment_intent","payment_method"}}
//
// Every /v1 answer has Request-Id and Stripe-Version headers; a POST
// answer echoes the Idempotency-Key.
//
// # Idempotency (https://docs.stripe.com/api/idempotent_requests)
//
// Any POST may carry Idempotency-Key (at most 255 characters; longer is
// 400). Once the endpoint began executing, the status and body of its
// answer are saved under the key — 402 declines, state refusals (cancel's
// payment_intent_unexpected_state, charge_already_refunded,
// amount_too_large) and 500s included — and a repeat replays them byte for
// byte, with Idempotent-Replayed: true and Original-Request naming the
// first request. The repeat's parameters are compared with the first's
// (parsed, so order and array notation do not matter): other parameters,
// or another endpoint (method and path), are 400 idempotency_error. A
// repeat while the first request executes is 409 with code
// idempotency_key_in_use (type invalid_request_error) and Retry-After: 1.
// Not saved, so a repeat executes: requests refused in validation (any
// 400 above about parameters, an unknown payment method, a 404 of a named
// object), 409s, 401s, the 500 of an error before commit, and a 503 of a
// simulator closing mid-request. Keys are pruned once Config.Retention
// (24 h) old on the simulator's clock: then the same key starts a new
// request. PaymentIntents are kept forever.
//
// # Payment methods
//
// A PaymentIntent's payment_method takes Stripe's test PaymentMethods and
// the simulator's tokens (also with a "_suffix", e.g. tok_visa_7):
//
//	tok_visa, pm_card_visa                 succeeds: status succeeded, charge captured
//	tok_decline, pm_card_chargeDeclined,   402 card_error card_declined, decline_code
//	pm_card_visa_chargeDeclined              generic_decline; the PaymentIntent (in the
//	                                         error's payment_intent) is requires_payment_method
//	                                         with last_payment_error; saved under the key
//	pm_card_authenticationRequired,        200 requires_action, next_action use_stripe_sdk,
//	tok_authentication_required              client_secret; finished by
//	                                         POST /_sim/payment_intents/{id}/authenticate
//	tok_error_before_commit                500 api_error before executing: nothing created,
//	                                         nothing saved, a repeat executes (and fails again)
//	tok_error_after_commit                 executes (the PaymentIntent succeeds, its webhook
//	                                         is sent), then answers 500 api_error, which is
//	                                         saved: a repeat with the key replays the 500
//	tok_timeout_after_commit               executes, saves the 200, then drops the connection
//	                                         without an answer; a repeat replays the 200
//	tok_slow                               succeeds after Config.SlowDelay (2 s); the key is
//	                                         in use meanwhile
//
// Anything else is 400 invalid_request_error resource_missing, param
// payment_method, not saved. A payment method listed in the faults'
// decline_tokens is declined whatever it is. Payment methods are never
// stored, echoed or logged: the PaymentIntent shows a new pm_… id.
//
// Work started by a request (latency, tok_slow) finishes even if the client
// hangs up, as Stripe's would; only Close aborts it (503, nothing saved).
//
// # Authentication (https://docs.stripe.com/api/authentication)
//
// With Config.APIKey set (`booking provider-sim` reads it from
// BOOKING_PROVIDER_SIM_API_KEY), every /v1 request must carry
// "Authorization: Bearer <key>", or Basic with the key as the user name.
// Otherwise the answer is 401 invalid_request_error with WWW-Authenticate,
// before anything runs. The key is compared in constant time and never
// logged or echoed. /healthz and the control API (/_sim) need no key.
// Without Config.APIKey every request is accepted.
//
// # Webhooks (https://docs.stripe.com/webhooks)
//
// After a commit, its events are POSTed to the webhook URL:
// payment_intent.succeeded, payment_intent.payment_failed,
// payment_intent.requires_action, payment_intent.canceled (data.object the
// PaymentIntent) and charge.refunded (data.object the charge, with its
// payment_intent). Each is Stripe's event object:
//
//	{"id":"evt_…","object":"event","api_version":"2026-02-25.clover","created":…,
//	 "data":{"object":{…}},"livemode":false,"pending_webhooks":1,
//	 "request":{"id":"req_…","idempotency_key":"K"},"type":"payment_intent.succeeded"}
//
// api_version is APIVersion, the version stripe-go v84 pins, which its
// webhook.ConstructEvent requires. Deliveries carry Stripe-Signature:
// t=<Unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>"> keyed with the
// whole Config.WebhookSecret (a "whsec_…" string is used as it is). Each
// attempt is signed afresh with the base clock (not the simulator's, so
// moving it does not make signatures stale); the body is the same bytes
// for every delivery of an event. Delivery is at least once: retried with
// exponential backoff until a 2xx, at most Config.Webhooks.MaxAttempts (10)
// attempts per copy, stopped by Close. Delay, duplicates (the same event
// id again after the previous copy was acknowledged) and reordering (every
// other event held back until the next one's first attempt, bounded by the
// hold) come from Config.Webhooks plus the faults. Without a webhook URL,
// events are recorded but not sent.
//
// # Clocks
//
// Created times and webhook signatures use the base clock (Config.Now,
// the real clock by default), so a caller's list ranges and signature
// tolerance keep working when a test moves time. The simulator's clock is
// the base clock plus an offset (POST /_sim/clock); it drives key pruning
// and the search lag only.
//
// # Control API (/_sim)
//
//	GET    /_sim/charges   {"charges":[{"id","idempotency_key","amount","currency","status","refunded_amount","metadata"}]}
//	                       one entry per PaymentIntent, in creation order: id pi_…, currency upper
//	                       case, status the PaymentIntent's ("succeeded" once captured)
//	POST   /_sim/payment_intents/{id}/authenticate  {"outcome":"succeed"|"fail"}: finishes a
//	                       requires_action PaymentIntent (succeeded, or requires_payment_method
//	                       with payment_intent_authentication_failure) and sends its webhook;
//	                       200 the PaymentIntent, 404, or 400 when it is not in requires_action
//	GET    /_sim/in-flight {"idempotency_keys":[…]}: POSTs received and not yet answered, sorted
//	GET    /_sim/refunds   {"refunds":[refund…]}
//	GET    /_sim/events    {"events":[event…]}: each the exact bytes its deliveries send
//	POST   /_sim/events/{id}/resend   202; delivers the event once more (404 if unknown)
//	GET    /_sim/webhooks  {"deliveries":[{"event_id","type","copy","attempt","status_code","error","at","delivered","url","signature"}]}
//	GET    /_sim/faults    the current faults (remaining counts)
//	POST   /_sim/faults    merge: members present replace current values; 200 with the result
//	DELETE /_sim/faults    clear all faults; 200 with the result
//	GET    /_sim/clock     {"now":"<RFC 3339>","offset":"25h0m0s"}
//	POST   /_sim/clock     {"advance":"25h"} and/or {"now":"2026-01-02T00:00:00Z"} (now first); answers as GET
//	DELETE /_sim/clock     back to the base clock
//	POST   /_sim/reset     204; forget everything: PaymentIntents, refunds, keys, events, faults,
//	                       clock offset (the state file too)
//	GET    /healthz        {"status":"ok"}
//
// The faults body (every member optional; see Faults for exact semantics):
//
//	{
//	  "latency_ms": 0,                 delay of every /v1 request (processing time for executing POSTs)
//	  "error_before_commit": 0,        next n POSTs → 500 before executing: nothing done, nothing saved
//	  "error_before_commit_rate": 0.0, probability of the same per POST
//	  "error_after_commit": 0,         next n POSTs execute, then → 500, saved and replayed for the key
//	  "error_after_commit_rate": 0.0,
//	  "drop_after_commit": 0,          next n POSTs execute, save their answer, then the connection is closed
//	  "drop_after_commit_rate": 0.0,
//	  "in_use_409": 0,                 next n POSTs → 409 idempotency_key_in_use, nothing done or saved
//	  "decline_tokens": [],            payment methods declined whatever their meaning
//	  "search_lag_ms": null,           replaces Config.SearchLag while set (0: searchable at once)
//	  "webhook_delay_ms": 0,           delay before the first attempt of each new event
//	  "webhook_duplicates": 0,         extra copies of each new event
//	  "webhook_duplicate_rate": 0.0,   probability of one more copy
//	  "webhook_reorder": false,        hold every other new event back so the next overtakes it
//	  "webhook_reorder_hold_ms": 0,    longest hold (default Config.Webhooks.ReorderHold, 1 s)
//	  "webhooks_paused": false         no attempts until false again
//	}
//
// So an outcome lost after Stripe's commit comes from tok_timeout_after_commit
// or drop_after_commit (a repeat replays the 200), a saved 500 from
// tok_error_after_commit or error_after_commit (a repeat replays the 500),
// and an unsaved 500 from tok_error_before_commit or error_before_commit (a
// repeat executes). Counts and rates apply to every POST of the API;
// rates draw from a random source seeded by Config.Seed, so a seeded run
// is repeatable for a given request order.
//
// # Deviations from Stripe, kept on purpose
//
// Stripe parameters outside the subset above are refused as unknown. No
// payment_intent.created, charge.succeeded or refund.* events are sent. A
// searchable PaymentIntent shows its current state (Stripe's search index
// may lag behind updates too). Amounts have no currency minimum. Unknown
// payment methods are not named in the error. Keys are pruned exactly at
// Config.Retention, where Stripe prunes "at least" 24 hours later. The 409
// of a key in use has type invalid_request_error: Stripe's error-code list
// names only its code, idempotency_key_in_use.
package providersim
