package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/sim"
)

// TestSimulatedCeilingLetsGrownCapacityIn: the `capacity_doubles`
// scenario in simulation (10 slots x 20 ms that slow by a tenth per waiting
// request per slot, an open loop at 3x, the slots doubled at 4 s), 30
// seeds. A down-probe kept before or across the change leaves a ceiling at
// the old slots' limit (11-12), and each down-probe from it that serves
// less held it longer: 3 of 30 seeds served 52-55% of the new capacity
// from 5 s on, and the binary missed the scenario in one of five runs.
// An up-probe from the ceiling after each of those probes finds the new
// slots: every seed serves at least 80%.
func TestSimulatedCeilingLetsGrownCapacityIn(t *testing.T) {
	sh := simShape{"10x20ms", 10, 20 * time.Millisecond, 0.25, 0.1, 0, 0, 0}
	for seed := uint64(1); seed <= 30; seed++ {
		sc := sh.open(3, 14*time.Second, seed)
		sc.Slots = step(4*time.Second, 10, 20)
		var lim *adaptive.Limiter
		r := runSluiceAs(sc, "gradient2", func(l *adaptive.Limiter) sim.Limiter { lim = l; return limAdapter{l} })
		good := perSecond(r.Window(5*time.Second, 14*time.Second).Good, 9*time.Second) / (2 * sh.capacity())
		if good < 0.8 {
			st := lim.Stats()
			t.Errorf("seed %d: %.0f%% of the doubled capacity served from 5 s on, want >= 80%% (limit %d, ceiling %d, down-probes %d kept %d undone %d, up-probes %d)",
				seed, 100*good, st.Limit, st.Ceiling, st.DownProbes, st.DownKept, st.DownUndone, st.UpProbes)
		}
	}
}
