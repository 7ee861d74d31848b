package adaptive

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestProbeStepAsFastAsTheFastestGoesNoDeeper: a closed loop of 64 clients
// before 10 slots of a constant 300 ms. The limit runs above the slots
// (the median shows a constant service's queue only once half the
// requests wait), its cuts start a probe, and the window before the probe
// still holds the queue of the higher limit just cut (900 ms at 25 in
// flight). The probe's first step, just under the knee, answers every
// request in 300 ms, as fast as the fastest answer seen: it queued
// nowhere, and a second step at half the limit would only leave slots idle.
// (Read against the window before it, the step looked "as much faster as
// a queue reaching down to it would make it": through the binary, wrk -c64
// had the probe go on at 6 of 10 slots, 0.86-0.93 of the proxy without a
// limit.)
func TestProbeStepAsFastAsTheFastestGoesNoDeeper(t *testing.T) {
	const slots, clients = 10, 64
	ms := time.Millisecond
	service := func(rng *rand.Rand) time.Duration {
		return time.Duration(float64(300*ms) * math.Exp(0.002*rng.NormFloat64()))
	}
	steps := 0
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 5))
		clock := sluice.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l, err := New(Config{Algorithm: &Gradient2{}, Clock: clock, InitialLimit: 20})
		if err != nil {
			t.Fatal(err)
		}
		lastStart := int64(0)
		closedLoopSim(l, clock, rng, slots, clients, 30_000, service, func(now time.Duration) {
			l.mu.Lock()
			probing, started, level, base := l.probing.Load(), l.probeStart.Load(), l.probeLevel(), l.baseline
			l.mu.Unlock()
			if probing && started != lastStart {
				if base > 0 && level <= slots/2 {
					t.Errorf("seed %d at %v: a probe step at %.1f of %d slots, a baseline (%v) known", seed, now, level, slots, time.Duration(base))
				}
				steps++
				lastStart = started
			}
		})
	}
	if steps == 0 {
		t.Fatal("no probe in 4 runs of 30 s")
	}
}
