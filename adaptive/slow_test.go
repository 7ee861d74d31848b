package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/sim"
)

// TestSlowServiceFindsItsSlots: a service of 2 slots x 200 ms (10 requests
// a second) behind the initial limit of 20, at 2x and 5x its capacity, with
// clients that leave after 2 s as sluice's engines see them (net/http's
// hears them go; the fast engine waits for the upstream's answer). Each
// window then holds under 10 outcomes, and a probe at half the limit (10)
// still finds a queue: before, windows were discarded, or the probe took
// the queue's RTT for the service's and the limit grew on it (0-41% of
// capacity served, baselines of 1-8 s). Now windows gather for longer, and
// a probe that finds the service as busy at half the concurrency goes
// deeper.
func TestSlowServiceFindsItsSlots(t *testing.T) {
	const svc = 200 * time.Millisecond
	const capacity = 10.0
	for _, leave := range []struct {
		name string
		how  sim.Leave
	}{{"client_gone_seen", sim.LeaveIgnored}, {"client_gone_unseen", sim.LeaveUnnoticed}} {
		for _, load := range []float64{2, 5} {
			var sum, worst float64 = 0, 1
			for seed := uint64(1); seed <= 4; seed++ {
				var l *adaptive.Limiter
				r := sim.Run(sim.Scenario{Duration: 30 * time.Second, Rate: constant(load * capacity), Slots: slots(2),
					ServiceTime: svc, Deadline: 2 * time.Second, Seed: seed, Leave: leave.how},
					func(c sluice.Clock) sim.Limiter {
						a, _ := adaptive.NewAlgorithm("gradient2")
						l, _ = adaptive.New(adaptive.Config{Algorithm: a, Clock: c, InitialLimit: 20})
						return limAdapter{l}
					}, func() int { return l.Limit() })
				share := perSecond(r.Window(10*time.Second, 30*time.Second).Good, 20*time.Second) / capacity
				sum += share
				worst = min(worst, share)
				if b := l.Stats().Baseline; b <= 0 || b > 2*svc {
					t.Errorf("%s at %gx, seed %d: baseline %v, want the service's own (about %v), not a queue's", leave.name, load, seed, b, svc)
				}
			}
			if mean := sum / 4; mean < 0.55 || worst < 0.4 {
				t.Errorf("%s at %gx: goodput %.0f%% of capacity on average (worst seed %.0f%%), want >= 55%% (worst >= 40%%)",
					leave.name, load, 100*mean, 100*worst)
			}
		}
	}
}

// TestClientLeftAfterAWaitIsASample: a request whose client left after
// waiting far longer than the service answers counts as a sample of that
// wait (a lower bound of its RTT); one that left early does not. Before,
// neither counted, so a service that made every client wait past its
// timeout gave the limiter nothing to cut on.
func TestClientLeftAfterAWaitIsASample(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	early := acquireN(t, l, 10)
	clock.Advance(150 * time.Millisecond)
	for _, p := range early {
		p.Release(sluice.Ignore) // left after 150 ms: says nothing
	}
	if w := l.Stats().Windows; w != 0 {
		t.Fatalf("%d windows closed on clients that left early", w)
	}
	late := acquireN(t, l, 10)
	clock.Advance(3 * time.Second)
	for _, p := range late {
		p.Release(sluice.Ignore)
	}
	s := l.Stats()
	if s.Windows == 0 || s.Last.RTT < 2500*time.Millisecond { // the histogram's buckets round
		t.Fatalf("windows %d, last RTT %v: want the 3 s waits of clients that left counted", s.Windows, s.Last.RTT)
	}
}

// TestProbeDoesNotOutliveItsLoad: a probe that began under one load and
// was still running when the load stopped ends when the next load finds
// nothing in flight, instead of greeting it with a lowered limit. Before,
// a closed loop that followed an overload after 2 s idle met a probe's
// limit of 1 and had 400-470 of its requests refused in 2 s (sluice tune's
// verification; BENCHMARKS.md, session 11).
func TestProbeDoesNotOutliveItsLoad(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	// A service of 20 ms with room for the whole limit, driven saturated:
	// each round fills the limit and ends it all 20 ms later.
	round := func() {
		held := fill(l)
		clock.Advance(20 * time.Millisecond)
		for _, p := range held {
			p.Release(sluice.Success)
		}
	}
	// Until a baseline is known, then until the next probe begins.
	for i := 0; l.Stats().Baseline == 0; i++ {
		if i > 1000 {
			t.Fatalf("no baseline after 20 s saturated: %+v", l.Stats())
		}
		round()
	}
	for i := 0; !l.Stats().Probing; i++ {
		if i > 1000 {
			t.Fatalf("no probe after 20 s saturated: %+v", l.Stats())
		}
		round()
	}
	probing := l.Stats()
	clock.Advance(2 * time.Second) // the load stops mid-probe
	p, ok := l.TryAcquire()
	if !ok {
		t.Fatal("refused with nothing in flight")
	}
	defer p.Release(sluice.Ignore)
	if s := l.Stats(); s.Probing || s.Limit <= probing.Limit {
		t.Fatalf("stats %+v (at the probe: limit %d): the probe of a load gone 2 s ago still holds the limit", s, probing.Limit)
	}
}
