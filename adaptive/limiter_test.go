package adaptive_test

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

var start = time.Unix(1_699_920_000, 0)

func newLimiter(t *testing.T, cfg adaptive.Config) (*adaptive.Limiter, *sluice.FakeClock) {
	t.Helper()
	clock := sluice.NewFakeClock(start)
	cfg.Clock = clock
	l, err := adaptive.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// TestNeverAboveLimit races many goroutines for a small limit: the number
// in flight, counted by the admitted themselves, never exceeds it.
func TestNeverAboveLimit(t *testing.T) {
	l, err := adaptive.New(adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 5, MaxLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	var inside, peak atomic.Int64
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				p, ok := l.TryAcquire()
				if !ok {
					continue
				}
				admitted.Add(1)
				n := inside.Add(1)
				for {
					m := peak.Load()
					if n <= m || peak.CompareAndSwap(m, n) {
						break
					}
				}
				runtime.Gosched()
				inside.Add(-1)
				p.Release(sluice.Success)
			}
		}()
	}
	wg.Wait()
	if peak.Load() > 5 {
		t.Errorf("peak in flight %d above the limit 5", peak.Load())
	}
	if admitted.Load() == 0 || l.InFlight() != 0 {
		t.Errorf("admitted %d, in flight at the end %d", admitted.Load(), l.InFlight())
	}
	st := l.Stats()
	if st.Admitted != uint64(admitted.Load()) || st.Admitted+st.Rejected != 16*2000 {
		t.Errorf("stats %+v do not add up to %d attempts", st, 16*2000)
	}
}

func TestReleaseOnce(t *testing.T) {
	l, _ := newLimiter(t, adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 2})
	a, _ := l.TryAcquire()
	b, _ := l.TryAcquire()
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("third admitted at limit 2")
	}
	a.Release(sluice.Success)
	a.Release(sluice.Success) // ignored
	copyOfA := a
	copyOfA.Release(sluice.Dropped) // ignored too: the same permit
	if got := l.InFlight(); got != 1 {
		t.Fatalf("in flight %d after one release (twice), want 1", got)
	}
	c, ok := l.TryAcquire()
	if !ok {
		t.Fatal("no room after a release")
	}
	// The slot behind a may now serve c: a's stale release must not free it.
	a.Release(sluice.Success)
	if got := l.InFlight(); got != 2 {
		t.Fatalf("a stale release freed a slot: in flight %d, want 2", got)
	}
	b.Release(sluice.Ignore)
	c.Release(sluice.Ignore)
	adaptive.Permit{}.Release(sluice.Success) // the zero permit is harmless
	if st := l.Stats(); st.Dropped != 0 || st.InFlight != 0 {
		t.Errorf("stats %+v", st)
	}
}

// drive runs windows of traffic on a fake clock: in each window, batches of
// inflight requests are admitted and released after rtt with outcome o, and
// a lone request closes the window, so that each window holds exactly its
// own traffic.
func drive(l *adaptive.Limiter, clock *sluice.FakeClock, windows, inflight int, rtt time.Duration, o sluice.Outcome) {
	const window = 100 * time.Millisecond
	for w := 0; w < windows; w++ {
		passed := time.Duration(0)
		for ; passed+rtt < window; passed += rtt {
			var ps []adaptive.Permit
			for i := 0; i < inflight; i++ {
				if p, ok := l.TryAcquire(); ok {
					ps = append(ps, p)
				}
			}
			clock.Advance(rtt)
			for _, p := range ps {
				p.Release(o)
			}
		}
		if p, ok := l.TryAcquire(); ok {
			clock.Advance(max(rtt, window-passed))
			p.Release(o)
		}
	}
}

func TestAIMD(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: adaptive.AIMD{}, InitialLimit: 10, MaxLimit: 15, Recovery: 1})
	drive(l, clock, 3, 10, 10*time.Millisecond, sluice.Success)
	if got := l.Limit(); got != 13 {
		t.Fatalf("after 3 healthy, used windows: limit %d, want 13 (+1 each)", got)
	}
	drive(l, clock, 10, 20, 10*time.Millisecond, sluice.Success)
	if got := l.Limit(); got != 15 {
		t.Fatalf("limit %d, want the max 15", got)
	}
	drive(l, clock, 1, 20, 10*time.Millisecond, sluice.Dropped)
	if got := l.Limit(); got != 13 {
		t.Fatalf("after a window of drops: limit %d, want 13 (15 x 0.9)", got)
	}
	// App-limited: few requests in flight, no growth.
	drive(l, clock, 5, 2, 10*time.Millisecond, sluice.Success)
	if got := l.Limit(); got != 13 {
		t.Fatalf("app-limited windows moved the limit to %d", got)
	}
	if st := l.Stats(); st.Dropped == 0 || st.Windows == 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestDropsLowerTheLimit: a run of timeouts alone (no successes) closes
