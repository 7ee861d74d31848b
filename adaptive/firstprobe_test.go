package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// TestFirstRequestsMeasureTheBaseline: a load that begins admits its first
// 20 requests at a concurrency rising from 1 to 20; when the later 10 take
// as long as the earlier 10, the service did not queue at 20, and the
// earlier 10's median is the no-load RTT. The limiter takes it instead of
// probing at half (before a 500 ms service: one RTT waiting for the
// requests over half to end, then one for the probe's own, while the
// clients over the limit wait), and takes slow start's step at once.
// Before, the first saturated window always probed.
func TestFirstRequestsMeasureTheBaseline(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	ps := saturate(t, l, 20)
	// They end 501-520 ms after, in no order of their admission.
	clock.Advance(500 * time.Millisecond)
	for k := range 20 {
		clock.Advance(time.Millisecond)
		ps[k%2*10+k/2].Release(sluice.Success)
	}
	if st := l.Stats(); st.Probing {
		t.Fatalf("probing at %d while the first requests' answer was still to come", st.Limit)
	}
	// The next saturated window reads them.
	ps = fill(l)
	clock.Advance(500 * time.Millisecond)
	for _, p := range ps {
		p.Release(sluice.Success)
	}
	st := l.Stats()
	if st.Probing || st.Probes != 0 {
		t.Fatalf("probed (%d probes, probing %v) although the first requests measured the service without a queue", st.Probes, st.Probing)
	}
	if st.Baseline < 500*time.Millisecond || st.Baseline > 515*time.Millisecond {
		t.Errorf("baseline %v, want the earlier 10's median (501-510 ms)", st.Baseline)
	}
	if st.Limit < 2*len(ps) {
		t.Errorf("limit %d after the first requests found no queue at %d with demand over it, want slow start's step to >= %d", st.Limit, len(ps), 2*len(ps))
	}
}

// TestFirstRequestsThatQueueProbe: when the later half of the first
// requests take longer (here twice), the service queued at the
// concurrency they ran at: no baseline from them, the limiter probes.
func TestFirstRequestsThatQueueProbe(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	saturatedQueuedWindow(t, l, clock, 20, 100*time.Millisecond)
	st := l.Stats()
	if !st.Probing || st.Baseline != 0 {
		t.Fatalf("probing %v, baseline %v after first requests that queued, want a probe and no baseline yet", st.Probing, st.Baseline)
	}
}

// TestFirstRequestsThatDropProbe: a drop among the first requests says
// nothing of the no-load RTT: the limiter probes as before.
func TestFirstRequestsThatDropProbe(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	ps := saturate(t, l, 20)
	clock.Advance(100 * time.Millisecond)
	ps[15].Release(sluice.Ignore)
	for _, p := range append(ps[:15], ps[16:]...) {
		p.Release(sluice.Success)
	}
	if st := l.Stats(); !st.Probing {
		t.Fatalf("no probe after first requests of which one measured nothing (limit %d, baseline %v)", st.Limit, st.Baseline)
	}
}

// TestFirstRequestsWithARestartProbe: one of the first requests restarted
// its clock (a slow upload's end): its RTT no longer runs from its
// admission, so the first requests measure nothing and the limiter
// probes as before.
func TestFirstRequestsWithARestartProbe(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	ps := saturate(t, l, 20)
	clock.Advance(50 * time.Millisecond)
	ps[3].Restart()
	clock.Advance(50 * time.Millisecond)
	for _, p := range ps {
		p.Release(sluice.Success)
	}
	if st := l.Stats(); !st.Probing {
		t.Fatalf("no probe after first requests of which one restarted its clock (limit %d, baseline %v)", st.Limit, st.Baseline)
	}
}

