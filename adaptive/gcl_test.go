package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/sim"
)

// The go-concurrency-limits algorithms run inside sluice's Limiter: each
// moves the limit with that package's own math and keeps an overloaded
// service serving. (Their figures against the goals are in BENCHMARKS.md;
// the goals are gradient2's.)
func TestGCLAlgorithms(t *testing.T) {
	for _, name := range []string{"gcl-vegas", "gcl-gradient2", "gcl-gradient", "gcl-aimd"} {
		t.Run(name, func(t *testing.T) {
			a, err := adaptive.NewAlgorithm(name)
			if err != nil {
				t.Fatal(err)
			}
			if a.Name() != name {
				t.Fatalf("name %q", a.Name())
			}
			sc := sim.Scenario{Duration: 15 * time.Second, Rate: constant(2 * mu), Slots: slots(slotsC), ServiceTime: svcL, Seed: 7}
			r := runSluice(sc, name)
			if g := perSecond(r.Window(5*time.Second, 15*time.Second).Good, 10*time.Second); g < 0.5*mu {
				t.Errorf("2x overload: goodput %.0f/s, want at least half of %.0f/s", g, mu)
			}
			moved := false
			for _, s := range r.Seconds[1:15] {
				moved = moved || s.Limit != r.Seconds[1].Limit
			}
			if !moved {
				t.Error("the limit never moved")
			}
		})
	}
	if _, err := adaptive.NewAlgorithm("gcl-nope"); err == nil {
		t.Error("an unknown gcl algorithm was accepted")
	}
}
