package adaptive

import (
	"testing"
	"time"
)

// TestUpProbeThatMetDropsStopsShort: a closed loop of 256 clients before a
// service of 8 slots of 5 ms that fails fast (503 at once) past 24 in
// flight, so that every request over 24 comes back at the sidecar's pace.
// A closed loop's up-probes climb without evidence, and a kept one makes
// the next a 2.25x step: from 20, 45, far past the bound. A probe that
// meets drops is undone by the cut on drops; the next waits twice as long
// and goes at most halfway back to where drops met it: 7 windows of 200
// drop. Before, 20: a probe every second, each past the bound.
func TestUpProbeThatMetDropsStopsShort(t *testing.T) {
	const window = 100 * time.Millisecond
	const loop, slots, bound = 256.0, 8.0, 24.0
	g := newGoodput(window)
	now, lim := int64(0), 20.0
	dropping := 0
	for w := 0; w < 200; w++ {
		now += int64(window)
		in := min(lim, loop)
		x := min(in, slots) / float64(5*time.Millisecond)
		g.observe(gpWindow{limit: lim, x: x, n: int64(x * float64(window)), sat: lim < loop})
		rtt := time.Duration(min(in, bound) / x)
		if in > bound {
			// The Limiter answers drops at once: the probe is over, and
			// the algorithm cuts.
			dropping++
			g.overloaded(now, lim)
			g.reset()
			lim = max(bound*0.8, lim*0.5)
			continue
		}
		if next, _, held := g.holding(now, lim, 1000, true, rtt); held {
			lim = next
			continue
		}
		if next, why := g.adjust(now, lim, lim, 1000, true, rtt, 1.2, false); why == ReasonGoodput {
			lim = next
		}
	}
	if dropping > 12 {
		t.Errorf("%d of 200 windows past the fail-fast bound, want at most 12 (%d up-probes, %d undone)", dropping, g.upProbes, g.upUndone)
	}
}
