package adaptive

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestProbeToleranceFindsTheSameServiceTheSame: two medians of 20 RTTs
// drawn from one service (the baseline, and a probe that finds it
// unchanged) are judged the same by probeTolerance in about 4 of 5 pairs
// (80-82%, 4,000 pairs per tail: 1.5 standard errors of their difference,
// the spread read from the probe's own 20), whatever the tail. Read as one
// median's noise, the same service was found moved in over a third of
// probes (65-66% the same), and every such probe reset the probe interval.
func TestProbeToleranceFindsTheSameServiceTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func(sigma float64, n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = 100 * math.Exp(sigma*rng.NormFloat64())
		}
		slices.Sort(v)
		return v
	}
	median := func(v []float64) float64 { return (v[len(v)/2-1] + v[len(v)/2]) / 2 }
	for _, sigma := range []float64{0.5, 1, 1.5} {
		const pairs, n = 4000, 20
		same := 0
		for range pairs {
			base, probe := draw(sigma, n), draw(sigma, n)
			tol := probeTolerance(n, probe[n/10], probe[n*9/10-1])
			if m, b := median(probe), median(base); m < tol*b && m > b/tol {
				same++
			}
		}
		if share := float64(same) / pairs; share < 0.75 {
			t.Errorf("sigma %g: %.0f%% of probes of an unchanged service judged it the same, want >= 75%%", sigma, 100*share)
		}
	}
}