// windows and lowers the limit, down to the minimum and no further.
func TestDropsLowerTheLimit(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.AIMD{}, adaptive.Vegas{}, &adaptive.Gradient2{}} {
		t.Run(alg.Name(), func(t *testing.T) {
			l, clock := newLimiter(t, adaptive.Config{Algorithm: alg, InitialLimit: 50, MinLimit: 4})
			drive(l, clock, 100, 60, 20*time.Millisecond, sluice.Dropped)
			if got := l.Limit(); got != 4 {
				t.Errorf("after 100 windows of drops: limit %d, want the minimum 4", got)
			}
		})
	}
}

// TestSlowStartAfterOverload: once drops stop and the RTT is back at its
// no-load level, the limit grows multiplicatively back, not by +1.
func TestSlowStartAfterOverload(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.AIMD{}, adaptive.Vegas{}, &adaptive.Gradient2{}} {
		t.Run(alg.Name(), func(t *testing.T) {
			l, clock := newLimiter(t, adaptive.Config{Algorithm: alg, InitialLimit: 100, MaxLimit: 100})
			drive(l, clock, 3, 100, 10*time.Millisecond, sluice.Success)
			for i := 0; i < 200 && l.Limit() > 60; i++ {
				drive(l, clock, 1, 100, 10*time.Millisecond, sluice.Dropped)
			}
			low := l.Limit()
			if low > 60 {
				t.Fatalf("200 windows of drops left the limit at %d", low)
			}
			drive(l, clock, 6, 100, 10*time.Millisecond, sluice.Success)
			if got := l.Limit(); got < 90 {
				t.Errorf("6 healthy windows after the overload: limit %d (from %d), want back near 100", got, low)
			}
		})
	}
}

// TestNoCollapseNoDrift: one fast sample does not collapse the limit, and
// constant slow samples while app-limited do not push it up.
func TestNoCollapseNoDrift(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.Vegas{}, &adaptive.Gradient2{}, adaptive.AIMD{}} {
		t.Run(alg.Name(), func(t *testing.T) {
			l, clock := newLimiter(t, adaptive.Config{Algorithm: alg, InitialLimit: 40})
			drive(l, clock, 20, 40, 50*time.Millisecond, sluice.Success)
			settled := l.Limit()
			drive(l, clock, 1, 40, time.Millisecond, sluice.Success) // one fast window
			drive(l, clock, 3, 40, 50*time.Millisecond, sluice.Success)
			if got := l.Limit(); got < settled*8/10 {
				t.Errorf("one fast window: limit fell from %d to %d", settled, got)
			}
			before := l.Limit()
			drive(l, clock, 50, before/4, 90*time.Millisecond, sluice.Success)
			if got := l.Limit(); got > before {
				t.Errorf("constant slow, app-limited samples: limit drifted from %d to %d", before, got)
			}
		})
	}
}

// driveQueue runs windows against a service of c slots and service time
// svc: a batch of n admitted requests takes svc x max(1, n/c), as a queue
// in front of the slots makes it.
func driveQueue(l *adaptive.Limiter, clock *sluice.FakeClock, windows, offered, c int, svc time.Duration) {
	driveBatches(l, clock, windows, offered, func(n int) time.Duration {
		return svc * time.Duration(max(c, n)) / time.Duration(c)
	})
}

// driveBatches runs windows of batches: offered requests try to enter,
// and the n admitted all end, successful, rtt(n) later.
func driveBatches(l *adaptive.Limiter, clock *sluice.FakeClock, windows, offered int, rtt func(n int) time.Duration) {
	const window = 100 * time.Millisecond
	for w := 0; w < windows; w++ {
		for passed := time.Duration(0); passed < window; {
			var ps []adaptive.Permit
			for i := 0; i < offered; i++ {
				if p, ok := l.TryAcquire(); ok {
					ps = append(ps, p)
				}
			}
			d := rtt(len(ps))
			clock.Advance(d)
			passed += d
			for _, p := range ps {
				p.Release(sluice.Success)
			}
		}
	}
}

