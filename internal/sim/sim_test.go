package sim

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestDegradeSlowsAServiceThatQueues: with Degrade, a service overloaded
// without a limiter serves fewer requests a second as its queue grows, down
// to a quarter of its capacity (the 4x cap, as loadtest/backend's model);
// without, it serves its capacity however long the queue.
func TestDegradeSlowsAServiceThatQueues(t *testing.T) {
	served := func(degrade float64) float64 {
		r := Run(Scenario{Duration: 6 * time.Second, Rate: func(time.Duration) float64 { return 1000 },
			Slots: func(time.Duration) int { return 10 }, ServiceTime: 20 * time.Millisecond, Degrade: degrade,
			Deadline: time.Hour, Seed: 1}, nil, nil)
		w := r.Window(2*time.Second, 6*time.Second)
		return float64(w.Good+w.Late) / 4
	}
	plain, degraded := served(0), served(0.5)
	if plain < 450 || plain > 550 {
		t.Errorf("without Degrade: %.0f served a second, want the capacity of 500", plain)
	}
	if degraded < 100 || degraded > 160 {
		t.Errorf("Degrade 0.5 with a queue far over the slots: %.0f served a second, want about a quarter of 500", degraded)
	}
}

// capped admits at most n requests at once.
type capped struct{ n, in int }

type cappedPermit struct{ c *capped }

func (p cappedPermit) Release(sluice.Outcome) { p.c.in-- }

func (c *capped) TryAcquire() (sluice.Permit, bool) {
	if c.in >= c.n {
		return nil, false
	}
	c.in++
	return cappedPermit{c}, true
}

// TestCPUSharesTheServiceAndTheSidecar: with CPU, the requests in service
// share one CPU: a closed loop of 100 clients before 1 ms of work each is
// served at the CPU's 1,000 a second, each answer taking 100 ms (100 jobs
// at 1/100 of the CPU), however many slots; and the sidecar's refusals
// take the same CPU: an open loop at twice the capacity, capped at 10 in
// service, loses the CPU its 1,000 refusals a second burn (0.2 ms each:
// a fifth).
func TestCPUSharesTheServiceAndTheSidecar(t *testing.T) {
	r := Run(Scenario{Duration: 10 * time.Second, Clients: 100, Slots: func(time.Duration) int { return 1 << 20 },
		ServiceTime: time.Millisecond, Sigma: 0.01, CPU: &CPU{}, Deadline: 5 * time.Second, Seed: 1}, nil, nil)
	w := r.Window(2*time.Second, 10*time.Second)
	if x := float64(w.Good) / 8; x < 950 || x > 1050 {
		t.Errorf("closed loop of 100 on a CPU of 1 ms a request: %.0f served a second, want the CPU's 1,000", x)
	}
	if p50 := r.Percentile(0.5, 2*time.Second, 10*time.Second); p50 < 90*time.Millisecond || p50 > 110*time.Millisecond {
		t.Errorf("closed loop of 100 on a shared CPU: median latency %v, want 100 ms (100 jobs sharing it)", p50)
	}
	served := func(refuse time.Duration) float64 {
		r := Run(Scenario{Duration: 10 * time.Second, Rate: func(time.Duration) float64 { return 2000 },
			Slots: func(time.Duration) int { return 1 << 20 }, ServiceTime: time.Millisecond, Sigma: 0.01,
			CPU: &CPU{Refuse: refuse}, Deadline: 5 * time.Second, Seed: 1}, func(sluice.Clock) Limiter { return &capped{n: 10} }, nil)
		w := r.Window(2*time.Second, 10*time.Second)
		return float64(w.Good) / 8
	}
	if free, costly := served(0), served(200*time.Microsecond); free < 950 || costly < 0.7*free || costly > 0.9*free {
		t.Errorf("open loop at 2x capped at 10: %.0f served a second with free refusals, %.0f when each costs 0.2 ms of the CPU, want about 4/5 of it", free, costly)
	}
	// The closed loop capped at 10: 90 wait in the sidecar's queue, and each
	// slot handed to one of them costs 0.25 ms of the CPU: 1,000/1.25.
	r = Run(Scenario{Duration: 10 * time.Second, Clients: 100, Slots: func(time.Duration) int { return 1 << 20 },
		ServiceTime: time.Millisecond, Sigma: 0.01, CPU: &CPU{Handoff: 250 * time.Microsecond}, Deadline: 5 * time.Second, Seed: 1},
		func(sluice.Clock) Limiter { return &capped{n: 10} }, nil)
	if x := float64(r.Window(2*time.Second, 10*time.Second).Good) / 8; x < 750 || x > 850 {
		t.Errorf("closed loop of 100 capped at 10, 0.25 ms of the CPU per hand-off from the queue: %.0f served a second, want about 800", x)
	}
}

// TestBimodalAndFailFast: a tenth of the requests ten times slower halve
// a service's capacity (mean 1.9x), as loadtest/backend's model; and a
// backend failing fast past a queue of 5 holds at most its slots and 5,
// failing the rest at once instead of letting them wait.
func TestBimodalAndFailFast(t *testing.T) {
	run := func(sc Scenario) Second {
		sc.Duration, sc.Slots, sc.ServiceTime, sc.Seed = 6*time.Second, func(time.Duration) int { return 10 }, 20*time.Millisecond, 1
		sc.Rate = func(time.Duration) float64 { return 1000 }
		r := Run(sc, nil, nil)
		return r.Window(2*time.Second, 6*time.Second)
	}
	if w := run(Scenario{SlowShare: 0.1, SlowFactor: 10, Deadline: time.Hour}); (w.Good+w.Late)/4 < 240 || (w.Good+w.Late)/4 > 290 {
		t.Errorf("bimodal: %d served a second, want about 500/1.9 = 263", (w.Good+w.Late)/4)
	}
	w := run(Scenario{MaxQueue: 5, Deadline: time.Hour})
	if served := (w.Good + w.Late) / 4; served < 450 || served > 550 {
		t.Errorf("fail fast: %d served a second, want the capacity of 500", served)
	}
	if w.InSystem > 15 || w.Failed < 1500 {
		t.Errorf("fail fast: at most %d in the backend, %d failed; want <= 15 and about half of 4,000", w.InSystem, w.Failed)
	}
}
