package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/sim"
)

// watched is a limiter that calls seen after every admission it is asked
// for.
type watched struct {
	l    *adaptive.Limiter
	seen func()
}

func (w watched) TryAcquire() (sluice.Permit, bool) {
	p, ok := w.l.TryAcquire()
	w.seen()
	return p, ok
}

// TestSimulatedClosedLoopClimbsInShortWindows: a closed loop of 256
// clients before a service that answers in 20 us of CPU on the sidecar's
// own core (10 us more a forwarded request, the shape of wrk -c256 before a
// Go service that answers at once, both on one CPU). Every up-probe of the
// climb is kept, and each measures its goodput in windows that close once
// they hold enough answers, not after the window's full 100 ms; and the
// algorithm's first cuts on latency wait for goodput to be measured (the
// first up-probe judges them): the limit holds the whole loop within 350
// ms of the start (230 ms when this was written). Before, each step held
// two full windows and the first cuts took 20 to 23 first: 900 ms (with
// short windows alone, 500), the loop waiting in the queue meanwhile
// (through the binary, 0.75-0.85 of the goodput without a limit over the
// first second).
func TestSimulatedClosedLoopClimbsInShortWindows(t *testing.T) {
	const loop = 256
	for seed := uint64(1); seed <= 3; seed++ {
		sc := sim.Scenario{Duration: 2 * time.Second, Slots: slots(1 << 20), ServiceTime: 20 * time.Microsecond, Sigma: 0.25,
			Deadline: 2 * time.Second, Seed: seed, Leave: sim.LeaveUnnoticed, Clients: loop,
			CPU: &sim.CPU{Admit: 10 * time.Microsecond, Refuse: 5 * time.Microsecond, Handoff: 5 * time.Microsecond}}
		var l *adaptive.Limiter
		var start time.Time
		reached := time.Duration(-1)
		sim.Run(sc, func(c sluice.Clock) sim.Limiter {
			l, _ = adaptive.New(adaptive.Config{Algorithm: &adaptive.Gradient2{}, Clock: c, InitialLimit: 20})
			l.SetClosedLoop(func() bool { return true })
			start = c.Now()
			return watched{l, func() {
				if reached < 0 && l.Limit() >= loop {
					reached = c.Now().Sub(start)
				}
			}}
		}, func() int { return l.Limit() })
		if reached < 0 || reached > 350*time.Millisecond {
			t.Errorf("seed %d: the limit held the loop of %d after %v (-1: never in 2 s), want within 350ms; at the end %d",
				seed, loop, reached, l.Limit())
		} else {
			t.Logf("seed %d: the limit held the loop after %v", seed, reached)
		}
	}
}