// TestBacksOffOnQueueing: RTT that grows with the requests in flight means
// a queue: every algorithm lowers the limit towards the service's slots.
func TestBacksOffOnQueueing(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.AIMD{}, adaptive.Vegas{}, &adaptive.Gradient2{}} {
		t.Run(alg.Name(), func(t *testing.T) {
			l, clock := newLimiter(t, adaptive.Config{Algorithm: alg, InitialLimit: 80, Recovery: 1})
			driveQueue(l, clock, 100, 200, 20, 10*time.Millisecond)
			if got := l.Limit(); got > 40 {
				t.Errorf("queueing at 80 in flight for 20 slots: limit %d after 10 s, want at most 2x the slots", got)
			}
		})
	}
}

// TestFollowsASlowerService: the service takes twice as long at the same
// concurrency (no queue): the limit does not collapse, it stays near the
// slots.
func TestFollowsASlowerService(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.AIMD{}, adaptive.Vegas{}, &adaptive.Gradient2{}} {
		t.Run(alg.Name(), func(t *testing.T) {
			l, clock := newLimiter(t, adaptive.Config{Algorithm: alg, InitialLimit: 20})
			driveQueue(l, clock, 50, 200, 20, 10*time.Millisecond)
			driveQueue(l, clock, 30, 200, 20, 20*time.Millisecond)
			// The limit over the next 2 s, window by window (a probe halves
			// it for a moment: the median says where it stands).
			var seen []int
			for range 20 {
				driveQueue(l, clock, 1, 200, 20, 20*time.Millisecond)
				seen = append(seen, l.Limit())
			}
			slices.Sort(seen)
			if got := seen[len(seen)/2]; got < 18 {
				t.Errorf("3-5 s after the service time doubled: median limit %d, want near the 20 slots (%v)", got, seen)
			}
		})
	}
}

// TestFollowsACreepingService: the service gets slower window after
// window (10 ms to 40 ms over 10 s, 20 slots, no queue): each probe finds it
// slower than the last, and between probes the baseline follows the creep,
// so the limit stays above the slots instead of being cut as if the rise
// were a queue until the next probe.
func TestFollowsACreepingService(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	driveQueue(l, clock, 30, 200, 20, 10*time.Millisecond)
	var seen []int
	for w := range 100 {
		driveQueue(l, clock, 1, 200, 20, 10*time.Millisecond+time.Duration(w)*30*time.Millisecond/100)
		if w >= 20 {
			seen = append(seen, l.Limit())
		}
	}
	slices.Sort(seen)
	if got := seen[len(seen)/2]; got < 23 {
		t.Errorf("while the service creeps 10 -> 40 ms: median limit %d, want >= 23 (the 20 slots and the tolerance's queue): %v", got, seen)
	}
}

// TestProbeMeasuresFirstAdmitted: a probe's baseline is the median of the
// first requests it admitted, all of them, not of the first to end (the
// fastest: a baseline biased low reads every later window as a queue).
func TestProbeMeasuresFirstAdmitted(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 100})
	// One saturated window with no baseline yet, the first requests
	// queueing: a probe at half (of the limit that window led to).
	saturatedQueuedWindow(t, l, clock, 100, 100*time.Millisecond)
	if st := l.Stats(); !st.Probing || st.Limit < 35 || st.Limit > 110 {
		t.Fatalf("after a saturated window with no baseline: probing %v at limit %d, want a probe at about half", st.Probing, st.Limit)
	}
	// The probe admits 20 requests that take 30 ms, then 15 that take 10 ms
	// and end first.
	var slow, fast []adaptive.Permit
	for i := range 35 {
		p, ok := l.TryAcquire()
		if !ok {
			t.Fatal("refused under the probe's limit")
		}
		if i < 20 {
			slow = append(slow, p)
		} else {
			fast = append(fast, p)
		}
	}
	clock.Advance(10 * time.Millisecond)
	for _, p := range fast {
		p.Release(sluice.Success)
	}
	clock.Advance(20 * time.Millisecond)
	for _, p := range slow {
		p.Release(sluice.Success)
	}
	st := l.Stats()
	if st.Probing {
		t.Fatal("the probe did not end once its requests ended")
	}
	if st.Baseline < 27*time.Millisecond || st.Baseline > 33*time.Millisecond {
		t.Errorf("baseline %v, want the first admitted requests' 30 ms", st.Baseline)
	}
}

