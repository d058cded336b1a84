package metrics

import (
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMethods are the method label values; any other method is "OTHER", so
// a client cannot grow the label set.
var httpMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true}

// newHTTPMetrics returns http_requests_total and http_request_duration_seconds,
// both labelled by route, method and code (the RED metrics of the HTTP API).
func newHTTPMetrics() (*prometheus.CounterVec, *prometheus.HistogramVec) {
	labels := []string{"route", "method", "code"}
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "http_requests_total",
			Help: "HTTP requests answered, by route template, method and status code."}, labels),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "http_request_duration_seconds",
			Help: "Time from a request's arrival to its complete answer, by route template, method and status code " +
				"(POST /v1/orders includes the bounded payment wait).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15}}, labels)
}

// ObserveHTTP counts one answered request in http_requests_total and its
// duration in http_request_duration_seconds, by route (the route template,
// such as "/v1/orders/{id}", never the path), method (GET, POST, …; "OTHER"
// for any other, so clients cannot grow the label set) and code (the status
// answered). The HTTP adapter calls it once per request
// (httpapi.Config.ObserveRequest). Safe for concurrent use.
func (m *Metrics) ObserveHTTP(route, method string, code int, elapsed time.Duration) {
	if !httpMethods[method] {
		method = "OTHER"
	}
	l := prometheus.Labels{"route": route, "method": method, "code": strconv.Itoa(code)}
	m.httpRequests.With(l).Inc()
	m.httpDuration.With(l).Observe(elapsed.Seconds())
}

// newBuildInfo returns booking_build_info{version,goversion}, always 1.
func newBuildInfo(version string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "booking_build_info",
		Help: "Always 1; its labels are the version of booking (booking --version) and of Go that built it."},
		[]string{"version", "goversion"})
	g.WithLabelValues(version, runtime.Version()).Set(1)
	return g
}

// PoolStater is a pgx connection pool (*pgxpool.Pool).
type PoolStater interface {
	Stat() *pgxpool.Stat
}

// PoolCollector is a prometheus.Collector of a pgx pool's statistics
// (pgxpool.Stat), read at scrape time: the connections by state and the
// pool's size as gauges, and acquisitions, their total wait, the ones that
// had to wait or were cancelled, and connections made and closed as
// counters. Create it with NewPoolCollector; safe for concurrent scrapes.
type PoolCollector struct {
	pool  PoolStater
	descs []poolDesc
}

// poolDesc is one pool metric: its description, type and value.
type poolDesc struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*pgxpool.Stat) float64
}

// NewPoolCollector returns the collector of pool's statistics, with the
// names pgxpool_*.
func NewPoolCollector(pool PoolStater) *PoolCollector {
	d := func(name, help string, typ prometheus.ValueType, v func(*pgxpool.Stat) float64) poolDesc {
		return poolDesc{prometheus.NewDesc(name, help, nil, nil), typ, v}
	}
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	return &PoolCollector{pool: pool, descs: []poolDesc{
		d("pgxpool_acquired_conns", "Connections currently in use.", g, func(s *pgxpool.Stat) float64 { return float64(s.AcquiredConns()) }),
		d("pgxpool_idle_conns", "Connections idle in the pool.", g, func(s *pgxpool.Stat) float64 { return float64(s.IdleConns()) }),
		d("pgxpool_constructing_conns", "Connections being opened.", g, func(s *pgxpool.Stat) float64 { return float64(s.ConstructingConns()) }),
		d("pgxpool_total_conns", "Connections open or being opened.", g, func(s *pgxpool.Stat) float64 { return float64(s.TotalConns()) }),
		d("pgxpool_max_conns", "The pool's maximum size.", g, func(s *pgxpool.Stat) float64 { return float64(s.MaxConns()) }),
		d("pgxpool_acquires_total", "Connections acquired from the pool.", c, func(s *pgxpool.Stat) float64 { return float64(s.AcquireCount()) }),
		d("pgxpool_acquire_wait_seconds_total", "Total time spent acquiring connections.", c,
			func(s *pgxpool.Stat) float64 { return s.AcquireDuration().Seconds() }),
		d("pgxpool_empty_acquires_total", "Acquisitions that had to wait for a connection (the pool was empty).", c,
			func(s *pgxpool.Stat) float64 { return float64(s.EmptyAcquireCount()) }),
		d("pgxpool_canceled_acquires_total", "Acquisitions cancelled by their context.", c,
			func(s *pgxpool.Stat) float64 { return float64(s.CanceledAcquireCount()) }),
		d("pgxpool_new_conns_total", "Connections opened.", c, func(s *pgxpool.Stat) float64 { return float64(s.NewConnsCount()) }),
		d("pgxpool_max_lifetime_destroys_total", "Connections closed because they reached their maximum lifetime.", c,
			func(s *pgxpool.Stat) float64 { return float64(s.MaxLifetimeDestroyCount()) }),
		d("pgxpool_max_idle_destroys_total", "Connections closed because they were idle too long.", c,
			func(s *pgxpool.Stat) float64 { return float64(s.MaxIdleDestroyCount()) }),
	}}
}

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d.desc
	}
}

// Collect implements prometheus.Collector: one Stat of the pool, every
// metric from it.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	for _, d := range c.descs {
		ch <- prometheus.MustNewConstMetric(d.desc, d.typ, d.value(s))
	}
}
