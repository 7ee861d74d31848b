package adaptive_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// driveDrops runs a closed load of demand requests in flight on a service
// that answers each in 5 ms, for steps of 5 ms; dropped says whether the
// n-th request, admitted with in others in flight (itself included), fails
// as a drop. It returns the requests refused and dropped in the last
// second.
func driveDrops(l *adaptive.Limiter, clock *sluice.FakeClock, steps, demand int, dropped func(n, in int) bool) (refused, drops int) {
	type held struct {
		p  adaptive.Permit
		in int
	}
	n := 0
	for step := range steps {
		var batch []held
		for range demand {
			p, ok := l.TryAcquire()
			if !ok {
				if step >= steps-200 {
					refused++
				}
				continue
			}
			batch = append(batch, held{p, len(batch) + 1})
		}
		clock.Advance(5 * time.Millisecond)
		for _, h := range batch {
			n++
			if dropped(n, h.in) {
				if step >= steps-200 {
					drops++
				}
				h.p.Release(sluice.Dropped)
			} else {
				h.p.Release(sluice.Success)
			}
		}
	}
	return refused, drops
}

// TestBackgroundDropsAreNoOverload: a service whose dependency fails one
// request in twenty whatever the load keeps its limit (every window had a
// drop, and each cut the limit by 5% until three quarters of the load were
// shed).
func TestBackgroundDropsAreNoOverload(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 40})
	refused, _ := driveDrops(l, clock, 1000, 30, func(n, _ int) bool { return n%20 == 0 })
	if refused > 0 || l.Limit() < 30 {
		t.Fatalf("background failures read as overload: limit %d, %d refused in the last second of a load of 30", l.Limit(), refused)
	}
}

// TestOverloadDropsStillCut: a service that fails the requests over its
// bound in flight (a queue bound) never has its drops taken for background,
// whether few of the load's requests fail (a bound near the limit: at a
// quarter lower limit none would) or many (more than a quarter).
func TestOverloadDropsStillCut(t *testing.T) {
	for _, bound := range []int{20, 30, 35} {
		l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 40})
		var why []adaptive.Reason
		l.SetOnReason(func(r adaptive.Reason, _ int) { why = append(why, r) })
		driveDrops(l, clock, 2000, 60, func(_, in int) bool { return in > bound })
		for _, r := range why {
			if r == adaptive.ReasonBackgroundDrops {
				t.Fatalf("a service failing past %d in flight, a load of 60: its overload taken for background failures (%v)", bound, why)
			}
		}
		if !slices.Contains(why, adaptive.ReasonDrops) {
			t.Fatalf("bound %d: no cut on drops: %v", bound, why)
		}
	}
}
