package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// TestFirstRequestsDeepQueueProbesAtOnce: the first 20 requests sent at
// once into one slot of 1 ms are answered one after another, each 1 ms
// after the one before: the earlier half queued too (its median, 6 ms, is
// 6x the fastest answer). The window closes as soon as it holds enough
// answers, not after its 100 ms (which before one slot held 20 in flight,
// 70 answers at 22 ms: the run's p99), and the probe starts at half the
// concurrency the earlier half was admitted at (they queued there), not at
// half the limit; when it ends the limit stays at most at that
// concurrency. Before, nothing moved until the window's end.
func TestFirstRequestsDeepQueueProbesAtOnce(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	ps := saturate(t, l, 20)
	for _, p := range ps[:10] {
		clock.Advance(time.Millisecond)
		p.Release(sluice.Success)
	}
	st := l.Stats()
	if !st.Probing || st.Windows != 1 {
		t.Fatalf("10 ms in, %d windows closed, probing %v: want the first window closed early and a probe", st.Windows, st.Probing)
	}
	// The earlier half was admitted at 1-10 in flight, 5.5 on average.
	if st.Limit > 3 {
		t.Errorf("the probe began at %d, want at most 3 (half of the 5.5 the earlier half queued at)", st.Limit)
	}
	// The rest drain. The probe's answers take 4 ms: not as much faster
	// than the earlier half's 6 ms at 5.5 in flight as a queue would make
	// them, so it goes no deeper; it still found the service saturated.
	for _, p := range ps[10:] {
		clock.Advance(time.Millisecond)
		p.Release(sluice.Success)
	}
	for range 200 {
		if !l.Stats().Probing {
			break
		}
		held := fill(l)
		clock.Advance(4 * time.Millisecond)
		for _, p := range held {
			p.Release(sluice.Success)
		}
	}
	st = l.Stats()
	if st.Probing || st.Baseline == 0 {
		t.Fatalf("probing %v, baseline %v: want the probe over and a baseline", st.Probing, st.Baseline)
	}
	if st.Limit > 5 {
		t.Errorf("limit %d after the probe, want at most 5 (the earlier half queued at 5.5 in flight)", st.Limit)
	}
}

// TestFirstRequestsShallowQueueWaitForTheWindow: the first 20 requests
// before 10 slots of 10 ms: the earlier 10 answered alike, the later 10
// twice as slow (they waited for a slot). A queue, but one the earlier
// half did not meet: the window is read at its end as before (a limit
// near the slots is the window's to read; closing early there held one
// simulated bimodal service at 5-9 for seconds).
func TestFirstRequestsShallowQueueWaitForTheWindow(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	ps := saturate(t, l, 20)
	clock.Advance(10 * time.Millisecond)
	for _, p := range ps[:10] {
		clock.Advance(100 * time.Microsecond)
		p.Release(sluice.Success)
	}
	clock.Advance(10 * time.Millisecond)
	for _, p := range ps[10:] {
		clock.Advance(100 * time.Microsecond)
		p.Release(sluice.Success)
	}
	if st := l.Stats(); st.Probing || st.Windows != 0 {
		t.Fatalf("%d windows closed, probing %v at 22 ms, want the window still open", st.Windows, st.Probing)
	}
	clock.Advance(100 * time.Millisecond)
	saturatedWindow(t, l, clock, 20, 10*time.Millisecond)
	if st := l.Stats(); !st.Probing {
		t.Fatalf("no probe at the window's end (limit %d, baseline %v)", st.Limit, st.Baseline)
	}
}
