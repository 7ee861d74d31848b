package queue

import (
	"sync/atomic"
	"time"
)

// WaitBuckets are the upper bounds of the wait histogram's buckets.
var WaitBuckets = [...]time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// histogram counts waits into WaitBuckets, lock-free.
type histogram struct {
	counts [len(WaitBuckets) + 1]atomic.Uint64 // the last: above every bound
	sum    atomic.Int64                        // ns
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(WaitBuckets) && d > WaitBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// HistogramSnapshot is a wait distribution: Counts[i] waits were at most
// WaitBuckets[i] (and above the bucket before); the last count is above all.
type HistogramSnapshot struct {
	Counts [len(WaitBuckets) + 1]uint64
	Sum    time.Duration
}

// Total returns the number of observations.
func (s HistogramSnapshot) Total() uint64 {
	var n uint64
	for _, c := range s.Counts {
		n += c
	}
	return n
}

func (h *histogram) snapshot() HistogramSnapshot {
	var s HistogramSnapshot
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}
