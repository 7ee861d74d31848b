package adaptive

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// schedLatencies is the Go runtime's histogram of how long goroutines
// waited, ready to run, before they ran.
const schedLatencies = "/sched/latencies:seconds"

// SchedDelay measures this process's own scheduling delay: how long its
// goroutines waited, ready to run, for a CPU. A proxy that times its
// upstream's round trips counts that wait in every one of them (the
// goroutine that reads a response waits for a CPU before it can), although
// nothing queued in the service: when the proxy is short of CPU (it shares
// a core with its service, or serves more clients than its CPU can), the
// round trips rise with its own load. Config.SelfDelay takes it out of them.
//
// It reads runtime/metrics, which sees both a busy Go scheduler and the
// operating system withholding the CPU (a cgroup's quota, a service on the
// same core): both keep ready goroutines waiting. It is safe for
// concurrent use; a read costs about 0.3 us and no allocation (once per
// sample window, by the request that closes it).
type SchedDelay struct {
	mu     sync.Mutex
	sample [1]metrics.Sample
	last   []uint64 // the histogram's counts at the previous read
}

// NewSchedDelay returns a SchedDelay whose first Mean covers the time from
// now.
func NewSchedDelay() *SchedDelay {
	s := &SchedDelay{sample: [1]metrics.Sample{{Name: schedLatencies}}}
	s.Mean()
	return s
}

// Mean returns the mean scheduling delay of the goroutines that ran since
// the previous call (0 if none did, or the runtime does not report it).
func (s *SchedDelay) Mean() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	metrics.Read(s.sample[:])
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := s.sample[0].Value.Float64Histogram()
	if len(s.last) != len(h.Counts) {
		s.last = make([]uint64, len(h.Counts))
		copy(s.last, h.Counts)
		return 0
	}
	return time.Duration(meanDelta(h.Counts, h.Buckets, s.last) * 1e9)
}

// meanDelta returns the mean, in the buckets' unit, of what counts added
// over last (each bucket at its midpoint; an open-ended bucket at its
// finite bound), and stores counts into last.
func meanDelta(counts []uint64, bounds []float64, last []uint64) float64 {
	var n, sum float64
	for i, c := range counts {
		d := c - last[i]
		last[i] = c
		if d == 0 {
			continue
		}
		lo, hi := bounds[i], bounds[i+1]
		mid := (lo + hi) / 2
		switch {
		case math.IsInf(lo, -1):
			mid = math.Max(hi, 0)
		case math.IsInf(hi, 1):
			mid = lo
		}
		n += float64(d)
		sum += float64(d) * mid
	}
	if n == 0 {
		return 0
	}
	return sum / n
}
