package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// TestWindowTheGateHeldIsNoBaseline: a request a millisecond into one slot
// of 3 ms (three times its capacity) for a second. The start gate binds a
// few milliseconds in, and the first window holds at most 8 in flight,
// under half the initial 20, while the gate refuses the rest: the load did
// not leave the limit room, the gate did, and the window's median (a queue
// of several service times) is no baseline; the first probe measures it.
// Before, the window was read as one the load left room in, its median
// (12 ms) became the baseline, no probe was due, and a second in the limit
// stood at 5 before one slot. Through the binary (sluice run with the
// defaults, sluice loadtest at 1,000 a second), in 4 runs of 10 the limit
// held 6-20 in flight for seconds (p99 140-190 ms against 44-79).
func TestWindowTheGateHeldIsNoBaseline(t *testing.T) {
	const svc = 3 * time.Millisecond
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	type admitted struct {
		p   adaptive.Permit
		end time.Duration
	}
	var inService []admitted
	var free, now time.Duration // when the slot is next free; the time since the start
	refused := 0
	for now < 1000*time.Millisecond {
		for len(inService) > 0 && inService[0].end <= now {
			inService[0].p.Release(sluice.Success)
			inService = inService[1:]
		}
		if p, ok := l.TryAcquire(); ok {
			free = max(free, now) + svc
			inService = append(inService, admitted{p, free})
		} else {
			refused++
		}
		clock.Advance(time.Millisecond)
		now += time.Millisecond
	}
	if refused == 0 {
		t.Fatal("nothing refused: the gate never bound, the test measures nothing")
	}
	st := l.Stats()
	if st.Baseline < svc/2 || st.Baseline > 2*svc {
		t.Errorf("baseline %v a second into a load the start gate held at first (%d refused), want about the service's %v (at most twice it)", st.Baseline, refused, svc)
	}
	if st.Limit > 3 {
		t.Errorf("limit %d a second into the load before one slot, want at most 3", st.Limit)
	}
	for _, a := range inService {
		a.p.Release(sluice.Success)
	}
}
