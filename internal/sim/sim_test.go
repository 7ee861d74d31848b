package sim

import (
	"testing"
	"time"
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
