package adaptive

import (
	"testing"
	"time"
)

// TestClosedLoopProbeJudgedBeforeTheSwingIsRetriedSoon: a closed loop's
// first up-probe, judged before the goodput's swing between windows was
// measured (fewer than minSwing pairs), has only the counts' chance to go
// by: about 5% at 1,000 answers a window, where a busy machine swings
// 10-15%. Undone for a loss of 8% (under smallLoss), it is tried again
// after two windows, as after a kept one, not after upEvery (1 s): by
// then the probe's own windows have measured the swing. Before, the loop
// waited a second in the queue for the next (wrk -c1024 before a service
// waiting 5 ms on I/O kept a queue in two of three runs).
func TestClosedLoopProbeJudgedBeforeTheSwingIsRetriedSoon(t *testing.T) {
	const window = 100 * time.Millisecond
	g := newGoodput(window)
	now := int64(0)
	step := func(lim, x float64) {
		now += int64(window)
		g.observe(gpWindow{limit: lim, x: x, n: 1000, sat: true})
	}
	const x0 = 1e-5 // 10,000 a second
	step(100, x0)
	step(100, x0)
	next, why := g.adjust(now, 100, 100, 1000, true, 5*time.Millisecond, 1.2, false)
	if why != ReasonGoodput || next <= 100 {
		t.Fatalf("adjust = %v, %v: want an up-probe from 100", next, why)
	}
	var back float64
	for range upWindows + 1 {
		step(next, 0.92*x0)
		if lim, _, held := g.holding(now, next, 1000, true, 5*time.Millisecond); held && g.up == 0 {
			back = lim
			break
		}
	}
	if back != 100 {
		t.Fatalf("the probe to %v losing 8%% was not undone to 100 (got %v, swing %.3f from %d pairs)", next, back, g.swing(), g.swings)
	}
	// Windows at 100 again: the next probe is due two windows on.
	for i := 1; i <= 3; i++ {
		step(100, x0)
		if next, why := g.adjust(now, 100, 100, 1000, true, 5*time.Millisecond, 1.2, false); why == ReasonGoodput && next > 100 {
			if i > 2 {
				t.Errorf("the next up-probe came %d windows after the undone one, want within 2", i)
			}
			return
		}
	}
	t.Errorf("no up-probe within 3 windows of one undone before the swing was measured (next at %v ns, now %v)", g.upNext, now)
}