// TestProbeEndsOnceItsMedianIsKnown: a probe of a heavy-tailed service
// ends as soon as its samples' median can no longer move, not when its
// slowest sample ends: the samples still in flight have each taken longer
// than the median already seen. Before, the probe held the limit at half
// until its slowest ended (lognormal sigma 1: ten times the median among
// 20), which cost a closed loop before 50 x 100 ms a fifth of its goodput.
func TestProbeEndsOnceItsMedianIsKnown(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 100})
	saturatedQueuedWindow(t, l, clock, 100, 100*time.Millisecond)
	before := l.Stats()
	if !before.Probing {
		t.Fatal("no probe after a saturated window with no baseline")
	}
	// The probe's 20 samples: 16 take 10-15 ms, 4 take seconds.
	samples := acquireN(t, l, 20)
	fast, slow := samples[:16], samples[16:]
	clock.Advance(10 * time.Millisecond)
	for _, p := range fast[:15] {
		p.Release(sluice.Success)
	}
	if !l.Stats().Probing {
		t.Fatal("the probe ended before its median was known (the 5 in flight had taken no longer than the 15 ended)")
	}
	clock.Advance(5 * time.Millisecond)
	fast[15].Release(sluice.Success)
	st := l.Stats()
	if st.Probing {
		t.Fatalf("still probing at limit %d with 16 of 20 samples ended at 10-15 ms and 4 in flight for 15 ms: the median is known", st.Limit)
	}
	if st.Baseline < 9*time.Millisecond || st.Baseline > 11*time.Millisecond {
		t.Errorf("baseline %v, want the samples' median, 10 ms", st.Baseline)
	}
	if st.Limit <= before.Limit {
		t.Errorf("limit %d after the probe, want it restored above the probe's %d", st.Limit, before.Limit)
	}
	for _, p := range slow {
		p.Release(sluice.Success)
	}
}

// TestProbeMeasuresOneRound: a probe whose lowered limit is under 2 x
// MinSamples measures the requests it admits at once, one round of the
// service, not two: before a 500 ms service the second round doubled the
// time the limit stayed lowered.
func TestProbeMeasuresOneRound(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 12})
	saturatedWindow(t, l, clock, 12, 500*time.Millisecond)
	st := l.Stats()
	if !st.Probing || st.Limit < 10 || st.Limit >= 20 {
		t.Fatalf("probing %v at limit %d after a saturated window with no baseline, want a probe at 10-19", st.Probing, st.Limit)
	}
	round := acquireN(t, l, st.Limit)
	clock.Advance(500 * time.Millisecond)
	for _, p := range round {
		p.Release(sluice.Success)
	}
	if st := l.Stats(); st.Probing || st.Baseline < 450*time.Millisecond || st.Baseline > 550*time.Millisecond {
		t.Errorf("after one round of the probe: probing %v, baseline %v; want it ended on the round's 500 ms", st.Probing, st.Baseline)
	}
}

// TestProbeOfAHeavyTailMeasuresTwenty: where the latest window's RTTs were
// spread (p90 over twice p10), a probe measures 2 x MinSamples even under
// a lower limit: one round's median of a heavy tail is too noisy (in
// simulation, a closed loop of 1,024 before 4 slots of sigma 1.5 kept 0.82
// of its goodput on one round, 0.89 on 20).
func TestProbeOfAHeavyTailMeasuresTwenty(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 12})
	ps := saturate(t, l, 12)
	clock.Advance(100 * time.Millisecond)
	for _, p := range ps[:6] {
		p.Release(sluice.Success)
	}
	clock.Advance(400 * time.Millisecond)
	for _, p := range ps[6:] {
		p.Release(sluice.Success)
	}
	st := l.Stats()
	if !st.Probing || st.Limit >= 20 {
		t.Fatalf("probing %v at limit %d after a saturated window with no baseline, want a probe under 20", st.Probing, st.Limit)
	}
	round := acquireN(t, l, st.Limit)
	clock.Advance(300 * time.Millisecond)
	for _, p := range round {
		p.Release(sluice.Success)
	}
	if !l.Stats().Probing {
		t.Errorf("the probe of a spread window ended on one round of %d", st.Limit)
	}
}

// TestNoProbeUnderALoadThatFits: 16 clients in a closed loop before a
// 500 ms service, under the initial limit of 20, are never refused, and no
// probe lowers the limit below them: it would hold them back for a second
// each time (two rounds of 500 ms at 10) to measure a baseline nothing
// needs. Before, the first window probed (no baseline yet) and the next
// ones every ProbeInterval (a load over half the limit measures none).
func TestNoProbeUnderALoadThatFits(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	for round := range 40 { // 20 s
		ps := acquireN(t, l, 16)
		clock.Advance(500 * time.Millisecond)
		for _, p := range ps {
			p.Release(sluice.Success)
		}
		if st := l.Stats(); st.Probing || st.Limit < 16 {
			t.Fatalf("round %d: probing %v at limit %d under a load of 16 that nothing refused", round, st.Probing, st.Limit)
		}
	}
	if st := l.Stats(); st.Probes != 0 || st.Rejected != 0 {
		t.Errorf("%d probes, %d refused, want none", st.Probes, st.Rejected)
	}
}

