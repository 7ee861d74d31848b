package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// TestFreedStreamsHoldNoPlaceAndReadAsNoStall: streams the service answered
// (Free) give their places back at once, are no latency sample, and, while
// they stay open for longer than a stall takes, are neither counted in
// flight nor read as a hang; the Release at their end frees nothing twice.
func TestFreedStreamsHoldNoPlaceAndReadAsNoStall(t *testing.T) {
	for _, part := range []bool{false, true} {
		l, clock, acquire := newAcquirer(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 4, MinLimit: 1}, part)
		var streams []adaptive.Permit
		for range 12 { // three times the limit, each answered at once
			p, ok := acquire()
			if !ok {
				t.Fatalf("partitioned %v: stream %d refused: the freed streams still hold the limit", part, len(streams))
			}
			clock.Advance(time.Millisecond)
			p.Free()
			p.Free() // twice is once
			streams = append(streams, p)
		}
		if n := l.InFlight(); n != 0 {
			t.Fatalf("partitioned %v: %d in flight with every stream freed", part, n)
		}
		// The streams stay open for minutes; ordinary requests go on.
		for range 3 {
			clock.Advance(2 * time.Second)
			held := fill(l)
			if len(held) != l.Limit() || len(held) < 4 {
				t.Fatalf("partitioned %v: %d admitted with the limit at %d", part, len(held), l.Limit())
			}
			for _, p := range held {
				p.Release(sluice.Success)
			}
		}
		st := l.Stats()
		if st.Stalls != 0 || st.Stuck != 0 {
			t.Fatalf("partitioned %v: open streams read as a hang: %+v", part, st)
		}
		// The streams end: nothing is freed twice, and no sample of their
		// minutes is taken.
		for _, p := range streams {
			p.Release(sluice.Success)
		}
		if n := l.InFlight(); n != 0 {
			t.Fatalf("partitioned %v: in flight %d after the streams ended, want 0", part, n)
		}
		if st := l.Stats(); st.Last.RTT > time.Second {
			t.Fatalf("partitioned %v: a stream's time was taken as a round trip: %+v", part, st.Last)
		}
		held := fill(l)
		if len(held) != l.Limit() {
			t.Fatalf("partitioned %v: admitted %d with the limit at %d: a place freed twice", part, len(held), l.Limit())
		}
	}
}
