// Package metrics holds the service's Prometheus metrics: the counters the
// use cases and the HTTP adapter increment (Metrics) and the gauges read
// from the databases at scrape time (StateCollector; LagCollector for the
// projectors' and the relay's lag). Metric names and
// labels are part of the service's operational contract and do not change.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/projections"
)

// Metrics are the service's Prometheus counters, in a registry of their own
// with the Go runtime and process collectors. It implements
// commands.Metrics. Create it with New; safe for concurrent use.
type Metrics struct {
	reg                  *prometheus.Registry
	fingerprintConflicts *prometheus.CounterVec
	replays              *prometheus.CounterVec
	inUse                *prometheus.CounterVec
	contention           prometheus.Counter
	redundantEffects     prometheus.Counter
	reconciliations      *prometheus.CounterVec
	recovered            *prometheus.CounterVec
	rateLimited          prometheus.Counter
	unknownAppends       *prometheus.CounterVec
	httpRequests         *prometheus.CounterVec
	httpDuration         *prometheus.HistogramVec
	clockSkew            prometheus.Gauge
	intents              *prometheus.CounterVec
	refusals             *prometheus.CounterVec
	webhooks             *prometheus.CounterVec
	erasures             *prometheus.CounterVec
	providerCalls        *prometheus.CounterVec
	providerDuration     *prometheus.HistogramVec
}

// Operations are the values of the operation label: the idempotent
// operations of the API ("METHOD route-template", commands.Op*).
var Operations = []string{commands.OpScheduleShow, commands.OpReserveSeats, commands.OpPlaceOrder, commands.OpCancelOrder}

// ReconciliationResults are the values of the result label of
// booking_payment_reconciliations_total that the commands layer reports
// ("found_" followed by a payment's outcome, then the others); a test
// reads them out of the commands source so that none is left out.
var ReconciliationResults = []string{
	"found_" + domain.OutcomeSucceeded, "found_" + domain.OutcomeFailed, "found_" + domain.OutcomeRequiresAction,
	"found_" + domain.OutcomeUnknown, "not_found", "list_failed", "new_attempt",
	"deadline_failed", "lease_renewed", "lease_taken_over", "lease_fenced", "foreign_payment", "provider_in_use",
	"idempotency_error", "provider_refused", "provider_unauthorized", "needs_review",
	"action_abandoned", "payment_cancelled", "webhook_duplicate",
	"refund_pending", "refund_recorded", "refund_refused",
}

// RecoveredSteps are the values of the step label of
// booking_recovered_steps_total.
var RecoveredSteps = []string{"intent", "order_claim"}

// UnknownAppendResults are the values of the result label of
// booking_append_unknown_outcomes_total.
var UnknownAppendResults = []string{"resolved", "not_committed", "unresolved"}

// IntentResults are the values of the result label of
// booking_intents_total.
var IntentResults = []string{commands.IntentCreated, commands.IntentReplayed, commands.IntentRefused, commands.IntentInUse,
	commands.IntentWaited}

// RefusalCodes are the values of the code label of
// booking_intent_refusals_total: 422 idempotency-key-reused and the codes of
// every definitive refusal a use case records on an intent. Not
// invalid-request or forbidden: those are refused before an intent is
// recorded, so they are never intents' refusals, and a series that cannot
// move would read as "none". A code outside the list still counts, from
// its first refusal on.
var RefusalCodes = []string{domain.ErrKeyReused.Code,
	domain.ErrShowNotFound.Code, domain.ErrShowExists.Code, domain.ErrShowStarted.Code, domain.ErrSoldOut.Code,
	domain.ErrReservationNotFound.Code, domain.ErrReservationAlreadyOrdered.Code, domain.ErrReservationExpired.Code,
	domain.ErrReservationReleased.Code, domain.ErrOrderNotFound.Code, domain.ErrNotCancellable.Code}

// WebhookResults are the values of the result label of
// booking_webhooks_total (httpapi.WebhookResults).
var WebhookResults = httpapi.WebhookResults

// ErasureResults are the values of the result label of
// booking_erasures_total.
var ErasureResults = []string{commands.ErasureRecorded, commands.ErasureNoOrder}

// ProviderOperations and ProviderResults are the values of the operation
// and result labels of booking_provider_calls_total
// (commands.ProviderOperations, commands.ProviderResults).
var (
	ProviderOperations = commands.ProviderOperations
	ProviderResults    = commands.ProviderResults
)

