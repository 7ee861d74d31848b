package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
)

// TestWaitingLoopIsClosedOnlyWhereHandOversCost: a closed loop that waits
// within the queue, nobody turned away (SetWaitingLoop), is judged as a
// closed loop only while it is served fast enough for the handing over of
// every slot to cost a share of a CPU. Before the closedLoopAtCapacity
// service (10,000 a second, 2 ms to hand each slot over) its limit climbs
// as a closed loop's does; before one that serves 1,000 a second (10 ms,
// 10 slots' worth: RTT = max(10 ms, in flight / 1,000/s) + 2 ms), the
// limiter runs exactly as with no loop read at all: there a higher limit
// saves little, and its up-probes, each within the counts' chance, took a
// loop into a service that slows with it (wrk-like 40 clients before 10
// slots slowing 20% per waiting request: the limit went from 19 to 67 and
// goodput from 950 to 670 a second).
func TestWaitingLoopIsClosedOnlyWhereHandOversCost(t *testing.T) {
	run := func(waiting bool, rtt func(*adaptive.Limiter) time.Duration) adaptive.Stats {
		l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 50})
		if waiting {
			l.SetWaitingLoop(func() bool { return true })
		}
		demandOverTheLimit(l, clock, 30*time.Second, 0, nil, func() time.Duration { return rtt(l) })
		return l.Stats()
	}
	fast := run(true, sharedCPURTT)
	if fast.Limit < 300 {
		t.Errorf("a waiting loop served 10,000 a second: limit %d, want it to climb as a closed loop's (>= 300): %+v", fast.Limit, fast)
	}
	slow := func(l *adaptive.Limiter) time.Duration {
		return 2*time.Millisecond + max(10*time.Millisecond, time.Duration(l.InFlight())*time.Second/1000)
	}
	with, without := run(true, slow), run(false, slow)
	if with.Limit != without.Limit || with.UpProbes != without.UpProbes {
		t.Errorf("a waiting loop served 1,000 a second: limit %d after %d up-probes, want it judged as no loop (limit %d after %d)",
			with.Limit, with.UpProbes, without.Limit, without.UpProbes)
	}
}
