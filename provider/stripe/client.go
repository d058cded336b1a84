package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/retrysafe/booking/provider"
	stripego "github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"
)

// APIVersion is the Stripe API version every request is sent with (header
// Stripe-Version) and that webhook events must be rendered in: stripe-go's
// pinned version (https://docs.stripe.com/api/versioning). Pin the webhook
// endpoint to it (https://docs.stripe.com/webhooks/versioning).
const APIVersion = stripego.APIVersion

// DefaultTimeout is the HTTP client timeout used when Config.HTTPClient is nil.
const DefaultTimeout = 30 * time.Second

// MaxKeyLength is the longest Idempotency-Key Stripe accepts
// (https://docs.stripe.com/api/idempotent_requests).
const MaxKeyLength = 255

// pageSize is the limit sent with every list and search: Stripe's largest
// page (https://docs.stripe.com/api/pagination).
const pageSize = 100

// Config configures a Client. The zero value is not valid: Stripe's API
// needs SecretKey, another base URL needs BaseURL.
type Config struct {
	// SecretKey is the API key sent as "Authorization: Bearer <key>"
	// (sk_live_…, sk_test_… or a restricted rk_… key;
	// https://docs.stripe.com/keys). Required for Stripe's API; may be
	// empty with a BaseURL that needs none (the simulator).
	SecretKey string
	// BaseURL is the API's base URL, e.g. "http://127.0.0.1:8090" for the
	// simulator or a proxy; empty means Stripe's API
	// (https://api.stripe.com). A trailing "/" or "/v1" is ignored.
	BaseURL string
	// HTTPClient sends the requests; its Timeout bounds each request
	// (nil: a client with DefaultTimeout). Its transport is wrapped, not
	// changed.
	HTTPClient *http.Client
	// WebhookSecrets are the webhook endpoint's signing secrets (whsec_…;
	// any non-empty string is used as the HMAC key as is). An event
	// signed with any of them is accepted, so a rotation adds the new
	// secret before removing the old one. None: every webhook is refused.
	WebhookSecrets []string
	// WebhookTolerance is the largest accepted difference, either way,
	// between a signature's timestamp and the caller's clock (0: 5
	// minutes, Stripe's default; https://docs.stripe.com/webhooks#replay-attacks).
	WebhookTolerance time.Duration
	// IgnoreAPIVersionMismatch accepts events of another API version than
	// APIVersion. Leave it false and pin the webhook endpoint to
	// APIVersion: an event of another version may decode with fields
	// missing or moved (https://docs.stripe.com/webhooks/versioning).
	IgnoreAPIVersionMismatch bool
}

// String returns a description of c without its secret key and webhook
// secrets.
func (c Config) String() string {
	return fmt.Sprintf("stripe.Config{BaseURL:%q SecretKey:[redacted] WebhookSecrets:[%d redacted] WebhookTolerance:%s IgnoreAPIVersionMismatch:%t}",
		c.BaseURL, len(c.WebhookSecrets), c.WebhookTolerance, c.IgnoreAPIVersionMismatch)
}

// GoString returns the same as String, so %#v shows no secret either.
func (c Config) GoString() string { return c.String() }

// Client speaks to Stripe's API through stripe-go. It is safe for concurrent
// use. Its methods implement the payment port of package commands.
type Client struct {
	api           *stripego.Client
	secrets       []string
	tolerance     time.Duration
	ignoreVersion bool
}

// silent is stripe-go's logger set to log nothing: its default writes API
// errors, whose objects carry payment method ids, and unreadable bodies.
var silent = &stripego.LeveledLogger{Level: stripego.LevelNull}

// New returns a Client for cfg, or an error naming the field that is
// invalid: a BaseURL that is not an absolute http(s) URL, no SecretKey for
// Stripe's API, an empty webhook secret or a negative tolerance.
func New(cfg Config) (*Client, error) {
	base := stripego.APIURL
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("stripe: base URL %q: want an absolute http or https URL", cfg.BaseURL)
		}
		base = cfg.BaseURL
	} else if cfg.SecretKey == "" {
		return nil, errors.New("stripe: a secret key is required for Stripe's API")
	}
	for i, s := range cfg.WebhookSecrets {
		if s == "" {
			return nil, fmt.Errorf("stripe: webhook secret %d is empty", i+1)
		}
	}
	if cfg.WebhookTolerance < 0 {
		return nil, fmt.Errorf("stripe: webhook tolerance %s is negative", cfg.WebhookTolerance)
	}
	tolerance := cfg.WebhookTolerance
	if tolerance == 0 {
		tolerance = webhook.DefaultTolerance
	}
	hc := &http.Client{Timeout: DefaultTimeout}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		hc = &c
	}
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	hc.Transport = transport{base: rt}
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL:               stripego.String(base),
		HTTPClient:        hc,
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     silent,
		EnableTelemetry:   stripego.Bool(false),
	})
	return &Client{
		api:           stripego.NewClient(cfg.SecretKey, stripego.WithBackends(&stripego.Backends{API: backend})),
		secrets:       append([]string(nil), cfg.WebhookSecrets...),
		tolerance:     tolerance,
		ignoreVersion: cfg.IgnoreAPIVersionMismatch,
	}, nil
}

