package clientlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/throttle"
)

// Counter is what a Collector reads: a Transport or a GRPC.
type Counter interface {
	Stats() Stats
}

// Collector exports a Transport's or a GRPC's counts to Prometheus under
// the label client (the service it calls): sluice_client_requests_total,
// sluice_client_throttled_total (refused locally),
// sluice_client_retries_total, sluice_client_retries_refused_total (by the
// budget), and, with th, sluice_client_throttle_probability (the chance the
// next request is refused locally).
func Collector(client string, c Counter, th *throttle.Throttle) prometheus.Collector {
	l := prometheus.Labels{"client": client}
	return &collector{c: c, th: th,
		requests:  prometheus.NewDesc("sluice_client_requests_total", "Requests made through the client (not attempts).", nil, l),
		throttled: prometheus.NewDesc("sluice_client_throttled_total", "Attempts the client refused itself while the service was refusing (adaptive throttling).", nil, l),
		retries:   prometheus.NewDesc("sluice_client_retries_total", "Retries sent within the retry budget.", nil, l),
		refused:   prometheus.NewDesc("sluice_client_retries_refused_total", "Retries the retry budget refused (the answer was returned as it came).", nil, l),
		prob:      prometheus.NewDesc("sluice_client_throttle_probability", "The chance that the client refuses its next request itself.", nil, l),
	}
}

type collector struct {
	c                                           Counter
	th                                          *throttle.Throttle
	requests, throttled, retries, refused, prob *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.throttled
	ch <- c.retries
	ch <- c.refused
	if c.th != nil {
		ch <- c.prob
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.c.Stats()
	for _, m := range []struct {
		d *prometheus.Desc
		v uint64
	}{{c.requests, s.Requests}, {c.throttled, s.Throttled}, {c.retries, s.Retries}, {c.refused, s.BudgetExhausted}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v))
	}
	if c.th != nil {
		ch <- prometheus.MustNewConstMetric(c.prob, prometheus.GaugeValue, c.th.Probability())
	}
}