// New returns the service's metrics with booking_build_info{version,
// goversion} for version (what booking --version prints), every counter
// registered at zero, and each labelled counter at zero for every value of
// its fixed label set (Operations, ReconciliationResults, RecoveredSteps,
// UnknownAppendResults, IntentResults per operation, RefusalCodes,
// WebhookResults, ErasureResults, ProviderResults per ProviderOperations),
// so that rate() and increase() see the
// first event.
// The HTTP RED metrics (ObserveHTTP) have an open label set (the status
// code) and appear with their first request.
func New(version string) *Metrics {
	m := &Metrics{
		reg:                  prometheus.NewRegistry(),
		fingerprintConflicts: counterVec("booking_idempotency_fingerprint_conflicts_total", "operation", "Repeats refused with 422 because the idempotency key was used with a different request."),
		replays:              counterVec("booking_idempotency_replays_total", "operation", "Repeats answered from an existing intent."),
		inUse:                counterVec("booking_idempotency_in_use_total", "operation", "Repeats answered 409 idempotency-key-in-use."),
		contention:           counter("booking_show_contention_total", "Requests answered 503 contention after bounded retries on a show stream."),
		redundantEffects:     counter("booking_redundant_effects_total", "Charges refunded as redundant effects."),
		reconciliations:      counterVec("booking_payment_reconciliations_total", "result", "Payment reconciliations by result."),
		recovered:            counterVec("booking_recovered_steps_total", "step", "Follow-up or intent steps finished by a background job."),
		rateLimited:          counter("booking_retry_budget_exceeded_total", "Requests answered 429 because the actor exceeded its retry budget."),
		unknownAppends:       counterVec("booking_append_unknown_outcomes_total", "result", "Appends whose answer was lost, repeated to learn the outcome, by result (resolved, not_committed, unresolved)."),
		clockSkew: prometheus.NewGauge(prometheus.GaugeOpts{Name: "booking_event_store_clock_skew_seconds",
			Help: "The event store's clock minus the service's (the database clock that decides leases and expiry), measured on one of this process's own appends at most every 5 s: its stored created/recorded_at against its occurred_at. About 0 on PostgreSQL."}),
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "booking_intents_total",
			Help: "State-changing requests by operation and what they did with their intent: created, replayed, refused (422 key reused or a refusal recorded), in_use (409), waited (a repeat waited for the first request)."},
			[]string{"operation", "result"}),
		refusals: counterVec("booking_intent_refusals_total", "code", "Intents refused, by the refusal's stable code (idempotency-key-reused, sold-out, …)."),
		webhooks: counterVec("booking_webhooks_total", "result", "Provider notifications by result: accepted (a new fact), duplicate (nothing new), ignored, bad_signature (header or signature refused, before or after the body), invalid (not an event, or over 64 KiB), unknown_order, failed (over the webhook route's budget, a dependency down, a body that did not arrive)."),
		erasures: counterVec("booking_erasures_total", "result", "Deleted order keys whose erasure was recorded: recorded (PaymentSecretsShredded in the order's stream), no_order (the key was held for an order that never existed)."),
		providerCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "booking_provider_calls_total",
			Help: "Calls of the payment provider that returned, by operation (create_payment, get_payment, …) and result (ok, declined, outcome_unknown, …)."},
			[]string{"operation", "result"}),
		providerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "booking_provider_call_duration_seconds",
			Help:    "Time from a provider call's start to its answer (or its failure), by operation.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"operation"}),
	}
	m.httpRequests, m.httpDuration = newHTTPMetrics()
	m.reg.MustRegister(m.fingerprintConflicts, m.replays, m.inUse, m.contention, m.redundantEffects,
		m.reconciliations, m.recovered, m.rateLimited, m.unknownAppends, m.httpRequests, m.httpDuration, m.clockSkew,
		m.intents, m.refusals, m.webhooks, m.erasures, m.providerCalls, m.providerDuration,
		newBuildInfo(version),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, op := range Operations {
		m.fingerprintConflicts.WithLabelValues(op)
		m.replays.WithLabelValues(op)
		m.inUse.WithLabelValues(op)
		for _, r := range IntentResults {
			m.intents.WithLabelValues(op, r)
		}
	}
	for _, c := range RefusalCodes {
		m.refusals.WithLabelValues(c)
	}
	for _, r := range WebhookResults {
		m.webhooks.WithLabelValues(r)
	}
	for _, r := range ErasureResults {
		m.erasures.WithLabelValues(r)
	}
	for _, op := range ProviderOperations {
		for _, r := range ProviderResults {
			m.providerCalls.WithLabelValues(op, r)
		}
		m.providerDuration.WithLabelValues(op)
	}
	for _, r := range ReconciliationResults {
		m.reconciliations.WithLabelValues(r)
	}
	for _, s := range RecoveredSteps {
		m.recovered.WithLabelValues(s)
	}
	for _, r := range UnknownAppendResults {
		m.unknownAppends.WithLabelValues(r)
	}
	for _, r := range WebhookResults {
		m.webhooks.WithLabelValues(r)
	}
	return m
}

