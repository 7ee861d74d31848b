package adaptive_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// TestGradient2ReadsNoiseAsNoQueue: a window whose median stands 30% above
// the baseline is cut when its RTTs are alike (a queue every request waits
// through) and kept when they are as spread as a heavy tail makes 50 of
// them (chance alone moves their median that much).
func TestGradient2ReadsNoiseAsNoQueue(t *testing.T) {
	base := 60 * time.Millisecond
	s := adaptive.Sample{RTT: base * 13 / 10, NoLoadRTT: base, Successes: 50, MaxInFlight: 50}
	if next := new(adaptive.Gradient2).Update(50, s); next >= 50 {
		t.Errorf("a median 1.3x the baseline, no noise: limit %.1f, want a cut below 50", next)
	}
	s.Noise = 1.3
	if next := new(adaptive.Gradient2).Update(50, s); next < 50 {
		t.Errorf("a median 1.3x the baseline within noise 1.3: limit %.1f, want no cut", next)
	}
	s.RTT = base * 2
	if next := new(adaptive.Gradient2).Update(50, s); next >= 50 {
		t.Errorf("a median 2x the baseline, beyond noise 1.3: limit %.1f, want a cut", next)
	}
}

// TestWindowNoise: the window's Noise is 1 for RTTs all alike and grows
// with their spread, as 1.5 standard errors of a median of that many.
func TestWindowNoise(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rtt      func(i int) time.Duration
		min, max float64
	}{
		{"alike", func(int) time.Duration { return 50 * time.Millisecond }, 1, 1},
		// Log-uniform over 10x: ln(p90/p10) ~ ln(10)*0.8, sigma ~ 0.72,
		// noise ~ exp(1.5*1.2533*0.72/sqrt(50)) ~ 1.21.
		{"spread 10x", func(i int) time.Duration {
			return time.Duration(float64(10*time.Millisecond) * math.Pow(10, float64(i)/49))
		}, 1.12, 1.35},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, clock := newLimiter(t, adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 100, MaxLimit: 100})
			permits := make([]adaptive.Permit, 50)
			for i := range permits {
				p, ok := l.TryAcquire()
				if !ok {
					t.Fatal("refused below the limit")
				}
				permits[i] = p
			}
			at := time.Duration(0)
			for i, p := range permits {
				clock.Advance(tc.rtt(i) - at)
				at = tc.rtt(i)
				p.Release(sluice.Success)
			}
			clock.Advance(200 * time.Millisecond)
			p, _ := l.TryAcquire()
			p.Release(sluice.Success)
			st := l.Stats()
			if st.Windows == 0 {
				t.Fatal("no window closed")
			}
			if got := st.Last.Noise; got < tc.min || got > tc.max {
				t.Errorf("noise %.3f, want [%.2f, %.2f]", got, tc.min, tc.max)
			}
		})
	}
}