// CreatePayment creates and confirms req's PaymentIntent under the
// idempotency key key (https://docs.stripe.com/api/payment_intents/create),
// with the request shape of the package doc. It returns the Payment
// (succeeded, processing or requires_action; Replayed if Stripe replayed
// the answer), or an error wrapping ErrDeclined (the *provider.APIError's
// Payment is the declined PaymentIntent), ErrOutcomeUnknown, ErrKeyInUse,
// ErrIdempotency, ErrUnavailable, ErrUnauthorized or ErrInvalidRequest
// (also for an invalid req or key, before sending).
func (c *Client) CreatePayment(ctx context.Context, key string, req provider.PaymentRequest) (provider.Payment, error) {
	const path = "/v1/payment_intents"
	if err := req.Validate(); err != nil {
		return provider.Payment{}, err
	}
	if err := checkKey(key); err != nil {
		return provider.Payment{}, err
	}
	params := &stripego.PaymentIntentCreateParams{
		Amount:        stripego.Int64(req.Amount),
		Currency:      stripego.String(strings.ToLower(req.Currency)),
		PaymentMethod: stripego.String(req.PaymentMethod),
		Confirm:       stripego.Bool(true),
		AutomaticPaymentMethods: &stripego.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled:        stripego.Bool(true),
			AllowRedirects: stripego.String("never"),
		},
		Metadata: req.Metadata(),
	}
	if req.Description != "" {
		params.Description = stripego.String(req.Description)
	}
	params.SetIdempotencyKey(key)
	ctx, x := track(ctx)
	pi, err := c.api.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		return provider.Payment{}, x.classify(ctx, http.MethodPost, path, err)
	}
	return paymentOf(pi), nil
}

// GetPayment returns the PaymentIntent id with its latest charge expanded
// (https://docs.stripe.com/api/payment_intents/retrieve). Errors wrap
// ErrNotFound (no such PaymentIntent), ErrUnavailable, ErrUnauthorized or
// ErrInvalidRequest (also for an empty id).
func (c *Client) GetPayment(ctx context.Context, id string) (provider.Payment, error) {
	if id == "" {
		return provider.Payment{}, fmt.Errorf("%w: payment id is required", provider.ErrInvalidRequest)
	}
	params := &stripego.PaymentIntentRetrieveParams{}
	params.AddExpand("latest_charge")
	ctx, x := track(ctx)
	pi, err := c.api.V1PaymentIntents.Retrieve(ctx, id, params)
	if err != nil {
		return provider.Payment{}, x.classify(ctx, http.MethodGet, "/v1/payment_intents/"+id, err)
	}
	return paymentOf(pi), nil
}

// ListPayments returns every PaymentIntent created from from to to, both
// inclusive at whole seconds, newest first, paged to the end
// (https://docs.stripe.com/api/payment_intents/list). Lists are consistent:
// they are not subject to search's availability delay
// (https://docs.stripe.com/search#data-freshness). The caller matches
// metadata. Errors wrap ErrUnavailable, ErrUnauthorized or
// ErrInvalidRequest (also when to is before from).
func (c *Client) ListPayments(ctx context.Context, from, to time.Time) ([]provider.Payment, error) {
	if to.Before(from) {
		return nil, fmt.Errorf("%w: list range ends (%s) before it starts (%s)", provider.ErrInvalidRequest, to, from)
	}
	params := &stripego.PaymentIntentListParams{
		ListParams:   stripego.ListParams{Limit: stripego.Int64(pageSize)},
		CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: from.Unix(), LesserThanOrEqual: to.Unix()},
	}
	params.AddExpand("data.latest_charge")
	ctx, x := track(ctx)
	var out []provider.Payment
	for pi, err := range c.api.V1PaymentIntents.List(ctx, params) {
		if err != nil {
			return nil, x.classify(ctx, http.MethodGet, "/v1/payment_intents", err)
		}
		out = append(out, paymentOf(pi))
	}
	return out, nil
}

// SearchPayments returns the PaymentIntents whose metadata order_id is
// orderID and, if attempt > 0, whose metadata attempt is attempt, paged to
// the end (https://docs.stripe.com/api/payment_intents/search). Search is
// eventually consistent — normally within a minute, up to an hour behind
// during outages (https://docs.stripe.com/search#data-freshness) — so a hit
// is a fact and a miss proves nothing. Errors wrap ErrUnavailable,
// ErrUnauthorized or ErrInvalidRequest (also for an empty orderID).
func (c *Client) SearchPayments(ctx context.Context, orderID string, attempt int) ([]provider.Payment, error) {
	if orderID == "" {
		return nil, fmt.Errorf("%w: order id is required", provider.ErrInvalidRequest)
	}
	query := fmt.Sprintf("metadata['%s']:'%s'", provider.MetadataOrderID, quote(orderID))
	if attempt > 0 {
		query += fmt.Sprintf(" AND metadata['%s']:'%d'", provider.MetadataAttempt, attempt)
	}
	params := &stripego.PaymentIntentSearchParams{
		SearchParams: stripego.SearchParams{Query: query, Limit: stripego.Int64(pageSize)},
	}
	params.AddExpand("data.latest_charge")
	ctx, x := track(ctx)
	var out []provider.Payment
	for pi, err := range c.api.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			return nil, x.classify(ctx, http.MethodGet, "/v1/payment_intents/search", err)
		}
		out = append(out, paymentOf(pi))
	}
	return out, nil
}