func TestWindowNotReadyIsDiscarded(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: adaptive.AIMD{}, InitialLimit: 10, MinSamples: 50, Recovery: 1})
	// 10 windows' worth of time with only a few successes: no update.
	for i := 0; i < 11; i++ {
		p, _ := l.TryAcquire()
		clock.Advance(100 * time.Millisecond)
		p.Release(sluice.Success)
	}
	if st := l.Stats(); st.Windows != 0 || st.Limit != 10 {
		t.Errorf("a window with too few samples moved things: %+v", st)
	}
}

func TestPercentileRTT(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: adaptive.Fixed{}, Percentile: 0.9, MinSamples: 10})
	var ps []adaptive.Permit
	for i := 0; i < 10; i++ {
		p, _ := l.TryAcquire()
		ps = append(ps, p)
	}
	for i, p := range ps {
		clock.Advance(10 * time.Millisecond)
		if i == 9 {
			clock.Advance(100 * time.Millisecond)
		}
		p.Release(sluice.Success)
	}
	// The histogram's buckets are 6% wide at most.
	if got := l.Stats().Last.RTT; got < 188*time.Millisecond || got > 212*time.Millisecond {
		t.Errorf("p90 RTT %v, want 200ms (the slowest of 10)", got)
	}
}

func TestSpare(t *testing.T) {
	l, _ := newLimiter(t, adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 10})
	var ps []adaptive.Permit
	for i := 0; i < 7; i++ {
		p, _ := l.TryAcquire()
		ps = append(ps, p)
	}
	if !l.Spare(0.8) {
		t.Error("7 of 10 in flight: no spare below 0.8")
	}
	p, _ := l.TryAcquire()
	if l.Spare(0.8) {
		t.Error("8 of 10 in flight: spare below 0.8")
	}
	p.Release(sluice.Ignore)
	for _, p := range ps {
		p.Release(sluice.Ignore)
	}
}

