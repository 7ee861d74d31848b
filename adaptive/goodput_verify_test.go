package adaptive

import (
	"testing"
	"time"
)

// TestRevertVerifiedOnceMeasured: a revert of cuts that seemed to cost
// goodput is verified at the first windows that measure goodput at the
// restored limit, however many windows that takes; when goodput did not
// come back with the limit, the service changed and the floor goes. Before,
// a verification whose last window could not measure (demand under the
// limit, or too few successes) left the floor standing for its whole hold:
// before a 4-slot heavy-tailed service slowing 10% per queued request, a
// cut of 22 to 16 measured against goodput from before the service's
// queue built was undone, and the limit held at 22 for 5 s (simulated 78%
// of capacity in seconds 1-6 at 5x, now 88%).
func TestRevertVerifiedOnceMeasured(t *testing.T) {
	g := newGoodput(100 * time.Millisecond)
	now := int64(0)
	win := func(limit, x float64, n int64, sat bool) {
		now += int64(100 * time.Millisecond)
		g.observe(gpWindow{limit: limit, x: x, n: n, sat: sat})
	}
	win(22, 1.0, 100, true)
	win(22, 1.0, 100, true)
	if next, _ := g.adjust(now, 22, 16, 1000, false, 0, 1, false); next != 16 {
		t.Fatalf("setup: the cut to 16 was not let through: %v", next)
	}
	win(16, 0.5, 100, true)
	win(16, 0.5, 100, true)
	if next, why := g.adjust(now, 16, 16, 1000, false, 0, 1, false); next != 22 || why != ReasonBusy {
		t.Fatalf("setup: cuts that halved goodput were not undone: %v %v", next, why)
	}
	// The restored limit's windows measure nothing (demand under it).
	for range 3 {
		win(22, 0.5, 100, false)
		g.adjust(now, 22, 22, 1000, false, 0, 1, false)
	}
	if g.floor != 22 {
		t.Fatalf("the floor went before goodput was measured at the restored limit: %v", g.floor)
	}
	// Then they do: goodput did not come back with the limit.
	win(22, 0.5, 100, true)
	win(22, 0.5, 100, true)
	g.adjust(now, 22, 22, 1000, false, 0, 1, false)
	if g.floor != 0 {
		t.Errorf("floor %v after goodput at the restored limit stayed at half: the service changed, want the floor gone", g.floor)
	}
}