// TestStartGateHoldsASlowQueueOnly: twenty first requests admitted at once
// before 2 slots, answered two at a time, u apart (a queue from the third
// on). Before a service of 200 ms the twelve over the gate would take
// 600 ms to drain, longer than a window: the estimate starts from the gate
// (8). Before one answering in 50 us (the queue a closed loop's burst finds
// in the sidecar's own CPU looks the same) they drain in 150 us, within a
// window: the algorithm reads that queue, and the estimate stays where it
// was (it was cut to the gate, and a closed loop before a service
// answering at once started at 8 instead of 20).
func TestStartGateHoldsASlowQueueOnly(t *testing.T) {
	for _, c := range []struct {
		u        time.Duration
		min, max int
	}{{200 * time.Millisecond, 1, 10}, {50 * time.Microsecond, 16, 1000}} {
		l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}})
		burstBeforeTwoSlots(t, l, clock, c.u, 20)
		// A window's worth of time later, one more closes the window.
		clock.Advance(100 * time.Millisecond)
		if p, ok := l.TryAcquire(); ok {
			clock.Advance(c.u)
			p.Release(sluice.Success)
		}
		if got := l.Limit(); got < c.min || got > c.max {
			t.Errorf("answers %v apart: limit %d after the first window, want %d-%d", c.u, got, c.min, c.max)
		}
	}
}

// TestStartGateSaysWhy: a limit the start gate holds down says so
// (Reason start_gate), for /v1/state and the metrics.
func TestStartGateSaysWhy(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}})
	var why []adaptive.Reason
	l.SetOnReason(func(r adaptive.Reason, _ int) { why = append(why, r) })
	// Two slots of 200 ms: the first four answer fast, the rest queue.
	burstBeforeTwoSlots(t, l, clock, 200*time.Millisecond, 6)
	if got := l.Limit(); got >= 20 {
		t.Fatalf("limit %d after a queue behind 2 slots showed, want under the initial 20", got)
	}
	if len(why) == 0 || why[len(why)-1] != adaptive.ReasonStart || adaptive.ReasonStart.String() != "start_gate" {
		t.Errorf("reasons %v, want the last start_gate", why)
	}
}

// burstBeforeTwoSlots admits the first 20 requests at once and releases
// the first n of them as 2 slots of u would answer them: two at a time, u
// apart (the third on queued). The rest stay in flight.
func burstBeforeTwoSlots(t *testing.T, l *adaptive.Limiter, clock *sluice.FakeClock, u time.Duration, n int) {
	t.Helper()
	var ps []adaptive.Permit
	for range 20 {
		p, ok := l.TryAcquire()
		if !ok {
			t.Fatal("the initial limit refused one of the first 20")
		}
		ps = append(ps, p)
	}
	at := time.Duration(0)
	for k, p := range ps[:n] {
		end := time.Duration(k/2+1) * u
		clock.Advance(end - at)
		at = end
		p.Release(sluice.Success)
	}
}

// TestConstantServiceHeldAtTwiceItsSlots: an open loop (Poisson) at twice
// the capacity of 5 slots that answer in 50 ms, all but exactly. Requests
// queued behind one service time take 1.5 times the fastest, behind two
// twice: with answers this alike, the start gate (firstProbe.tolerance)
// and a probe's step (deeper) read those as a queue, not as a lognormal
// service's spread, which reaches twice the fastest without one. Before,
// the first probe stepped to 10 in flight, measured 100 ms for the
// baseline, and the limit grew back to 22-26 (p99 237-266 ms in the
// second second; through the binary, the sweep's cells at 250 ms
// against 154). Now it is held at about twice the slots from the second
// second on. (The first second depends on whether the gate binds before
// the first window closes: with Poisson arrivals, in one seed of three.)
func TestConstantServiceHeldAtTwiceItsSlots(t *testing.T) {
	sh := simShape{name: "5x50ms-constant", slots: 5, svc: 50 * time.Millisecond, sigma: 0.001}
	for seed := uint64(1); seed <= 3; seed++ {
		r := runSluice(sh.open(2, 2*time.Second, seed), "gradient2")
		second := r.Seconds[1]
		if second.InSystem > 12 || second.P99 > 154*time.Millisecond {
			t.Errorf("seed %d: the second second had up to %d in the service, p99 %v; want <= 12 (twice the 5 slots, and 2) and <= 154 ms",
				seed, second.InSystem, second.P99)
		}
	}
}

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
