package adaptive

import (
	"testing"
	"time"
)

// TestQueuedAtComparesLikeWithLike: firstProbe.queuedAt counts the
// requests admitted alone in flight among those below half the gate only
// when fewer than two others are there to compare with. Before 2 slots the
// gate is 4, and the only others below its half are those admitted at 2:
// one, fast, beside three admitted alone, while most of those above it
// were slow: a queue, which went unseen when those admitted alone never
// counted (the initial limit then queued for seconds in the service). A
// heavy tail's burst has three below half a gate of 8, one of them slow,
// and 7 of 12 slow above it: no queue. Its first request, admitted alone
// and answered first, fast, tipped the comparison when it always counted
// (a closed loop of 1,024 before 50 slots, sigma 1, was served 30-34% of
// the service's capacity in 3 of 4 runs through the binary, 57-78% before).
func TestQueuedAtComparesLikeWithLike(t *testing.T) {
	ms := int64(time.Millisecond)
	type req struct{ in, rtt int64 }
	for _, c := range []struct {
		name  string
		gate  int64
		reqs  []req
		queue bool
	}{
		{"two slots", 4, []req{{1, 9}, {1, 11}, {1, 10}, {2, 12}, {3, 30}, {3, 12}, {4, 40}, {4, 45}, {3, 35}, {4, 50}}, true},
		{"heavy tail's burst", 8, []req{{1, 5}, {2, 8}, {3, 40}, {4, 12},
			{5, 30}, {6, 3}, {7, 90}, {8, 15}, {9, 25}, {10, 60}, {11, 4}, {12, 35}, {13, 22}, {14, 9}, {15, 70}, {16, 11}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &firstProbe{want: 20}
			f.fast.Store(10 * ms)
			f.gate.Store(c.gate)
			for i, r := range c.reqs {
				f.in[i].Store(r.in)
				f.at[i].Store(1)
				f.rtt[i].Store(r.rtt * ms)
			}
			f.n.Store(int64(len(c.reqs)))
			if got := f.queuedAt(time.Second.Nanoseconds()); got != c.queue {
				t.Errorf("queuedAt = %v, want %v", got, c.queue)
			}
		})
	}
}
