package adaptive

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestProbeStepsGoDeeper: each further step of a probe runs at fewer
// requests than the step before it, and the knee a probe finds is not
// below the slots the service kept busy. A closed loop of 16 clients
// before 5 slots of 50 ms (RTTs alike): the knee put the shallow step just
// over half the limit, where half is the same number of requests, and a
// second step there measured the same concurrency again, for twice as
// many samples, with the service's slots idle; and a probe that began
// just after cuts, with the window before it still holding the queue of
// the higher limit, read the knee at 3.2-4.0 (of 5), and the next probe
// halved the limit (the sweep's 5x50ms-constant@c16 served 0.91 of the
// proxy without a limit).
func TestProbeStepsGoDeeper(t *testing.T) {
	const slots, clients = 5, 16
	ms := time.Millisecond
	steps := 0
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		clock := sluice.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l, err := New(Config{Algorithm: &Gradient2{}, Clock: clock, InitialLimit: 20})
		if err != nil {
			t.Fatal(err)
		}
		lastStart, lastLevel := int64(0), 0
		closedLoopSim(l, clock, rng, slots, clients, 20_000, func(rng *rand.Rand) time.Duration {
			return time.Duration(float64(50*ms) * math.Exp(0.01*rng.NormFloat64()))
		}, func(now time.Duration) {
			l.mu.Lock()
			probing, started := l.probing.Load(), l.probeStart.Load()
			level, knee := int(l.probeLevel()), l.knee
			l.mu.Unlock()
			if !probing && lastStart != 0 && knee > 0 && knee < slots-1 {
				t.Errorf("seed %d at %v: a probe put the knee at %.1f before %d slots", seed, now, knee, slots)
			}
			if probing && started != lastStart {
				if lastStart != 0 && started-lastStart < int64(2*time.Second) && level >= lastLevel {
					t.Errorf("seed %d at %v: a probe step at %d after one at %d", seed, now, level, lastLevel)
				}
				steps++
				lastStart, lastLevel = started, level
			}
			if !probing {
				lastStart = 0
			}
		})
	}
	if steps == 0 {
		t.Fatal("no probe in 8 runs of 20 s")
	}
}

// closedLoopSim runs, on l and its clock, a closed loop of clients before
// slots (service draws each request's service time) for steps
// milliseconds: a client refused sends again a millisecond later, the
// admitted wait in arrival order for a slot. check runs after each
// millisecond's admissions, before the clock moves on.
func closedLoopSim(l *Limiter, clock *sluice.FakeClock, rng *rand.Rand, slots, clients, steps int, service func(*rand.Rand) time.Duration, check func(now time.Duration)) {
	type req struct {
		p   Permit
		end time.Duration // 0: waiting for a slot
	}
	var in []req // admitted, in arrival order: the first slots serve
	waiting := clients
	for i := range steps {
		now := time.Duration(i) * time.Millisecond
		kept := in[:0]
		for _, r := range in {
			if r.end > 0 && r.end <= now {
				r.p.Release(sluice.Success)
				waiting++
				continue
			}
			kept = append(kept, r)
		}
		in = kept
		busy := 0
		for j := range in {
			if in[j].end == 0 && busy < slots {
				in[j].end = now + service(rng)
			}
			if in[j].end > 0 {
				busy++
			}
		}
		for waiting > 0 {
			p, ok := l.TryAcquire()
			if !ok {
				break // the rest send again in a millisecond
			}
			waiting--
			in = append(in, req{p: p})
			if busy < slots {
				in[len(in)-1].end = now + service(rng)
				busy++
			}
		}
		check(now)
		clock.Advance(time.Millisecond)
	}
}
