package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestProbeStepKeepsTheSlotsBusy: a first probe's step at 3 of 6.6 whose
// median (2 ms) is twice the fastest answer ever (1 ms), RTTs alike, the
// load refused during it, and as many requests ended a second as at the
// step before: saturated. By Little's law a service finishing 1,700 a
// second with a fastest answer of 1 ms keeps 1.7 requests busy without a
// queue, so a step at 1 would leave a slot idle for its whole length:
// the probe ends at 3, saturated there. One finishing 1,000 a second (one
// slot) keeps one busy, and the step at 1 is taken. (Before 2 slots of
// 200 ms, the step at 1 served half the capacity for 2 s.)
func TestProbeStepKeepsTheSlotsBusy(t *testing.T) {
	ms := float64(time.Millisecond)
	for _, c := range []struct {
		perSecond float64
		deeper    bool
	}{{1700, false}, {1000, true}} {
		l, err := New(Config{Algorithm: &Gradient2{}, Clock: sluice.NewFakeClock(time.Unix(0, 0)), InitialLimit: 20})
		if err != nil {
			t.Fatal(err)
		}
		l.mu.Lock()
		l.estimate, l.probeFraction, l.minRTT = 6.6, deepProbe, 1*ms
		l.rejected.Store(10) // refused during the step: the load filled it
		// The step before: the whole limit, at the same rate.
		l.stepRate, l.stepIn, l.stepRTT = c.perSecond/1e9, 6.6, 4*ms
		// 1 s after the step's first answer, perSecond more ended.
		now := int64(2 * time.Second)
		l.probeFirst.Store(int64(time.Second))
		l.admitted.Store(uint64(c.perSecond))
		went := l.deeper(now, 20, 2*ms, stepSpread{narrow: true, noise: 1})
		saturated, level := l.saturated, l.probeLevel()
		l.mu.Unlock()
		if went != c.deeper || saturated != 3 {
			t.Errorf("%.0f a second: went deeper %v (level %v), saturated %v; want %v, 3", c.perSecond, went, level, saturated, c.deeper)
		}
	}
}