// counter returns the counter name (a booking_…_total name) with help.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// counterVec returns the counter name (a booking_…_total name) with help,
// partitioned by the one label.
func counterVec(name, label, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

// Handler returns the Prometheus exposition handler of the registry (text
// or protobuf format, by the scrape's Accept header).
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// MustRegister adds collectors (such as a StateCollector) to the registry;
// it panics if one collides with a metric already registered.
func (m *Metrics) MustRegister(cs ...prometheus.Collector) { m.reg.MustRegister(cs...) }

// FingerprintConflict counts a repeat of operation op refused with 422
// (booking_idempotency_fingerprint_conflicts_total{operation}).
func (m *Metrics) FingerprintConflict(op string) { m.fingerprintConflicts.WithLabelValues(op).Inc() }

// Replay counts a repeat of op answered from its intent
// (booking_idempotency_replays_total{operation}).
func (m *Metrics) Replay(op string) { m.replays.WithLabelValues(op).Inc() }

// InUse counts a repeat of op answered 409 idempotency-key-in-use
// (booking_idempotency_in_use_total{operation}).
func (m *Metrics) InUse(op string) { m.inUse.WithLabelValues(op).Inc() }

// Contention counts a request answered 503 after bounded retries on a show
// stream (booking_show_contention_total).
func (m *Metrics) Contention() { m.contention.Inc() }

// RedundantEffect counts a charge refunded as a redundant effect
// (booking_redundant_effects_total).
func (m *Metrics) RedundantEffect() { m.redundantEffects.Inc() }

// Reconciliation counts a payment reconciliation by result
// (booking_payment_reconciliations_total{result}).
func (m *Metrics) Reconciliation(result string) { m.reconciliations.WithLabelValues(result).Inc() }

// Recovered counts a follow-up or intent step finished by a background job
// (booking_recovered_steps_total{step}).
func (m *Metrics) Recovered(step string) { m.recovered.WithLabelValues(step).Inc() }

// UnknownAppend counts an append whose answer was lost, by result
// (booking_append_unknown_outcomes_total{result}).
func (m *Metrics) UnknownAppend(result string) { m.unknownAppends.WithLabelValues(result).Inc() }

// Intent counts a request's intent by operation and result
// (booking_intents_total{operation,result}); a refusal also counts by its
// code (booking_intent_refusals_total{code}).
func (m *Metrics) Intent(op, result, code string) {
	m.intents.WithLabelValues(op, result).Inc()
	if result == commands.IntentRefused {
		m.refusals.WithLabelValues(code).Inc()
	}
}

// Webhook counts a provider notification by result
// (booking_webhooks_total{result}).
func (m *Metrics) Webhook(result string) { m.webhooks.WithLabelValues(result).Inc() }

// Erasure counts a recorded erasure by result
// (booking_erasures_total{result}).
func (m *Metrics) Erasure(result string) { m.erasures.WithLabelValues(result).Inc() }

// ProviderCall counts a provider call by operation and result
// (booking_provider_calls_total{operation,result}) and its duration
// (booking_provider_call_duration_seconds{operation}).
func (m *Metrics) ProviderCall(op, result string, elapsed time.Duration) {
	m.providerCalls.WithLabelValues(op, result).Inc()
	m.providerDuration.WithLabelValues(op).Observe(elapsed.Seconds())
}

// ClockSkew sets booking_event_store_clock_skew_seconds: the event store's
// clock minus the service's, in seconds (commands.Handler measures it).
func (m *Metrics) ClockSkew(seconds float64) { m.clockSkew.Set(seconds) }

// RateLimited counts a request answered 429 because its actor exceeded its
// retry budget (booking_retry_budget_exceeded_total).
func (m *Metrics) RateLimited() { m.rateLimited.Inc() }

// Clock reads the database clock (pgcoord.Clock).
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// HorizonLagger reports how far the log's readable horizon trails its
// newest events (pgstore.Store.HorizonLag).
type HorizonLagger interface {
	HorizonLag(ctx context.Context) (pgstore.Lag, error)
}

// ReadModels are the read-model queries the gauges come from
// (projections.Reader).
type ReadModels interface {
	PendingIntents(ctx context.Context, limit int) ([]projections.PendingIntent, eventstore.Position, error)
	UnknownOutcomes(ctx context.Context, limit int) ([]projections.UnknownOutcome, eventstore.Position, error)
	RefundBacklog(ctx context.Context) (projections.RefundBacklog, eventstore.Position, error)
}

// StateCollector is a prometheus.Collector that reports, at scrape time,
// what only the databases know: the log's horizon lag, pending intents and their
// age, intents unfinished past half their retention (alert on > 0), unknown
// payment outcomes with the age of the oldest, and the refund backlog:
// refunds still being sent with the age of the oldest, refunds the provider
// refused (it does not know the charge) and orders in needs_review. Ages
// are measured by the database clock. Each scrape runs a few indexed
// queries with a 2 s budget; a failed query omits its metrics. Create it
// with NewStateCollector; safe for concurrent scrapes.
type StateCollector struct {
	lag       HorizonLagger
	reader    ReadModels
	clock     Clock
	retention time.Duration
	log       *slog.Logger

	lagEvents, lagAge, pending, pendingAge, pastHalf, unknown, unknownAge *prometheus.Desc
	refundsPending, refundAge, refundsInReview, needsReview               *prometheus.Desc
}

// stateScan bounds how many pending intents or unknown outcomes one scrape reads.
const stateScan = 1000

// NewStateCollector returns the collector of the state gauges: the horizon
// lag from lag (nil: omitted, for a backend without one), the intents,
// unknown outcomes and refund backlog from reader, ages by clock, and
// "past half" measured against the intent retention.
func NewStateCollector(lag HorizonLagger, reader ReadModels, clock Clock, retention time.Duration, log *slog.Logger) *StateCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &StateCollector{lag: lag, reader: reader, clock: clock, retention: retention, log: log,
		lagEvents:  d("booking_log_horizon_lag_events", "Committed events the log cannot hand out yet because an older transaction is still open."),
		lagAge:     d("booking_log_horizon_lag_seconds", "Age of the oldest open transaction holding back the log's readable horizon."),
		pending:    d("booking_intents_pending", "Intents without a final outcome (capped at 1000 per scrape)."),
		pendingAge: d("booking_intent_oldest_pending_age_seconds", "Age of the oldest intent without a final outcome."),
		pastHalf:   d("booking_intents_unfinished_past_half_retention", "Intents still unfinished at half their retention: alert when above 0."),
		unknown:    d("booking_payment_unknown_outcomes", "Orders whose last payment attempt has an unknown outcome (capped at 1000)."),
		unknownAge: d("booking_payment_oldest_unknown_outcome_age_seconds", "Age of the oldest unknown payment outcome."),
		refundsPending: d("booking_refunds_pending",
			"Refunds requested and not yet succeeded that are still being sent (refused ones count in booking_refunds_in_review)."),
		refundAge: d("booking_refund_oldest_pending_age_seconds", "Age of the oldest pending refund's request, by the database clock (0 when none)."),
		refundsInReview: d("booking_refunds_in_review",
			"Refunds the provider refused because it does not know the charge; not retried, their orders are in needs_review."),
		needsReview: d("booking_orders_needs_review", "Orders in needs_review (contradictory facts): terminal until an operator acts."),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lagEvents, c.lagAge, c.pending, c.pendingAge, c.pastHalf, c.unknown, c.unknownAge,
		c.refundsPending, c.refundAge, c.refundsInReview, c.needsReview} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it runs the queries (2 s budget
// in all) and sends the gauges whose query succeeded.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	if c.lag != nil {
		if lag, err := c.lag.HorizonLag(ctx); err == nil {
			gauge(c.lagEvents, float64(lag.Events))
			gauge(c.lagAge, lag.Age.Seconds())
		} else {
			c.log.Debug("metrics: horizon lag", "err", err)
		}
	}
	now, err := c.clock.Now(ctx)
	if err != nil {
		return
	}
	if pend, _, err := c.reader.PendingIntents(ctx, stateScan); err == nil {
		gauge(c.pending, float64(len(pend)))
		var oldest time.Duration
		past := 0
		for _, p := range pend {
			age := now.Sub(p.RecordedAt)
			oldest = max(oldest, age)
			if age > c.retention/2 {
				past++
			}
		}
		gauge(c.pendingAge, oldest.Seconds())
		gauge(c.pastHalf, float64(past))
	}
	if unk, _, err := c.reader.UnknownOutcomes(ctx, stateScan); err == nil {
		gauge(c.unknown, float64(len(unk)))
		var oldest time.Duration
		for _, u := range unk {
			oldest = max(oldest, now.Sub(u.Since))
		}
		gauge(c.unknownAge, oldest.Seconds())
	}
	if b, _, err := c.reader.RefundBacklog(ctx); err == nil {
		gauge(c.refundsPending, float64(b.Pending))
		var age time.Duration
		if !b.OldestPending.IsZero() {
			age = max(now.Sub(b.OldestPending), 0)
		}
		gauge(c.refundAge, age.Seconds())
		gauge(c.refundsInReview, float64(b.InReview))
		gauge(c.needsReview, float64(b.NeedsReview))
	} else {
		c.log.Debug("metrics: refund backlog", "err", err)
	}
}
