package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Header names of the provider API.
const (
	// HeaderIdempotencyKey carries the request's idempotency key
	// (draft-ietf-httpapi-idempotency-key-header §2).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed is "true" on a replayed answer (Stripe).
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	// HeaderRequestID identifies a request in the provider's logs.
	HeaderRequestID = "Request-Id"
	// HeaderSignature carries a webhook's signature; see Sign.
	HeaderSignature = "Provider-Signature"
)

// MaxKeyLength is the longest idempotency key the provider accepts (Stripe
// allows up to 255 characters).
const MaxKeyLength = 255

// maxResponseBytes bounds the body read from the provider.
const maxResponseBytes = 1 << 20

// Client calls the provider's HTTP API. It is safe for concurrent use. It
// never retries on its own: the caller decides whether and when to repeat a
// request with the same key, under the payment attempt's lease (see
// ARCHITECTURE.md, Key lineage: provider idempotency key).
//
// The underlying http.Transport may resend a request that carries an
// Idempotency-Key once, on a fresh connection, when a reused keep-alive
// connection fails before any answer (net/http treats such requests as
// replayable). That is safe: it is the same attempt with the same key.
type Client struct {
	base      string
	http      *http.Client
	apiKey    string
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sends key on every request as "Authorization: Bearer <key>",
// the way Stripe authenticates (https://docs.stripe.com/api/authentication).
// The key is a secret: the client never logs it or puts it in an error. The
// simulator checks it when it is configured with one.
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a Client for the provider at baseURL (for example
// "http://127.0.0.1:8090"). A nil httpClient means a client with a 30 s
// timeout; callers should still bound every call with a context deadline
// (the provider timeout).
func New(baseURL string, httpClient *http.Client, opts ...Option) *Client {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	c := &Client{
		base:      strings.TrimRight(baseURL, "/"),
		http:      httpClient,
		userAgent: "retrysafe-booking/provider",
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// CreateCharge sends POST /v1/charges with req.Body() under the idempotency
// key. It returns the succeeded charge (Replayed set when the answer was a
// replay).
//
// Errors: ErrDeclined (the *APIError carries the failed charge);
// ErrOutcomeUnknown (may have charged); ErrKeyInUse (a request with the key is
// executing); ErrIdempotency (key reused with other parameters); ErrUnavailable
// and ErrInvalidRequest (nothing charged). The token never appears in an error.
func (c *Client) CreateCharge(ctx context.Context, key string, req ChargeRequest) (Charge, error) {
	if err := req.Validate(); err != nil {
		return Charge{}, err
	}
	ch, err := c.createCharge(ctx, key, req.Body())
	return ch, redact(err, req.Token)
}

// CreateChargeRaw is CreateCharge with a stored body, sent byte for byte, so
// a retry of an attempt is identical to its first send even across deploys.
// body should come from ChargeRequest.Body. Errors are as for CreateCharge.
func (c *Client) CreateChargeRaw(ctx context.Context, key string, body []byte) (Charge, error) {
	ch, err := c.createCharge(ctx, key, body)
	if err != nil {
		// Best effort: find the token to keep it out of provider messages.
		var r struct {
			Token string `json:"token"`
		}
		if json.Unmarshal(body, &r) == nil {
			err = redact(err, r.Token)
		}
	}
	return ch, err
}

func (c *Client) createCharge(ctx context.Context, key string, body []byte) (Charge, error) {
	ch, replayed, err := post[Charge](ctx, c, "/v1/charges", key, body)
	ch.Replayed = replayed
	return ch, err
}

// post sends POST path with body under the idempotency key and decodes the
// reply into a T (the zero T on error); replayed reports the
// Idempotent-Replayed: true header. Errors are those of Client.do.
func post[T any](ctx context.Context, c *Client, path, key string, body []byte) (v T, replayed bool, err error) {
	if replayed, err = c.do(ctx, http.MethodPost, path, key, body, &v); err != nil {
		var zero T
		return zero, false, err
	}
	return v, replayed, nil
}

// ChargeByKey returns the charge created by the request with idempotency key
// key, via GET /v1/charges?idempotency_key=key. ok is false when the provider
// knows no charge for the key: none was committed, or the key's retention
// window has passed (the charge itself still exists; find it with
// SearchCharges). Errors wrap ErrUnavailable for transient failures.
func (c *Client) ChargeByKey(ctx context.Context, key string) (ch Charge, ok bool, err error) {
	return firstByKey(ctx, key, c.listCharges)
}

// SearchCharges returns the charges whose metadata has order_id = orderID and,
// when attempt > 0, attempt = attempt, oldest first, via
// GET /v1/charges?order_id=…&attempt=…. Charges are kept forever, so this
// finds charges whose keys have expired. orderID must not be empty. Errors
// wrap ErrUnavailable for transient failures.
func (c *Client) SearchCharges(ctx context.Context, orderID string, attempt int) ([]Charge, error) {
	if orderID == "" {
		return nil, fmt.Errorf("%w: SearchCharges needs an order id", ErrInvalidRequest)
	}
	q := url.Values{MetadataOrderID: {orderID}}
	if attempt > 0 {
		q.Set(MetadataAttempt, strconv.Itoa(attempt))
	}
	return c.listCharges(ctx, q)
}

func (c *Client) listCharges(ctx context.Context, q url.Values) ([]Charge, error) {
	return list[Charge](ctx, c, "/v1/charges", q)
}

// GetCharge returns the current state of the charge with the given id. It
// returns an error wrapping ErrNotFound if there is none, ErrUnavailable for
// transient failures.
func (c *Client) GetCharge(ctx context.Context, id string) (Charge, error) {
	if id == "" {
		return Charge{}, fmt.Errorf("%w: empty charge id", ErrInvalidRequest)
	}
	var ch Charge
	if _, err := c.do(ctx, http.MethodGet, "/v1/charges/"+url.PathEscape(id), "", nil, &ch); err != nil {
		return Charge{}, err
	}
	return ch, nil
}

// Refund sends POST /v1/refunds for amount minor units of the charge (0
// refunds whatever remains) under the idempotency key, and returns the refund
// (Replayed set on a replay).
//
// Errors: ErrOutcomeUnknown (may have refunded); ErrKeyInUse; ErrIdempotency;
// ErrNotFound (no such charge); ErrInvalidRequest, whose *APIError Code tells
// CodeChargeAlreadyRefunded, CodeAmountTooLarge or CodeChargeNotRefundable;
// ErrUnavailable.
func (c *Client) Refund(ctx context.Context, key, chargeID string, amount int64) (Refund, error) {
	if chargeID == "" || amount < 0 {
		return Refund{}, fmt.Errorf("%w: refund needs a charge id and a non-negative amount", ErrInvalidRequest)
	}
	body := RefundRequest{Charge: chargeID, Amount: amount}.Body()
	re, replayed, err := post[Refund](ctx, c, "/v1/refunds", key, body)
	re.Replayed = replayed
	return re, err
}

// RefundByKey returns the refund created by the request with idempotency key
// key, via GET /v1/refunds?idempotency_key=key; ok is false when there is none
// (or the key's window has passed). Errors wrap ErrUnavailable for transient
// failures.
func (c *Client) RefundByKey(ctx context.Context, key string) (re Refund, ok bool, err error) {
	return firstByKey(ctx, key, c.listRefunds)
}

// ListRefunds returns the refunds of a charge, oldest first, via
// GET /v1/refunds?charge=id. Errors wrap ErrUnavailable for transient failures.
func (c *Client) ListRefunds(ctx context.Context, chargeID string) ([]Refund, error) {
	if chargeID == "" {
		return nil, fmt.Errorf("%w: empty charge id", ErrInvalidRequest)
	}
	return c.listRefunds(ctx, url.Values{"charge": {chargeID}})
}

func (c *Client) listRefunds(ctx context.Context, q url.Values) ([]Refund, error) {
	return list[Refund](ctx, c, "/v1/refunds", q)
}

// list sends GET path?q and returns the data array of the list object it
// answers ({"object":"list","data":[…]}, Stripe,
// https://docs.stripe.com/api/pagination). Errors are those of Client.do.
func list[T any](ctx context.Context, c *Client, path string, q url.Values) ([]T, error) {
	var l struct {
		Data []T `json:"data"`
	}
	if _, err := c.do(ctx, http.MethodGet, path+"?"+q.Encode(), "", nil, &l); err != nil {
		return nil, err
	}
	return l.Data, nil
}

// errorEnvelope is the body of an error answer.
type errorEnvelope struct {
	Error struct {
		Type        string `json:"type"`
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
		Message     string `json:"message"`
		Param       string `json:"param"`
		Charge      string `json:"charge"`
	} `json:"error"`
	Charge *Charge `json:"charge"`
}

// do sends one request and decodes a 2xx body into out. It reports whether
// the answer was a replay. Errors are classified as documented on the
// sentinels.
func (c *Client) do(ctx context.Context, method, path, key string, body []byte, out any) (replayed bool, err error) {
	op := method + " " + strings.SplitN(path, "?", 2)[0]
	if method == http.MethodPost {
		if err := checkKey(key); err != nil {
			return false, err
		}
	}
	var rdr io.Reader
	if body != nil {
		rdr = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rdr)
	if err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrInvalidRequest, op, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}

	// sent turns true once request headers have been handed to a connection:
	// before that, the provider cannot have executed anything.
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { sent.Store(true) },
	}))

	resp, err := c.http.Do(req)
	if err != nil {
		if method == http.MethodPost && sent.Load() {
			return false, fmt.Errorf("%w: %s: %w", ErrOutcomeUnknown, op, err)
		}
		return false, fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	defer resp.Body.Close()
	replayed = resp.Header.Get(HeaderIdempotentReplayed) == "true"

	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		if method == http.MethodPost {
			return replayed, fmt.Errorf("%w: %s: reading the answer: %w", ErrOutcomeUnknown, op, err)
		}
		return replayed, fmt.Errorf("%w: %s: reading the answer: %w", ErrUnavailable, op, err)
	}

	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(data, out); err != nil {
			if method == http.MethodPost {
				return replayed, fmt.Errorf("%w: %s: undecodable %d answer: %w", ErrOutcomeUnknown, op, resp.StatusCode, err)
			}
			return replayed, fmt.Errorf("%w: %s: undecodable %d answer: %w", ErrUnavailable, op, resp.StatusCode, err)
		}
		return replayed, nil
	}

	apiErr := &APIError{
		Method:     method,
		Path:       strings.SplitN(path, "?", 2)[0],
		StatusCode: resp.StatusCode,
		RequestID:  resp.Header.Get(HeaderRequestID),
		Replayed:   replayed,
	}
	var env errorEnvelope
	if json.Unmarshal(data, &env) == nil {
		apiErr.Type = env.Error.Type
		apiErr.Code = env.Error.Code
		apiErr.DeclineCode = env.Error.DeclineCode
		apiErr.Message = env.Error.Message
		apiErr.Param = env.Error.Param
		apiErr.Charge = env.Charge
		if apiErr.Charge == nil && env.Error.Charge != "" {
			apiErr.Charge = &Charge{ID: env.Error.Charge, Object: "charge", Status: StatusFailed, FailureCode: env.Error.Code, FailureMessage: env.Error.Message}
		}
		if apiErr.Charge != nil {
			apiErr.Charge.Replayed = replayed
		}
	} else {
		apiErr.Message = http.StatusText(resp.StatusCode)
	}
	apiErr.kind = classify(method, resp.StatusCode, apiErr.Type)
	return replayed, apiErr
}

// checkKey validates an idempotency key as the provider would (1–255
// printable ASCII characters), so a bad key fails before anything is sent.
func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLength {
		return fmt.Errorf("%w: idempotency key must have 1 to %d characters", ErrInvalidRequest, MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("%w: idempotency key must be printable ASCII", ErrInvalidRequest)
		}
	}
	return nil
}

// redact removes token from the message of an *APIError in err's chain.
func redact(err error, token string) error {
	if err == nil || token == "" {
		return err
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) && strings.Contains(apiErr.Message, token) {
		apiErr.Message = strings.ReplaceAll(apiErr.Message, token, "[redacted]")
	}
	return err
}

// firstByKey returns the first object that list finds for idempotency key
// key (a list filtered by idempotency_key holds at most one); ok is false
// when it finds none. An invalid key is an error wrapping ErrInvalidRequest.
func firstByKey[T any](ctx context.Context, key string, list func(context.Context, url.Values) ([]T, error)) (v T, ok bool, err error) {
	if err := checkKey(key); err != nil {
		return v, false, err
	}
	found, err := list(ctx, url.Values{"idempotency_key": {key}})
	if err != nil || len(found) == 0 {
		return v, false, err
	}
	return found[0], true, nil
}
