package adaptive_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
)

// TestSlowStartWaitsForTheSlowEnd: before a heavy-tailed service (50
// slots, median 60 ms, the slowest tenth 3.5-7x that), a window's answers
// are mostly the fast ones of those admitted since the last doubling: their
// median reads the no-load RTT while the slow ones, still out, are about
// to queue. Slow start doubles once per the window's p90, not once per
// window: doubling every window took the limit to 294 here, and to 150-180
// in 0.3 s through the binary (50 x 100 ms, sigma 1: the service slowed by
// 100 waiting, a second at 60% of its capacity); now 96.
func TestSlowStartWaitsForTheSlowEnd(t *testing.T) {
	const slots = 50
	ms := time.Millisecond
	// Quantiles of a lognormal of sigma 1 around 60 ms, dealt in turn.
	tail := []time.Duration{17 * ms, 26 * ms, 35 * ms, 46 * ms, 60 * ms, 77 * ms, 100 * ms, 140 * ms, 210 * ms, 400 * ms}
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	var out []timed
	peak, dealt := 0, 0
	for now := time.Duration(0); now < 600*ms; now += ms { // 2,000 arrivals a second, 2 a ms
		out, _ = releaseEnded(out, now)
		for range 2 {
			p, ok := l.TryAcquire()
			if !ok {
				continue
			}
			// Past its slots the service queues: every request waits
			// for the ones ahead of it to free a slot.
			rtt := tail[dealt%len(tail)] * time.Duration(slots+max(0, len(out)+1-slots)) / slots
			dealt++
			out = append(out, timed{p, now + rtt})
		}
		peak = max(peak, l.Limit())
		clock.Advance(ms)
	}
	if peak > 5*slots/2 {
		t.Errorf("the limit reached %d in the first 600 ms before %d slots, want at most %d", peak, slots, 5*slots/2)
	}
}

// TestSlowStartNotOnAProbesAnswers: the window that closes just after a
// probe holds answers the probe admitted, at its lower concurrency: their
// median reads the no-load RTT, whatever queue the restored limit builds.
// Slow start doubled on such a window (10 slots of 20 ms at 10x, through
// the binary: 22 to 40 in a window closed 18 ms after the first probe, and
// the first second's p99 was 140 ms against 68-82 in the runs without; here
// in 25 of 40 runs); it doubles only on a window begun a round trip after
// the probe's end.
func TestSlowStartNotOnAProbesAnswers(t *testing.T) {
	const slots = 10
	ms := time.Millisecond
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 1))
		l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
		var out []timed
		probing, restored, endedAt := false, 0, -1
		for i := 0; i < 1000; i++ { // 1 s: 5,000 arrivals a second, 5 a ms
			now := time.Duration(i) * ms
			out, _ = releaseEnded(out, now)
			for range 5 {
				p, ok := l.TryAcquire()
				if !ok {
					continue
				}
				// Past its slots the service queues; sigma 0.25.
				rtt := 20 * ms * time.Duration(max(slots, len(out)+1)) / slots
				out = append(out, timed{p, now + time.Duration(float64(rtt)*math.Exp(0.25*rng.NormFloat64()))})
			}
			st := l.Stats()
			if probing && !st.Probing {
				restored, endedAt = l.Limit(), i
			}
			probing = st.Probing
			if endedAt >= 0 && i-endedAt <= 100 && 2*l.Limit() >= 3*restored {
				t.Errorf("seed %d: %d ms after a probe restored the limit to %d, it is %d: doubled on the probe's answers", seed, i-endedAt, restored, l.Limit())
				break
			}
			clock.Advance(ms)
		}
	}
}