// TestPartitions: admission is work-conserving (a class alone may use the
// whole limit), never above the limit, and UnderShare says which classes
// are below their guarantee (the queue serves those first).
func TestPartitions(t *testing.T) {
	l, _ := newLimiter(t, adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 10})
	p, err := l.Partition([]adaptive.Class{{Name: "live", Share: 0.8}, {Name: "batch", Share: 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	var batch []adaptive.Permit
	for range 12 {
		if perm, ok := p.TryAcquire(1); ok {
			batch = append(batch, perm)
		}
	}
	if len(batch) != 10 {
		t.Fatalf("batch alone got %d, want the whole limit (10): nothing is held idle", len(batch))
	}
	if _, ok := p.TryAcquire(0); ok {
		t.Fatal("admitted past the global limit")
	}
	if !p.UnderShare(0) || p.UnderShare(1) {
		t.Errorf("under share: live %v (0 of 8: want true), batch %v (10 of 2: want false)", p.UnderShare(0), p.UnderShare(1))
	}
	st := p.Stats()
	if st[0].InFlight != 0 || st[1].InFlight != 10 || st[0].Rejected != 1 || st[1].Admitted != 10 || st[1].Share != 0.2 {
		t.Errorf("class stats %+v", st)
	}
	for _, perm := range batch {
		perm.Release(sluice.Success)
	}
	if st := p.Stats(); st[1].InFlight != 0 || l.InFlight() != 0 {
		t.Errorf("in flight after releasing all: class %d, limiter %d", st[1].InFlight, l.InFlight())
	}
	if _, err := l.Partition([]adaptive.Class{{Name: "a", Share: 0.7}, {Name: "b", Share: 0.7}}); err == nil {
		t.Error("shares summing to 1.4 accepted")
	}
}

// TestPartitionNeverAboveLimit races borrowing and giving back between
// classes (Netflix concurrency-limits #233: borrowing let the total exceed
// the limit): goroutines of three classes, some over their share, acquire
// and release while the limit moves; the number in flight, counted by the
// admitted themselves, never exceeds the limit in force when they entered,
// and every class's count returns to 0.
func TestPartitionNeverAboveLimit(t *testing.T) {
	l, err := adaptive.New(adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 8, MaxLimit: 8})
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Partition([]adaptive.Class{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}, {Name: "c", Share: 0.25}})
	if err != nil {
		t.Fatal(err)
	}
	var inside, peak atomic.Int64
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				perm, ok := p.TryAcquire(g % 3)
				if !ok {
					continue
				}
				n := inside.Add(1)
				for {
					m := peak.Load()
					if n <= m || peak.CompareAndSwap(m, n) {
						break
					}
				}
				runtime.Gosched()
				inside.Add(-1)
				perm.Release(sluice.Success)
			}
		}()
	}
	wg.Wait()
	if peak.Load() > 8 {
		t.Errorf("peak in flight %d above the limit 8", peak.Load())
	}
	for _, c := range p.Stats() {
		if c.InFlight != 0 || c.Admitted == 0 {
			t.Errorf("class %s: in flight %d at the end (want 0), admitted %d", c.Name, c.InFlight, c.Admitted)
		}
	}
	if l.InFlight() != 0 {
		t.Errorf("limiter in flight %d at the end", l.InFlight())
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []adaptive.Config{
		{},
		{Algorithm: adaptive.Fixed{}, MinLimit: 10, MaxLimit: 5},
		{Algorithm: adaptive.Fixed{}, InitialLimit: 2000},
		{Algorithm: adaptive.Fixed{}, Percentile: 1.5},
	}
	for _, c := range bad {
		if _, err := adaptive.New(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	for _, name := range []string{"fixed", "aimd", "vegas", "gradient2"} {
		if a, err := adaptive.NewAlgorithm(name); err != nil || a.Name() != name {
			t.Errorf("NewAlgorithm(%q) = %v, %v", name, a, err)
		}
	}
	if _, err := adaptive.NewAlgorithm("bbr"); err == nil {
		t.Error("unknown algorithm accepted")
	}
}

// acquireN takes n permits, failing the test if any is refused.
// fill acquires until the limiter refuses and returns what it admitted.
func fill(l *adaptive.Limiter) []adaptive.Permit {
	var held []adaptive.Permit
	for {
		p, ok := l.TryAcquire()
		if !ok {
			return held
		}
		held = append(held, p)
	}
}

// saturatedWindow closes a saturated window of n requests that each took
// rtt.
func saturatedWindow(t *testing.T, l *adaptive.Limiter, clock *sluice.FakeClock, n int, rtt time.Duration) {
	t.Helper()
	ps := saturate(t, l, n)
	clock.Advance(rtt)
	for _, p := range ps {
		p.Release(sluice.Success)
	}
}

// saturatedQueuedWindow is saturatedWindow (n of at least 20, rtt at
// least the window) in front of a service that queues: the later half of
// the first 20 requests takes twice as long as the earlier half, so the
// first requests measure no baseline (firstProbe) and the window, closing
// at the first of the slower ones, probes.
func saturatedQueuedWindow(t *testing.T, l *adaptive.Limiter, clock *sluice.FakeClock, n int, rtt time.Duration) {
	t.Helper()
	ps := saturate(t, l, n)
	// The first ten answers 3% of their time apart, as a service's are:
	// ten answers alike to the microsecond are a constant service's,
	// whose first requests the start gate reads more tightly.
	clock.Advance(rtt / 2)
	step := rtt / 2 * 3 / 100
	for i, p := range ps[:10] {
		p.Release(sluice.Success)
		if i < 9 {
			clock.Advance(step)
		}
	}
	clock.Advance(rtt/2 - 9*step)
	for _, p := range ps[10:] {
		p.Release(sluice.Success)
	}
}

// saturate takes the limit, n, and is refused once more: the window is
// saturated (a probe may be due when it closes).
func saturate(t *testing.T, l *adaptive.Limiter, n int) []adaptive.Permit {
	t.Helper()
	ps := acquireN(t, l, n)
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("admitted over the limit")
	}
	return ps
}

func acquireN(t *testing.T, l *adaptive.Limiter, n int) []adaptive.Permit {
	t.Helper()
	ps := make([]adaptive.Permit, 0, n)
	for range n {
		p, ok := l.TryAcquire()
		if !ok {
			t.Fatal("refused below the limit")
		}
		ps = append(ps, p)
	}
	return ps
}

// TestStall: requests in flight and none ending for a second cut the limit
// to the minimum at once, on the next refusal; what was sent before the
// stall is no sample when it ends.
func TestStall(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 10, MinLimit: 2})
	stuck := acquireN(t, l, 10)
	clock.Advance(500 * time.Millisecond)
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("admitted over the limit")
	}
	if st := l.Stats(); st.Limit != 10 || st.Stalls != 0 {
		t.Fatalf("half a second without an outcome is no stall yet: %+v", st)
	}
	clock.Advance(time.Second)
	l.TryAcquire()
	if st := l.Stats(); st.Limit != 2 || st.Stalls != 1 {
		t.Fatalf("a stall: limit %d, stalls %d; want the minimum 2 and 1", st.Limit, st.Stalls)
	}
	windows := l.Stats().Windows
	for _, p := range stuck {
		p.Release(sluice.Success) // 1.5 s RTTs from before the stall
	}
	if st := l.Stats(); st.Windows != windows || st.Last.RTT > time.Second {
		t.Errorf("requests sent before the stall were taken as samples: %+v", st)
	}
}

