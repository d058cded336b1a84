package commands

import (
	"context"
	"errors"
	"time"

	"github.com/retrysafe/booking/provider"
)

// Provider operations: the calls of the Payments port that reach the
// provider (ParseWebhook and CheckWebhookHeader call no one), as Metrics.ProviderCall and the
// provider spans name them.
const (
	ProviderCreatePayment  = "create_payment"
	ProviderGetPayment     = "get_payment"
	ProviderListPayments   = "list_payments"
	ProviderSearchPayments = "search_payments"
	ProviderCancelPayment  = "cancel_payment"
	ProviderRefund         = "refund"
	ProviderListRefunds    = "list_refunds"
)

// ProviderOperations lists every provider operation.
var ProviderOperations = []string{ProviderCreatePayment, ProviderGetPayment, ProviderListPayments, ProviderSearchPayments,
	ProviderCancelPayment, ProviderRefund, ProviderListRefunds}

// Provider call results (ProviderResult): what a call came to, by the
// sentinel of package provider its error wraps.
const (
	ProviderOK               = "ok"
	ProviderDeclined         = "declined"          // provider.ErrDeclined
	ProviderOutcomeUnknown   = "outcome_unknown"   // provider.ErrOutcomeUnknown, or an error wrapping no sentinel
	ProviderKeyInUse         = "key_in_use"        // provider.ErrKeyInUse
	ProviderIdempotencyError = "idempotency_error" // provider.ErrIdempotency
	ProviderUnavailable      = "unavailable"       // provider.ErrUnavailable
	ProviderInvalidRequest   = "invalid_request"   // provider.ErrInvalidRequest
	ProviderNotFound         = "not_found"         // provider.ErrNotFound
	ProviderUnauthorized     = "unauthorized"      // provider.ErrUnauthorized
)

// ProviderResults lists every provider call result.
var ProviderResults = []string{ProviderOK, ProviderDeclined, ProviderOutcomeUnknown, ProviderKeyInUse, ProviderIdempotencyError,
	ProviderUnavailable, ProviderInvalidRequest, ProviderNotFound, ProviderUnauthorized}

// ProviderResult classifies the error of a provider call by the sentinel
// it wraps (the port's contract, see Payments): nil is ProviderOK;
// ErrUnauthorized is tested before ErrUnavailable, which its errors also
// wrap. An error wrapping no sentinel (which the port does not return) is
// ProviderOutcomeUnknown, the answer that claims nothing.
func ProviderResult(err error) string {
	switch {
	case err == nil:
		return ProviderOK
	case errors.Is(err, provider.ErrUnauthorized):
		return ProviderUnauthorized
	case errors.Is(err, provider.ErrDeclined):
		return ProviderDeclined
	case errors.Is(err, provider.ErrOutcomeUnknown):
		return ProviderOutcomeUnknown
	case errors.Is(err, provider.ErrKeyInUse):
		return ProviderKeyInUse
	case errors.Is(err, provider.ErrIdempotency):
		return ProviderIdempotencyError
	case errors.Is(err, provider.ErrUnavailable):
		return ProviderUnavailable
	case errors.Is(err, provider.ErrInvalidRequest):
		return ProviderInvalidRequest
	case errors.Is(err, provider.ErrNotFound):
		return ProviderNotFound
	}
	return ProviderOutcomeUnknown
}

// observedPayments is a Payments that reports every call that reaches the
// provider to Metrics.ProviderCall: its operation, result and duration on
// the host's monotonic clock. New installs it around every Handler's port,
// so no use case counts its own calls.
type observedPayments struct {
	next    Payments
	metrics Metrics
}

func (p observedPayments) observe(op string, start time.Time, err error) {
	p.metrics.ProviderCall(op, ProviderResult(err), time.Since(start))
}

func (p observedPayments) CreatePayment(ctx context.Context, key string, req provider.PaymentRequest) (provider.Payment, error) {
	start := time.Now()
	pay, err := p.next.CreatePayment(ctx, key, req)
	p.observe(ProviderCreatePayment, start, err)
	return pay, err
}

func (p observedPayments) GetPayment(ctx context.Context, id string) (provider.Payment, error) {
	start := time.Now()
	pay, err := p.next.GetPayment(ctx, id)
	p.observe(ProviderGetPayment, start, err)
	return pay, err
}

func (p observedPayments) ListPayments(ctx context.Context, from, to time.Time) ([]provider.Payment, error) {
	start := time.Now()
	pays, err := p.next.ListPayments(ctx, from, to)
	p.observe(ProviderListPayments, start, err)
	return pays, err
}

func (p observedPayments) SearchPayments(ctx context.Context, orderID string, attempt int) ([]provider.Payment, error) {
	start := time.Now()
	pays, err := p.next.SearchPayments(ctx, orderID, attempt)
	p.observe(ProviderSearchPayments, start, err)
	return pays, err
}

func (p observedPayments) CancelPayment(ctx context.Context, key, id string) (provider.Payment, error) {
	start := time.Now()
	pay, err := p.next.CancelPayment(ctx, key, id)
	p.observe(ProviderCancelPayment, start, err)
	return pay, err
}

func (p observedPayments) Refund(ctx context.Context, key string, req provider.PaymentRefundRequest) (provider.PaymentRefund, error) {
	start := time.Now()
	ref, err := p.next.Refund(ctx, key, req)
	p.observe(ProviderRefund, start, err)
	return ref, err
}

func (p observedPayments) ListRefunds(ctx context.Context, paymentID string) ([]provider.PaymentRefund, error) {
	start := time.Now()
	refs, err := p.next.ListRefunds(ctx, paymentID)
	p.observe(ProviderListRefunds, start, err)
	return refs, err
}

func (p observedPayments) ParseWebhook(body []byte, signatureHeader string, now time.Time) (provider.WebhookEvent, error) {
	return p.next.ParseWebhook(body, signatureHeader, now)
}

func (p observedPayments) CheckWebhookHeader(signatureHeader string, now time.Time) error {
	return p.next.CheckWebhookHeader(signatureHeader, now)
}
