package adaptive

import (
	"testing"
	"time"
)

// TestDownProbe: with demand over the limit and the algorithm holding, a
// down-probe sets the limit to 0.75x, holds it a round trip to settle and
// one to measure, and keeps it when goodput rose there beyond chance (what
// it cut was queue): the kept limit is then a ceiling on the algorithm's
// growth while demand exceeds it. A probe whose goodput fell is undone,
// and the next waits twice as long; a closed loop, a noisy or slow
// service, or clients turned away past maxTurnedAway per success (sending
// again at once) are never down-probed.
func TestDownProbe(t *testing.T) {
	const win = 100 * time.Millisecond
	type world struct {
		g   goodput
		now int64
	}
	// window closes one window at limit with goodput x (per ns) and n
	// successes, demand over the limit.
	window := func(w *world, limit, x float64, n int64) {
		w.now += int64(win)
		w.g.observe(gpWindow{limit: limit, x: x, n: n, sat: true})
	}
	// probe runs a down-probe from 16 whose windows at the lower limit
	// serve x; it returns the limit chosen at its end.
	probe := func(t *testing.T, w *world, x float64) float64 {
		t.Helper()
		for range 3 {
			window(w, 16, 1.0, 100)
		}
		next, why := w.g.adjust(w.now, 16, 16.5, 1000, false, 50*time.Millisecond, 2, false)
		if next != 12 || why != ReasonGoodput {
			t.Fatalf("the algorithm holding over demand: limit %v (%v), want a down-probe to 12", next, why)
		}
		// A round trip of 50 ms is one window: 2 to settle, 3 to measure,
		// the last of which ends the probe.
		for i := range 4 {
			window(w, 12, x, int64(100*x))
			next, _, held := w.g.holding(w.now, 12, 1000, false, 50*time.Millisecond)
			if !held || next != 12 {
				t.Fatalf("window %d of the probe: limit %v, held %v; want 12 held", i+1, next, held)
			}
		}
		window(w, 12, x, int64(100*x))
		next, why, held := w.g.holding(w.now, 12, 1000, false, 50*time.Millisecond)
		if !held || why != ReasonGoodput {
			t.Fatalf("the probe's end: held %v (%v)", held, why)
		}
		return next
	}

	t.Run("more goodput: kept as a ceiling", func(t *testing.T) {
		w := &world{g: newGoodput(win)}
		if next := probe(t, w, 1.2); next != 12 {
			t.Fatalf("goodput 20%% higher at 12: went back to %v, want 12 kept", next)
		}
		if w.g.ceiling != 12 || w.g.downKept != 1 {
			t.Fatalf("ceiling %v, kept %d; want 12, 1", w.g.ceiling, w.g.downKept)
		}
		window(w, 12, 1.2, 120)
		if next, _ := w.g.adjust(w.now, 12, 15, 1000, false, 50*time.Millisecond, 2, false); next != 12 {
			t.Errorf("the algorithm grew to %v past the ceiling while demand exceeded it, want 12", next)
		}
		// Demand falls under the limit: no ceiling.
		w.now += int64(win)
		w.g.observe(gpWindow{limit: 12, x: 0.5, n: 50, sat: false})
		if next, _ := w.g.adjust(w.now, 12, 15, 1000, false, 50*time.Millisecond, 2, false); next != 15 {
			t.Errorf("demand under the limit, the ceiling still held the algorithm at %v, want 15", next)
		}
	})
	t.Run("less goodput: undone", func(t *testing.T) {
		w := &world{g: newGoodput(win)}
		if next := probe(t, w, 0.75); next != 16 {
			t.Fatalf("goodput a quarter lower at 12: limit %v, want back to 16", next)
		}
		if w.g.ceiling != 0 || w.g.downUndone != 1 || w.g.downEvery != 2*time.Second {
			t.Fatalf("ceiling %v, undone %d, next wait %v; want none, 1, 2s", w.g.ceiling, w.g.downUndone, w.g.downEvery)
		}
	})
	t.Run("as much goodput: undone", func(t *testing.T) {
		w := &world{g: newGoodput(win)}
		if next := probe(t, w, 1.0); next != 16 {
			t.Fatalf("goodput unchanged at 12: limit %v, want back to 16 (only a gain beyond chance is kept)", next)
		}
	})
	t.Run("closed loop, noisy or slow service, resends: none", func(t *testing.T) {
		for _, c := range []struct {
			name      string
			closed    bool
			rtt       time.Duration
			spread    float64
			resending bool
		}{
			{"closed loop", true, 50 * time.Millisecond, 2, false},
			{"answers spread 20x", false, 50 * time.Millisecond, 20, false},
			{"a round trip of 20 windows", false, 2 * time.Second, 2, false},
			{"clients sending again at once", false, 50 * time.Millisecond, 2, true},
		} {
			w := &world{g: newGoodput(win)}
			for range 20 {
				window(w, 16, 1.0, 100)
			}
			if next, why := w.g.adjust(w.now, 16, 16.5, 1000, c.closed, c.rtt, c.spread, c.resending); next < 16 {
				t.Errorf("%s: a down-probe to %v (%v)", c.name, next, why)
			}
		}
	})
}
