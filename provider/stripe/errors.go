package stripe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"github.com/retrysafe/booking/provider"
	stripego "github.com/stripe/stripe-go/v84"
)

// Response headers of Stripe's API (https://docs.stripe.com/api/idempotent_requests,
// https://docs.stripe.com/api/request_ids).
const (
	headerReplayed  = "Idempotent-Replayed" // "true" on a replayed answer
	headerRequestID = "Request-Id"
)

// exchange records what happened on the wire during one adapter call, so
// that a failure can be classified by whether the request may have reached
// Stripe and what status answered it, whatever stripe-go made of it.
type exchange struct {
	sent atomic.Bool // request headers were written to a connection

	mu     sync.Mutex
	status int         // the last response's status; 0: none arrived
	header http.Header // the last response's headers
}

type exchangeKey struct{}

// track returns ctx carrying a new exchange, which the client trace and
// transport of every request made with ctx fill in.
func track(ctx context.Context) (context.Context, *exchange) {
	x := &exchange{}
	ctx = context.WithValue(ctx, exchangeKey{}, x)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { x.sent.Store(true) }})
	return ctx, x
}

func (x *exchange) record(status int, header http.Header) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.status, x.header = status, header
}

func (x *exchange) response() (int, http.Header) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.status, x.header
}

// transport records each response's status and headers in the request's
// exchange. It also sends every POST as a request the Go transport cannot
// resend: the transport silently resends a request with an Idempotency-Key
// on a reused connection that the server closed before answering
// (net/http's Request.isReplayable), which would be a retry outside the
// caller's recorded ones.
type transport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.GetBody != nil {
		req = req.Clone(req.Context())
		req.GetBody = nil
	}
	x, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if x != nil {
		x.record(0, nil) // a list's earlier page answered, not this request
	}
	resp, err := t.base.RoundTrip(req)
	if x != nil && resp != nil {
		x.record(resp.StatusCode, resp.Header)
	}
	return resp, err
}

// classify returns err, the failure of a method request to path, as an
// error wrapping the provider sentinel that Stripe's rules give it (see the
// package doc). It never includes stripe-go's error text, which quotes
// Stripe's message or body.
func (x *exchange) classify(ctx context.Context, method, path string, err error) error {
	var se *stripego.Error
	if errors.As(err, &se) {
		return fromStripeError(method, path, se)
	}
	status, header := x.response()
	if status >= 400 {
		// An error answer stripe-go could not decode.
		return provider.NewAPIError(provider.APIError{
			Method: method, Path: path, StatusCode: status,
			Message:   http.StatusText(status),
			RequestID: header.Get(headerRequestID),
			Replayed:  header.Get(headerReplayed) == "true",
		})
	}
	kind := provider.ErrUnavailable
	if method == http.MethodPost && (x.sent.Load() || status != 0) {
		kind = provider.ErrOutcomeUnknown
	}
	if status != 0 {
		// A success whose body was cut off or undecodable. stripe-go's
		// decoding error quotes the body, so only a read error (which
		// quotes nothing) or the context's error is kept.
		var netErr net.Error
		switch cerr := ctx.Err(); {
		case cerr != nil:
			return fmt.Errorf("%w: %s %s: unreadable %d answer: %w", kind, method, path, status, cerr)
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr):
			return fmt.Errorf("%w: %s %s: unreadable %d answer: %w", kind, method, path, status, err)
		}
		return fmt.Errorf("%w: %s %s: unreadable %d answer", kind, method, path, status)
	}
	if !x.sent.Load() {
		return fmt.Errorf("%w: %s %s: not sent: %w", kind, method, path, err)
	}
	return fmt.Errorf("%w: %s %s: no answer: %w", kind, method, path, err)
}

// fromStripeError maps an error answer decoded by stripe-go. For a decline
// the declined PaymentIntent becomes the APIError's Payment.
func fromStripeError(method, path string, se *stripego.Error) error {
	var header http.Header
	var raw []byte
	if se.LastResponse != nil {
		header, raw = se.LastResponse.Header, se.LastResponse.RawJSON
	}
	e := provider.NewAPIError(provider.APIError{
		Method:      method,
		Path:        path,
		StatusCode:  se.HTTPStatusCode,
		Type:        string(se.Type),
		Code:        string(se.Code),
		DeclineCode: string(se.DeclineCode),
		Param:       se.Param,
		RequestID:   se.RequestID,
		Replayed:    header.Get(headerReplayed) == "true",
	})
	e.Message = errorMessage(e.DeclineCode, e.Param)
	if errors.Is(e, provider.ErrDeclined) && se.PaymentIntent != nil && se.PaymentIntent.ID != "" {
		p := paymentFrom(se.PaymentIntent, nextActionIn(raw, "error", "payment_intent"), e.Replayed)
		e.Payment = &p
	}
	return e
}

// errorMessage is the text of an error answer: its decline code or the
// parameter it names, never Stripe's message (which can quote a payment
// method id).
func errorMessage(declineCode, param string) string {
	switch {
	case declineCode != "":
		return "decline_code " + declineCode
	case param != "":
		return "param " + param
	}
	return ""
}
