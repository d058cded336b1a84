package metrics

import "github.com/prometheus/client_golang/prometheus"

// Conns is what a listener with a bound on open connections reports
// (connlimit.Listener).
type Conns interface {
	// Max returns the bound on open connections.
	Max() int
	// Open returns the connections open now.
	Open() int
	// Refused returns the connections closed on arrival at the bound.
	Refused() int64
}

// ListenerCollector exposes one listener's connections, read at scrape
// time, with the label listener (api or admin):
//
//	booking_http_connections_open{listener}           gauge
//	booking_http_connections_max{listener}            gauge (the configured bound)
//	booking_http_connections_refused_total{listener}  counter
//
// Safe for concurrent use.
type ListenerCollector struct {
	c                    Conns
	open, limit, refused *prometheus.Desc
}

// NewListenerCollector returns the collector of listener name's connections c.
func NewListenerCollector(name string, c Conns) *ListenerCollector {
	l := prometheus.Labels{"listener": name}
	return &ListenerCollector{c: c,
		open:    prometheus.NewDesc("booking_http_connections_open", "Connections the listener holds open now.", nil, l),
		limit:   prometheus.NewDesc("booking_http_connections_max", "Most connections the listener keeps open (BOOKING_HTTP_MAX_CONNS for the API); one more is closed as it arrives.", nil, l),
		refused: prometheus.NewDesc("booking_http_connections_refused_total", "Connections closed as they arrived because the listener held its most.", nil, l),
	}
}

// Describe implements prometheus.Collector.
func (l *ListenerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.open
	ch <- l.limit
	ch <- l.refused
}

// Collect implements prometheus.Collector.
func (l *ListenerCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(l.open, prometheus.GaugeValue, float64(l.c.Open()))
	ch <- prometheus.MustNewConstMetric(l.limit, prometheus.GaugeValue, float64(l.c.Max()))
	ch <- prometheus.MustNewConstMetric(l.refused, prometheus.CounterValue, float64(l.c.Refused()))
}
