package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the service's Prometheus metrics (DESIGN §1.7). It implements
// commands.Metrics. Safe for concurrent use.
type metrics struct {
	reg                  *prometheus.Registry
	fingerprintConflicts *prometheus.CounterVec
	replays              *prometheus.CounterVec
	inUse                *prometheus.CounterVec
	contention           prometheus.Counter
	redundantEffects     prometheus.Counter
	reconciliations      *prometheus.CounterVec
	recovered            *prometheus.CounterVec
	rateLimited          prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		fingerprintConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "booking_idempotency_fingerprint_conflicts_total",
			Help: "Repeats refused with 422 because the idempotency key was used with a different request."}, []string{"operation"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "booking_idempotency_replays_total",
			Help: "Repeats answered from an existing intent."}, []string{"operation"}),
		inUse: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "booking_idempotency_in_use_total",
			Help: "Repeats answered 409 idempotency-key-in-use."}, []string{"operation"}),
		contention: prometheus.NewCounter(prometheus.CounterOpts{Name: "booking_show_contention_total",
			Help: "Requests answered 503 contention after bounded retries on a show stream."}),
		redundantEffects: prometheus.NewCounter(prometheus.CounterOpts{Name: "booking_redundant_effects_total",
			Help: "Charges refunded as redundant effects."}),
		reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "booking_payment_reconciliations_total",
			Help: "Payment reconciliations by result."}, []string{"result"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "booking_recovered_steps_total",
			Help: "Follow-up or intent steps finished by a background job."}, []string{"step"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{Name: "booking_retry_budget_exceeded_total",
			Help: "Requests answered 429 because the actor exceeded its retry budget."}),
	}
	m.reg.MustRegister(m.fingerprintConflicts, m.replays, m.inUse, m.contention, m.redundantEffects,
		m.reconciliations, m.recovered, m.rateLimited,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

func (m *metrics) FingerprintConflict(op string) { m.fingerprintConflicts.WithLabelValues(op).Inc() }
func (m *metrics) Replay(op string)              { m.replays.WithLabelValues(op).Inc() }
func (m *metrics) InUse(op string)               { m.inUse.WithLabelValues(op).Inc() }
func (m *metrics) Contention()                   { m.contention.Inc() }
func (m *metrics) RedundantEffect()              { m.redundantEffects.Inc() }
func (m *metrics) Reconciliation(result string)  { m.reconciliations.WithLabelValues(result).Inc() }
func (m *metrics) Recovered(step string)         { m.recovered.WithLabelValues(step).Inc() }
