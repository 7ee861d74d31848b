package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sim"
)

// ramp goes from a to b between from and to.
func ramp(from, to time.Duration, a, b time.Duration) func(time.Duration) time.Duration {
	return func(t time.Duration) time.Duration {
		switch {
		case t <= from:
			return a
		case t >= to:
			return b
		}
		return a + time.Duration(float64(b-a)*float64(t-from)/float64(to-from))
	}
}

// TestLatencyShifts runs the scenarios in which the service itself changes
// (slower, a heavy tail, a hang, a flash crowd, a fast idle service) and
// checks the default algorithm (gradient2) against the goals: the limit
// tells a slower service from a queue in it. Where a bound is looser than
// the goal, the goal is not met yet and the comment says by how much
// (BENCHMARKS.md has the figures, and those of aimd and vegas).
func TestLatencyShifts(t *testing.T) {
	sec := time.Second
	for _, alg := range []string{"gradient2"} {
		t.Run(alg, func(t *testing.T) {
			t.Run("service_doubles", func(t *testing.T) {
				sc := sim.Scenario{Duration: 30 * sec, Rate: constant(2 * mu), Slots: slots(slotsC), ServiceTime: svcL,
					ServiceTimeAt: step(15*sec, svcL, 2*svcL), Deadline: 2 * sec, Seed: 7}
				r := runSluice(sc, alg)
				for i := 20; i < 30; i++ {
					if g := float64(r.Seconds[i].Good); g < 0.9*mu/2 {
						t.Errorf("second %d: goodput %.0f/s, want >= 90%% of the new capacity %.0f/s", i, g, mu/2)
					}
				}
			})
			t.Run("service_creeps_3x", func(t *testing.T) {
				sc := sim.Scenario{Duration: 30 * sec, Rate: constant(2 * mu), Slots: slots(slotsC), ServiceTime: svcL,
					ServiceTimeAt: ramp(5*sec, 25*sec, svcL, 3*svcL), Deadline: 2 * sec, Seed: 7}
				r := runSluice(sc, alg)
				good, capSum := 0.0, 0.0
				for i := 3; i < 30; i++ {
					capAt := float64(slotsC) / sc.ServiceTimeAt(time.Duration(i)*sec+sec/2).Seconds()
					good, capSum = good+float64(r.Seconds[i].Good), capSum+capAt
					// Goal: 90% every second. Reached on average; the
					// worst second is 84-97% across seeds (a probe, or the
					// cuts before three probes show the creep).
					if g := float64(r.Seconds[i].Good); g < 0.75*capAt {
						t.Errorf("second %d: goodput %.0f/s, want >= 75%% of the capacity %.0f/s", i, g, capAt)
					}
				}
				if good < 0.9*capSum {
					t.Errorf("goodput %.0f%% of capacity over the creep, want >= 90%%", 100*good/capSum)
				}
			})
			t.Run("heavy_tail", func(t *testing.T) {
				sc := sim.Scenario{Duration: 30 * sec, Rate: constant(0.7 * mu), Slots: slots(slotsC), ServiceTime: svcL,
					Sigma: 1, Deadline: 2 * sec, Seed: 7}
				r := runSluice(sc, alg)
				w := r.Window(2*sec, 30*sec)
				// Goal 0.5%; the simulation has no wait queue in front of
				// the limit (the sidecar has), so a burst over it is refused
				// here where the sidecar would make it wait.
				if share := float64(w.Rejected) / float64(w.Offered); share > 0.01 {
					t.Errorf("lognormal sigma 1 at 0.7x capacity: %.2f%% rejected, want <= 1%%", 100*share)
				}
			})
			t.Run("hang", func(t *testing.T) {
				sc := sim.Scenario{Duration: 25 * sec, Rate: constant(2 * mu), Slots: slots(slotsC), ServiceTime: svcL,
					HangFrom: 10 * sec, HangUntil: 15 * sec, Seed: 7}
				r := runSluice(sc, alg)
				// At most min_limit (1) in the hang at a time: one more each
				// time a client gives up on it (the deadline, 1 s).
				if w := r.Window(11*sec, 15*sec); w.Admitted > 4 {
					t.Errorf("%d requests sent into the last 4 s of the hang, want at most min_limit per client timeout (4)", w.Admitted)
				}
				if g := float64(r.Seconds[17].Good); g < 0.9*mu {
					t.Errorf("second 17 (2 s after the hang): goodput %.0f/s, want >= 90%% of %.0f/s", g, mu)
				}
			})
			t.Run("flash_crowd", func(t *testing.T) {
				rate := func(t time.Duration) float64 {
					if t >= 10*sec && t < 12*sec {
						return 15 * mu
					}
					return 0.6 * mu
				}
				sc := sim.Scenario{Duration: 20 * sec, Rate: rate, Slots: slots(slotsC), ServiceTime: svcL, Seed: 7}
				r := runSluice(sc, alg)
				if g := perSecond(r.Window(10*sec, 12*sec).Good, 2*sec); g < 0.9*mu {
					t.Errorf("during the crowd: goodput %.0f/s, want >= 90%% of %.0f/s", g, mu)
				}
				if w := r.Window(13*sec, 20*sec); w.Rejected > 0 {
					t.Errorf("%d of the base load rejected from 1 s after the crowd", w.Rejected)
				}
			})
			t.Run("light_load_fast_service", func(t *testing.T) {
				fast := time.Millisecond
				capFast := float64(slotsC) / fast.Seconds()
				rate := func(t time.Duration) float64 {
					if t < 60*sec {
						return 0.1 * capFast
					}
					return 0.8 * capFast // the burst that follows
				}
				sc := sim.Scenario{Duration: 63 * sec, Rate: rate, Slots: slots(slotsC), ServiceTime: fast, Seed: 7}
				r := runSluice(sc, alg)
				if w := r.Window(0, 60*sec); w.Rejected > 0 {
					t.Errorf("light load: %d rejected, the limit fell below what the load uses", w.Rejected)
				}
				if w := r.Window(61*sec, 63*sec); float64(w.Rejected) > 0.01*float64(w.Offered) {
					t.Errorf("the burst after a minute of light load: %d of %d rejected", w.Rejected, w.Offered)
				}
			})
		})
	}
}
