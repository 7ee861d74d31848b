package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// TestAnsweredStallRestoresTheLimit: a stall the service answers (a pause:
// the requests it held end with a success) puts the limit back where it
// stood at once, instead of regrowing it from min_limit while the load
// queues; a stall whose held requests fail (a hang, timeouts) does not,
// and a later pause is measured from the limit of its own time.
func TestAnsweredStallRestoresTheLimit(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 30, MinLimit: 2})
	held := acquireN(t, l, 30)
	clock.Advance(1500 * time.Millisecond) // a pause: nothing ends
	l.TryAcquire()
	if st := l.Stats(); st.Limit != 2 || st.Stalls != 1 {
		t.Fatalf("no stall: %+v", st)
	}
	clock.Advance(time.Millisecond)
	held[0].Release(sluice.Success) // the pause is over: the service answers what it held
	if got := l.Limit(); got != 30 {
		t.Fatalf("limit %d after the service answered through the stall, want 30 (where it stood)", got)
	}
	if got := l.Stats().Reason; got != adaptive.ReasonStallOver {
		t.Fatalf("reason %v, want stall_over", got)
	}
	for _, p := range held[1:] {
		p.Release(sluice.Success)
	}
	if got := l.Limit(); got != 30 {
		t.Fatalf("limit %d once every held request ended, want 30", got)
	}

	// A hang: the held requests time out. The limit stays at min_limit
	// for the algorithm to regrow.
	l, clock = newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 30, MinLimit: 2})
	held = acquireN(t, l, 30)
	clock.Advance(1500 * time.Millisecond)
	l.TryAcquire()
	held[0].Release(sluice.Ignore) // a client that left says nothing
	held[1].Release(sluice.Dropped)
	for _, p := range held[2:] {
		p.Release(sluice.Success) // answered after the first timed out: no longer the first word
	}
	if got := l.Limit(); got != 2 {
		t.Fatalf("limit %d after the held requests timed out, want min_limit 2", got)
	}
}