// newAcquirer is newLimiter with its acquire: the limiter's own, or with
// part, that of a partition of one class holding the whole limit.
func newAcquirer(t *testing.T, cfg adaptive.Config, part bool) (*adaptive.Limiter, *sluice.FakeClock, func() (adaptive.Permit, bool)) {
	t.Helper()
	l, clock := newLimiter(t, cfg)
	if !part {
		return l, clock, l.TryAcquire
	}
	p, err := l.Partition([]adaptive.Class{{Name: "a", Share: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock, func() (adaptive.Permit, bool) { return p.TryAcquire(0) }
}

// TestIdleIsNoStall: a limiter that waited a while for its first requests
// (a sidecar started before its traffic) or sat idle between bursts does
// not take the idle time for a stall when the next burst fills the limit:
// a stall is a time without outcomes while requests are in flight.
func TestIdleIsNoStall(t *testing.T) {
	for _, part := range []bool{false, true} {
		l, clock, acquire := newAcquirer(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 10, MinLimit: 2}, part)
		clock.Advance(5 * time.Second) // idle
		var held []adaptive.Permit
		for range 10 {
			p, ok := acquire()
			if !ok {
				t.Fatal("refused under the limit")
			}
			held = append(held, p)
		}
		clock.Advance(20 * time.Millisecond)
		if _, ok := acquire(); ok {
			t.Fatal("admitted over the limit")
		}
		if st := l.Stats(); st.Stalls != 0 || st.Limit != 10 {
			t.Fatalf("partitioned %v: the idle time before the burst was taken for a stall: %+v", part, st)
		}
		// A real stall still counts from the burst's start.
		clock.Advance(1500 * time.Millisecond)
		acquire()
		if st := l.Stats(); st.Stalls != 1 {
			t.Fatalf("partitioned %v: no stall after 1.5 s without an outcome: %+v", part, st)
		}
		for _, p := range held {
			p.Release(sluice.Dropped)
		}
	}
}

// TestStuckRequestsDoNotHoldTheLimit: requests hung in a stall no longer
// count against the limit, so that a service that recovers while they
// still hang (or that lost them) gets new requests at once, at most
// MinLimit at a time beside them; each hung one still frees its place when
// it ends, and no place is counted twice.
func TestStuckRequestsDoNotHoldTheLimit(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 10, MinLimit: 2})
	hung := acquireN(t, l, 10)
	clock.Advance(1500 * time.Millisecond)
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("admitted over the limit before the stall")
	}
	if st := l.Stats(); st.Stalls != 1 || st.Stuck != 10 {
		t.Fatalf("stall: %+v, want 1 stall and 10 stuck", st)
	}
	// MinLimit (2) new requests beside the 10 hung ones, not more.
	a, okA := l.TryAcquire()
	b, okB := l.TryAcquire()
	if !okA || !okB {
		t.Fatal("the hung requests still hold the limit: nothing new admitted after the stall")
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("admitted more than min_limit beside the hung requests")
	}
	if n := l.InFlight(); n != 12 {
		t.Fatalf("in flight %d, want 12 (10 hung + 2)", n)
	}
	// The service answers the new ones: their places free.
	clock.Advance(20 * time.Millisecond)
	a.Release(sluice.Success)
	b.Release(sluice.Success)
	// The hung ones end (timed out): each frees its stuck place, and the
	// limit counts everything again.
	for _, p := range hung {
		p.Release(sluice.Dropped)
	}
	if st := l.Stats(); st.Stuck != 0 || st.InFlight != 0 {
		t.Fatalf("after the hung ended: %+v, want none stuck or in flight", st)
	}
	held := fill(l)
	if len(held) != l.Limit() {
		t.Fatalf("admitted %d with the limit at %d: a place counted twice", len(held), l.Limit())
	}
	for _, p := range held {
		p.Release(sluice.Ignore)
	}
}

