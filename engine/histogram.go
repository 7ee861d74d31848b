package engine

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// histStripes is how many stripes a latencyHistogram spreads its
// observations over: a power of two, about the cores a sidecar runs on.
const histStripes = 4

// histMaxBounds is the most bucket bounds a latencyHistogram has.
const histMaxBounds = 15

// latencyHistogram is a Prometheus histogram of durations, exported as
// prometheus.NewHistogram's is (same buckets, le inclusive, seconds), whose
// observations land on one of a few stripes at random, each on cache lines
// of its own: two are observed on every request (the store's check, the
// upstream's answer), and client_golang's one set of counters, written by
// every core with a compare-and-swap loop for the sum, made them 9% of the
// ten-rule middleware on two cores (BENCHMARKS.md, session 27).
type latencyHistogram struct {
	desc    *prometheus.Desc
	bounds  []float64 // upper bounds, seconds
	boundNs []int64   // the same, nanoseconds
	stripes [histStripes]histStripe
}

type histStripe struct {
	counts [histMaxBounds + 1]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sumNs  atomic.Int64
	_      [56]byte // to the next stripe's cache line
}

// newLatencyHistogram returns an empty histogram named name with bucket
// upper bounds in seconds (ascending, at most histMaxBounds).
func newLatencyHistogram(name, help string, bounds []float64) *latencyHistogram {
	if len(bounds) > histMaxBounds {
		panic("engine: too many histogram buckets")
	}
	h := &latencyHistogram{desc: prometheus.NewDesc(name, help, nil, nil), bounds: bounds}
	for _, b := range bounds {
		h.boundNs = append(h.boundNs, int64(b*1e9))
	}
	return h
}

// Observe counts one duration.
func (h *latencyHistogram) Observe(d time.Duration) {
	ns, i := int64(d), 0
	for i < len(h.boundNs) && ns > h.boundNs[i] {
		i++
	}
	s := &h.stripes[rand.Uint32()%histStripes]
	s.counts[i].Add(1)
	s.sumNs.Add(ns)
}

// Describe implements prometheus.Collector.
func (h *latencyHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector: the stripes summed. Count is
// the buckets' total, so the two agree even while requests are observed.
func (h *latencyHistogram) Collect(ch chan<- prometheus.Metric) {
	var counts [histMaxBounds + 1]uint64
	var sum int64
	for i := range h.stripes {
		s := &h.stripes[i]
		for j := range len(h.bounds) + 1 {
			counts[j] += s.counts[j].Load()
		}
		sum += s.sumNs.Load()
	}
	buckets := make(map[float64]uint64, len(h.bounds))
	var total uint64
	for j, b := range h.bounds {
		total += counts[j]
		buckets[b] = total
	}
	total += counts[len(h.bounds)]
	ch <- prometheus.MustNewConstHistogram(h.desc, total, float64(sum)/1e9, buckets)
}
