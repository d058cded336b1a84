package metrics

import "github.com/prometheus/client_golang/prometheus"

// NewRetryBudgetGauges returns the gauges of this replica's share of the
// per-actor retry budget, which every replica enforces on its own (so an
// actor's budget across N replicas is the sum of their shares):
//
//	booking_retry_budget_rate   requests per second per actor on this replica (BOOKING_RETRY_BUDGET_RATE)
//	booking_retry_budget_burst  burst per actor on this replica (BOOKING_RETRY_BUDGET_BURST)
//
// The refusals are counted in booking_retry_budget_exceeded_total
// (Metrics.RateLimited). sum(booking_retry_budget_rate) across the
// replicas is the rate one actor gets from the whole deployment when a
// proxy spreads its requests over all of them.
func NewRetryBudgetGauges(perSecond float64, burst int) []prometheus.Collector {
	r := prometheus.NewGauge(prometheus.GaugeOpts{Name: "booking_retry_budget_rate",
		Help: "Per-actor retry budget of this replica: sustained POST requests per second (BOOKING_RETRY_BUDGET_RATE)."})
	b := prometheus.NewGauge(prometheus.GaugeOpts{Name: "booking_retry_budget_burst",
		Help: "Per-actor retry budget of this replica: burst of POST requests (BOOKING_RETRY_BUDGET_BURST)."})
	r.Set(perSecond)
	b.Set(float64(burst))
	return []prometheus.Collector{r, b}
}