// quote escapes s for a quoted string of Stripe's search query language,
// where a backslash escapes a quote (https://docs.stripe.com/search#search-query-language).
func quote(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

// CancelPayment cancels the PaymentIntent id with cancellation_reason
// abandoned under the idempotency key key
// (https://docs.stripe.com/api/payment_intents/cancel) and returns it.
// Errors wrap ErrInvalidRequest with Code payment_intent_unexpected_state
// when its status forbids it (succeeded, canceled), ErrNotFound,
// ErrOutcomeUnknown, ErrKeyInUse, ErrIdempotency, ErrUnavailable or
// ErrUnauthorized.
func (c *Client) CancelPayment(ctx context.Context, key, id string) (provider.Payment, error) {
	if id == "" {
		return provider.Payment{}, fmt.Errorf("%w: payment id is required", provider.ErrInvalidRequest)
	}
	if err := checkKey(key); err != nil {
		return provider.Payment{}, err
	}
	params := &stripego.PaymentIntentCancelParams{CancellationReason: stripego.String("abandoned")}
	params.SetIdempotencyKey(key)
	ctx, x := track(ctx)
	pi, err := c.api.V1PaymentIntents.Cancel(ctx, id, params)
	if err != nil {
		return provider.Payment{}, x.classify(ctx, http.MethodPost, "/v1/payment_intents/"+id+"/cancel", err)
	}
	return paymentOf(pi), nil
}

// Refund refunds req.Amount (0: what remains) of the PaymentIntent
// req.PaymentID under the idempotency key key
// (https://docs.stripe.com/api/refunds/create). Errors wrap what
// CreatePayment's do, plus ErrNotFound, and ErrInvalidRequest with Code
// charge_already_refunded or amount_too_large.
func (c *Client) Refund(ctx context.Context, key string, req provider.PaymentRefundRequest) (provider.PaymentRefund, error) {
	const path = "/v1/refunds"
	switch {
	case req.PaymentID == "":
		return provider.PaymentRefund{}, fmt.Errorf("%w: payment id is required", provider.ErrInvalidRequest)
	case req.Amount < 0:
		return provider.PaymentRefund{}, fmt.Errorf("%w: refund amount must not be negative", provider.ErrInvalidRequest)
	}
	if err := checkKey(key); err != nil {
		return provider.PaymentRefund{}, err
	}
	params := &stripego.RefundCreateParams{PaymentIntent: stripego.String(req.PaymentID)}
	if req.Amount > 0 {
		params.Amount = stripego.Int64(req.Amount)
	}
	if len(req.Metadata) > 0 {
		params.Metadata = req.Metadata
	}
	params.SetIdempotencyKey(key)
	ctx, x := track(ctx)
	re, err := c.api.V1Refunds.Create(ctx, params)
	if err != nil {
		return provider.PaymentRefund{}, x.classify(ctx, http.MethodPost, path, err)
	}
	return refundOf(re, req.PaymentID), nil
}

// ListRefunds returns every refund of the PaymentIntent paymentID, newest
// first, paged to the end (https://docs.stripe.com/api/refunds/list).
// Errors wrap ErrUnavailable, ErrUnauthorized or ErrInvalidRequest (also
// for an empty paymentID).
func (c *Client) ListRefunds(ctx context.Context, paymentID string) ([]provider.PaymentRefund, error) {
	if paymentID == "" {
		return nil, fmt.Errorf("%w: payment id is required", provider.ErrInvalidRequest)
	}
	params := &stripego.RefundListParams{
		ListParams:    stripego.ListParams{Limit: stripego.Int64(pageSize)},
		PaymentIntent: stripego.String(paymentID),
	}
	ctx, x := track(ctx)
	var out []provider.PaymentRefund
	for re, err := range c.api.V1Refunds.List(ctx, params) {
		if err != nil {
			return nil, x.classify(ctx, http.MethodGet, "/v1/refunds", err)
		}
		out = append(out, refundOf(re, paymentID))
	}
	return out, nil
}

// checkKey validates an idempotency key as Stripe would (1 to MaxKeyLength
// printable ASCII characters), and refuses surrounding spaces, which
// stripe-go would trim; a bad key fails before anything is sent, with an
// error wrapping ErrInvalidRequest.
func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLength {
		return fmt.Errorf("%w: idempotency key must have 1 to %d characters", provider.ErrInvalidRequest, MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("%w: idempotency key must be printable ASCII", provider.ErrInvalidRequest)
		}
	}
	if strings.TrimSpace(key) != key {
		return fmt.Errorf("%w: idempotency key must not start or end with a space", provider.ErrInvalidRequest)
	}
	return nil
}