// TestSlowStartFindsTheDemand: far more demand than the limit (a closed-loop
// benchmark's 500 connections, a burst after idle) on a service that does
// not queue (its RTT stays flat): the limit doubles per window, as TCP's
// slow start does, instead of creeping up for seconds while the rest is
// refused. Once a queue formed (a cut on latency), it grows only as the
// algorithm says.
func TestSlowStartFindsTheDemand(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20})
	driveQueue(l, clock, 10, 500, 100000, 5*time.Millisecond)
	if got := l.Limit(); got < 320 {
		t.Fatalf("10 windows of 500 wanted, no queue in the service: limit %d, want >= 320 (doubling from 20)", got)
	}
	l, clock = newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 40})
	driveQueue(l, clock, 30, 200, 10, 5*time.Millisecond) // a queue beyond 10 slots: cut
	low := l.Limit()
	if low >= 40 {
		t.Fatalf("a queue in the service did not cut the limit: %d", low)
	}
	driveQueue(l, clock, 5, 200, 100000, 5*time.Millisecond) // the service got wider: no queue
	if got := l.Limit(); got >= 4*low {
		t.Errorf("5 windows after a queue was found: limit %d from %d, want the algorithm's growth, not doubling", got, low)
	}
}

// driveBusy runs windows of a service with no queue (svc at any
// concurrency) behind a caller short of CPU: each round trip also waits
// perRequest for each request in flight, the caller's own wait for a CPU,
// which *self reports.
func driveBusy(l *adaptive.Limiter, clock *sluice.FakeClock, windows, offered int, svc, perRequest time.Duration, self *time.Duration) {
	driveBatches(l, clock, windows, offered, func(n int) time.Duration {
		*self = perRequest * time.Duration(n)
		return svc + *self
	})
}

// TestSelfDelayIsNoQueue: round trips that rise with the load only because
// the caller waits for a CPU (a sidecar sharing a core, more clients than
// it can serve) are no queue in the service: with Config.SelfDelay the
// limit grows to the demand; without, it reads the wait as a queue and
// cuts. A real queue in the service is still cut with it.
func TestSelfDelayIsNoQueue(t *testing.T) {
	var self time.Duration
	l, clock := newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, SelfDelay: func() time.Duration { return self }})
	driveBusy(l, clock, 50, 400, 5*time.Millisecond, 25*time.Microsecond, &self)
	if got := l.Limit(); got < 300 {
		t.Errorf("400 wanted, the service never queues, the caller's own wait taken out: limit %d, want >= 300 (%+v)", got, l.Stats().Last)
	}
	if got := l.Stats().Last.SelfDelay; got <= 0 {
		t.Errorf("last window's self delay %v, want it reported", got)
	}
	l, clock = newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}})
	driveBusy(l, clock, 50, 400, 5*time.Millisecond, 25*time.Microsecond, &self)
	if got := l.Limit(); got >= 300 {
		t.Fatalf("without SelfDelay the caller's wait should read as a queue: limit %d", got)
	}
	small := 100 * time.Microsecond
	l, clock = newLimiter(t, adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 80, Recovery: 1,
		SelfDelay: func() time.Duration { return small }})
	driveQueue(l, clock, 100, 200, 20, 10*time.Millisecond)
	if got := l.Limit(); got > 40 {
		t.Errorf("a queue in the service beyond 20 slots, little wait of the caller's own: limit %d, want at most 40", got)
	}
}

// TestReleaseAtTimesTheWorkToTheGivenEnd: a release that states when the
// work ended measures the work to then, not to the clock's reading at the
// call (the engine reads the clock once for its own metric and passes it).
func TestReleaseAtTimesTheWorkToTheGivenEnd(t *testing.T) {
	l, clock := newLimiter(t, adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 10})
	for range 20 {
		var ps []adaptive.Permit
		at := clock.Now()
		for range 10 {
			p, ok := l.TryAcquire()
			if !ok {
				t.Fatal("refused under a fixed limit of 10")
			}
			ps = append(ps, p)
		}
		clock.Advance(time.Second)
		for _, p := range ps {
			p.ReleaseAt(sluice.Success, at.Add(5*time.Millisecond).UnixNano())
		}
	}
	st := l.Stats()
	if st.Windows == 0 {
		t.Fatal("no window closed")
	}
	if st.Last.RTT < 4*time.Millisecond || st.Last.RTT > 6*time.Millisecond {
		t.Errorf("window RTT %v, want the 5ms each release stated (the clock moved 1s)", st.Last.RTT)
	}
}
