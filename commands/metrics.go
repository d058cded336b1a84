package commands

import "time"

// Metrics receives the handlers' observations (the booking_idempotency_* and
// other counters docs/operations.md lists under Metrics). cmd/booking
// implements it with Prometheus; the zero implementation discards them.
type Metrics interface {
	// FingerprintConflict counts a repeat refused with 422, by operation.
	FingerprintConflict(operation string)
	// Replay counts a repeat answered from an existing intent, by operation.
	Replay(operation string)
	// InUse counts a repeat answered 409 idempotency-key-in-use, by operation.
	InUse(operation string)
	// Contention counts a 503 contention answer on a show stream.
	Contention()
	// RedundantEffect counts a charge refunded as a redundant effect.
	RedundantEffect()
	// Reconciliation counts a reconciliation of an attempt, by result.
	Reconciliation(result string)
	// Recovered counts a follow-up or intent step finished by a background job, by step.
	Recovered(step string)
	// UnknownAppend counts an append whose answer was lost and that was
	// repeated to learn its outcome, by result: "resolved" (the events are
	// in the stream), "not_committed" (the stream moved on without them),
	// "unresolved" (still unknown; the request answered 503).
	UnknownAppend(result string)
	// Intent counts what a request did with its intent, by operation and
	// result (IntentCreated, …); code is a refusal's stable code
	// ("idempotency-key-reused", "sold-out", …), "" for other results.
	Intent(operation, result, code string)
	// Erasure counts a deleted order key whose erasure was recorded, by
	// result: ErasureRecorded or ErasureNoOrder.
	Erasure(result string)
	// ProviderCall reports a call of the payment provider that returned:
	// its operation (ProviderOperations), result (ProviderResults) and
	// duration, measured around the Payments port (observedPayments).
	ProviderCall(operation, result string, elapsed time.Duration)
	// ClockSkew reports the event store's clock minus the service's, in
	// seconds, measured on one of the process's own appends (see skew.go).
	ClockSkew(seconds float64)
}

// Intent results (Metrics.Intent): what a state-changing request did with
// its intent. A refusal carries its code.
const (
	IntentCreated  = "created"  // a new intent was recorded
	IntentReplayed = "replayed" // a repeat was answered from its intent (a recorded refusal included)
	IntentRefused  = "refused"  // refused: 422 key reused, or a definitive refusal recorded
	IntentInUse    = "in_use"   // a repeat answered 409 idempotency-key-in-use
	IntentWaited   = "waited"   // a repeat waited for the first request still before its commit point
)

type nopMetrics struct{}

func (nopMetrics) FingerprintConflict(string)                 {}
func (nopMetrics) Replay(string)                              {}
func (nopMetrics) InUse(string)                               {}
func (nopMetrics) Contention()                                {}
func (nopMetrics) RedundantEffect()                           {}
func (nopMetrics) Reconciliation(string)                      {}
func (nopMetrics) Recovered(string)                           {}
func (nopMetrics) UnknownAppend(string)                       {}
func (nopMetrics) ClockSkew(float64)                          {}
func (nopMetrics) Erasure(string)                             {}
func (nopMetrics) Intent(string, string, string)              {}
func (nopMetrics) ProviderCall(string, string, time.Duration) {}
