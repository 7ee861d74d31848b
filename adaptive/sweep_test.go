package adaptive_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/sim"
)

// simShape is a simulated service: slots x svc, lognormal sigma, slower
// by degrade per queued request per slot (sim.Scenario.Degrade).
type simShape struct {
	name    string
	slots   int
	svc     time.Duration
	sigma   float64
	degrade float64
	// slowShare of the requests take slowFactor times as long (bimodal);
	// maxQueue, when > 0, fails requests at once past that many waiting.
	slowShare, slowFactor float64
	maxQueue              int
}

// capacity is sh's requests a second with every slot busy.
func (sh simShape) capacity() float64 {
	return float64(sh.slots) / sh.svc.Seconds() / (1 + sh.slowShare*(max(1, sh.slowFactor)-1))
}

// ownP99 is sh's p99 without a queue, ns: a bimodal shape's is among its
// slow requests when they are more than 1%.
func (sh simShape) ownP99() float64 {
	mean, z := float64(sh.svc), 2.326
	if sh.slowShare > 0.01 {
		mean *= max(1, sh.slowFactor)
		z = math.Sqrt2 * math.Erfinv(1-2*0.01/sh.slowShare)
	}
	return mean * math.Exp(-sh.sigma*sh.sigma/2+z*sh.sigma)
}

// run is sh for d, seeded, as the sweep runs it: clients give up after
// 2 s, and the fast engine's view of one that leaves (its late answer is a
// sample); the caller sets the load (Rate or Clients).
func (sh simShape) run(d time.Duration, seed uint64) sim.Scenario {
	return sim.Scenario{Duration: d, Slots: slots(sh.slots), ServiceTime: sh.svc, Sigma: sh.sigma, Degrade: sh.degrade,
		SlowShare: sh.slowShare, SlowFactor: sh.slowFactor, MaxQueue: sh.maxQueue,
		Deadline: 2 * time.Second, Seed: seed, Leave: sim.LeaveUnnoticed}
}

// open is run with an open loop at x times sh's capacity.
func (sh simShape) open(x float64, d time.Duration, seed uint64) sim.Scenario {
	sc := sh.run(d, seed)
	sc.Rate = constant(x * sh.capacity())
	return sc
}

// simShapes are the sweep's service shapes that the simulation runs, with
// their contention (loadtest/scenarios sweepShapes), and 40 x 20 ms.
func simShapes() []simShape {
	return []simShape{
		{"2x200ms", 2, 200 * time.Millisecond, 0.25, 0.1, 0, 0, 0},
		{"5x50ms-constant", 5, 50 * time.Millisecond, 0.01, 0, 0, 0, 0},
		{"20x40ms-contention5%", 20, 40 * time.Millisecond, 0.25, 0.05, 0, 0, 0},
		{"200x500ms", 200, 500 * time.Millisecond, 0.25, 0, 0, 0, 0},
		{"50x100ms-sigma1", 50, 100 * time.Millisecond, 1, 0.1, 0, 0, 0},
		{"4x4ms-sigma1.5", 4, 4 * time.Millisecond, 1.5, 0.1, 0, 0, 0},
		{"10x20ms-contention50%", 10, 20 * time.Millisecond, 0.5, 0.5, 0, 0, 0},
		{"40x20ms", 40, 20 * time.Millisecond, 0.25, 0, 0, 0, 0},
		{"10x20ms-bimodal10%", 10, 20 * time.Millisecond, 0.25, 0.1, 0.1, 10, 0},
		{"8x30ms-failfast16", 8, 30 * time.Millisecond, 0.25, 0, 0, 0, 16},
		{"1x1ms-sigma0.5", 1, time.Millisecond, 0.5, 0, 0, 0, 0},
	}
}

// cell runs sh at x times its capacity for 30 s with gradient2 at its
// defaults, seeds times, and returns, averaged over the seeds and over
// seconds 10-30, goodput as a share of what the load could get served
// (the capacity, or the load below it), the share refused, and the p99
// (ns): one cell of the simulated sweep.
func (sh simShape) cell(x float64, seeds int) (good, refused, p99 float64) {
	capacity, n := sh.capacity(), float64(seeds)
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		r := runSluice(sh.open(x, 30*time.Second, seed), "gradient2")
		w := r.Window(10*time.Second, 30*time.Second)
		good += perSecond(w.Good, 20*time.Second) / min(capacity, x*capacity) / n
		refused += float64(w.Rejected) / float64(max(1, w.Offered)) / n
		p99 += float64(r.Percentile(0.99, 10*time.Second, 30*time.Second)) / n
	}
	return good, refused, p99
}

// TestSimulatedSweep is the short form of `sluice loadtest scenarios
// -sweep` (issue 23, item 4) in simulation: service shapes no scenario is
// tuned for x open-loop loads, 4 seeds each, the fast engine's view of a
// client that leaves (its late answer is a sample), gradient2 at its
// defaults, seconds 10-30 of 30. A cell meets its goal when, on average
// over the seeds, at most 0.5% is refused below capacity, or, above it,
// goodput is >= 90% of capacity and p99 <= 2x the service's own. The
// cells that met it when this test was written (12 of 18), and the
// heavy tails met since a window's median is judged against its own noise
// (session 16: 14 of 18), and the contention shapes that meet it since the
// shapes carry the sweep's Degrade (session 19: 21 of 24), and the
// bimodal, fail-fast and one-slot shapes' cells that met it when they
// were added (session 36: 28 of 33), must go on meeting it (a regression
// guard); the table of all cells is logged, and
// BENCHMARKS.md ("Session 11", "Session 16", "The first requests are the
// first probe") has it with the causes of the misses.
func TestSimulatedSweep(t *testing.T) {
	shapes := simShapes()
	mustMeet := map[string]bool{
		"2x200ms@0.5x": true, "5x50ms-constant@0.5x": true, "5x50ms-constant@2x": true, "5x50ms-constant@5x": true,
		"200x500ms@0.5x": true, "200x500ms@2x": true, "50x100ms-sigma1@0.5x": true,
		"50x100ms-sigma1@2x": true, "50x100ms-sigma1@5x": true,
		// (4x4ms-sigma1.5@2x: TestSimulatedHeavyTailOverload, over 16 seeds.)
		"4x4ms-sigma1.5@5x": true, "40x20ms@0.5x": true, "40x20ms@2x": true, "40x20ms@5x": true,
		// Since the shapes carry the sweep's contention (session 19).
		"20x40ms-contention5%@0.5x": true, "20x40ms-contention5%@2x": true, "20x40ms-contention5%@5x": true,
		"10x20ms-contention50%@0.5x": true, "10x20ms-contention50%@2x": true, "10x20ms-contention50%@5x": true,
		// The bimodal, fail-fast and one-slot shapes (session 36).
		"10x20ms-bimodal10%@0.5x": true, "10x20ms-bimodal10%@2x": true, "10x20ms-bimodal10%@5x": true,
		"8x30ms-failfast16@0.5x": true, "8x30ms-failfast16@2x": true, "8x30ms-failfast16@5x": true,
		"1x1ms-sigma0.5@0.5x": true,
		// A first probe's step that read a queue by its median (session 39).
		"1x1ms-sigma0.5@5x": true,
	}
	var table strings.Builder
	met, cells := 0, 0
	for _, sh := range shapes {
		ownP99 := sh.ownP99()
		for _, x := range []float64{0.5, 2, 5} {
			good, refused, p99 := sh.cell(x, 4)
			name := fmt.Sprintf("%s@%gx", sh.name, x)
			ok := refused <= 0.005
			figure := fmt.Sprintf("refused %.2f%%", 100*refused)
			if x > 1 {
				ok = good >= 0.9 && p99 <= 2*ownP99
				figure = fmt.Sprintf("goodput %.0f%%, p99 %.0f ms (2x the service's own: %.0f ms)", 100*good, p99/1e6, 2*ownP99/1e6)
			}
			cells++
			if ok {
				met++
			}
			fmt.Fprintf(&table, "%-24s %-5v %s\n", name, ok, figure)
			if mustMeet[name] && !ok {
				t.Errorf("%s met its goal when this test was written, now %s", name, figure)
			}
		}
	}
	t.Logf("%d of %d cells met:\n%s", met, cells, table.String())
}

// TestSimulatedHeavyTailOverload guards the sweep's heaviest tail, 4
// slots of 4 ms at sigma 1.5, at twice its capacity over 16 seeds: the
// cell's figure over TestSimulatedSweep's 4 turns on a seed or two (a
// first probe's step of 20 RTTs at 2 in flight reads a median anywhere
// from half to twice the service's). Met there at 92% when it was written,
// it read 88% once a window the start gate held stopped giving the
// baseline (seed 1: 0.80); over 16 seeds it was 91.9% before that change
// and 91.1% after (the 5x cell, still guarded by TestSimulatedSweep,
// 95.5% and 96.8%). The cell meets the sweep's goal on average: goodput
// >= 90% of capacity, p99 <= 2x the service's own, seconds 10-30.
func TestSimulatedHeavyTailOverload(t *testing.T) {
	sh := simShapes()[5]
	if sh.name != "4x4ms-sigma1.5" {
		t.Fatalf("shape %s", sh.name)
	}
	const seeds = 16
	good, _, p99 := sh.cell(2, seeds)
	if good < 0.9 || p99 > 2*sh.ownP99() {
		t.Errorf("goodput %.1f%% of capacity, p99 %.0f ms over %d seeds; want >= 90%% and <= %.0f ms",
			100*good, p99/1e6, seeds, 2*sh.ownP99()/1e6)
	}
}

// TestSimulatedClosedLoops is the closed-loop half of the sweep's short
// form (issue 23, item 4): the sweep's service shapes, and one without a
// concurrency limit of its own, before closed loops of 16, 256 and 1,024
// clients (each sends again as soon as answered; one over the limit waits
// in the sidecar's queue for 500 ms at most, and sends again at once when
// refused), 2 seeds, seconds 5-20 of 20. A cell meets its goal when
// gradient2 at its defaults serves >= 95% of what the same loop gets with
// no limiter. The cells that met it when this test was written must go on
// meeting it (a regression guard); the table is logged. The limiter is
// told the loop is closed, as the binary's queue tells it once a hold test
// finds the loop (queue's tests cover that finding). The service that
// burns 200 us of CPU on the sidecar's core shares one CPU with the
// sidecar's own work (sim.CPU: 20 us a forwarded request, 10 us a refusal
// or a hand-off from the queue), and its goal is 0.90, as the sweep's: it
// meets it told (1.00, 1.00, 0.95) and untold (1.00, 0.96, 0.96).
func TestSimulatedClosedLoops(t *testing.T) {
	// The shapes before session 36's: the closed loops of the bimodal, the
	// fail-fast and the one-slot shapes run through the binary only (in
	// simulation, 1,024 clients sending again every millisecond to a
	// service that fails fast or answers in 1 ms took most of a minute, and
	// several under the race detector).
	shapes := append(simShapes()[:8:8], simShape{"unlimited-100ms", 1 << 20, 100 * time.Millisecond, 0.25, 0, 0, 0, 0},
		simShape{"200us-cpu", 1 << 20, 200 * time.Microsecond, 0.25, 0, 0, 0, 0})
	// The service that burns CPU on the sidecar's core: the sidecar's own
	// CPU per forwarded request and per refusal (issue 29's figures: about
	// 20 us a proxied request) shares that CPU with it (sim.CPU).
	cpuOf := map[string]*sim.CPU{"200us-cpu": {Admit: 20 * time.Microsecond, Refuse: 10 * time.Microsecond, Handoff: 10 * time.Microsecond}}
	mustMeet := map[string]bool{
		"2x200ms@c256": true, "2x200ms@c1024": true, "5x50ms-constant@c16": true, "5x50ms-constant@c256": true,
		"5x50ms-constant@c1024": true, "200x500ms@c16": true, "200x500ms@c256": true, "200x500ms@c1024": true, "50x100ms-sigma1@c16": true,
		"50x100ms-sigma1@c256": true, "50x100ms-sigma1@c1024": true, "4x4ms-sigma1.5@c16": true, "4x4ms-sigma1.5@c256": true,
		"40x20ms@c16": true, "40x20ms@c256": true, "40x20ms@c1024": true, "unlimited-100ms@c16": true, "unlimited-100ms@c256": true,
		// Since the shapes carry the sweep's contention (session 19).
		"20x40ms-contention5%@c16": true, "10x20ms-contention50%@c16": true, "10x20ms-contention50%@c256": true,
		"200us-cpu@c16": true, "200us-cpu@c256": true, "200us-cpu@c1024": true,
	}
	var table strings.Builder
	met, cells := 0, 0
	for _, sh := range shapes {
		for _, n := range []int{16, 256, 1024} {
			if sh.slots > 1<<16 && n > 256 && cpuOf[sh.name] == nil {
				continue // 10,000 requests a second: too long a run for make test
			}
			var with, without float64
			const seeds = 2
			for seed := uint64(1); seed <= seeds; seed++ {
				sc := sh.run(20*time.Second, seed)
				sc.Clients, sc.CPU = n, cpuOf[sh.name]
				var l *adaptive.Limiter
				r := sim.Run(sc, func(c sluice.Clock) sim.Limiter {
					l, _ = adaptive.New(adaptive.Config{Algorithm: &adaptive.Gradient2{}, Clock: c, InitialLimit: 20})
					l.SetClosedLoop(func() bool { return true })
					return limAdapter{l}
				}, func() int { return l.Limit() })
				with += float64(r.Window(5*time.Second, 20*time.Second).Good)
				without += float64(sim.Run(sc, nil, nil).Window(5*time.Second, 20*time.Second).Good)
			}
			name := fmt.Sprintf("%s@c%d", sh.name, n)
			ratio := with / math.Max(1, without)
			want := 0.95
			if cpuOf[sh.name] != nil {
				want = 0.9 // the sweep's goal where every refusal costs the service's CPU
			}
			ok := ratio >= want
			cells++
			if ok {
				met++
			}
			fmt.Fprintf(&table, "%-24s %-5v %.2f of no limiter (%.0f/s against %.0f/s)\n", name, ok, ratio,
				with/seeds/15, without/seeds/15)
			if mustMeet[name] && !ok {
				t.Errorf("%s met its goal when this test was written, now %.2f of no limiter", name, ratio)
			}
		}
	}
	t.Logf("%d of %d cells met:\n%s", met, cells, table.String())
}

// TestSimulatedStartOfASlowService: a load that begins before a service of
// many slots and hundreds of milliseconds is served from its first
// seconds. Before the first requests were a probe (firstProbe), the first
// saturated window probed at half the initial limit: two RTTs of a lowered
// limit before the limit could grow, and a load at half the capacity of
// 200 x 500 ms had 12.5% refused in seconds 1-7 (400 x 200 ms: 7.6%), at
// twice it 75% of capacity served (78%); then 0.6% (0.0%) and 91% (96%).
// 4 seeds each. Since slow start doubles at most what was answered (once
// per 500 ms here), the limiter alone refuses 1.9% at half the capacity
// of 200 x 500 ms, in second 1 (the limit passes the load's 100 in flight
// one round trip later), and serves 88% at twice it: the simulation has
// no queue, and through the binary, whose queue holds those arrivals for
// the moment, the sweep's cell refused 0.00% in 3 runs of 3.
func TestSimulatedStartOfASlowService(t *testing.T) {
	for _, sh := range []simShape{{"200x500ms", 200, 500 * time.Millisecond, 0.25, 0, 0, 0, 0}, {"400x200ms", 400, 200 * time.Millisecond, 0.25, 0, 0, 0, 0}} {
		capacity := sh.capacity()
		for _, x := range []float64{0.5, 2} {
			var good, refused, offered float64
			const seeds = 4
			for seed := uint64(1); seed <= seeds; seed++ {
				r := runSluice(sh.open(x, 7*time.Second, seed), "gradient2")
				w := r.Window(time.Second, 7*time.Second)
				good += perSecond(w.Good, 6*time.Second) / min(capacity, x*capacity) / seeds
				refused += float64(w.Rejected)
				offered += float64(w.Offered)
			}
			switch share := refused / offered; {
			case x < 1 && share > 0.025:
				t.Errorf("%s at %gx: %.1f%% refused in seconds 1-7, want <= 2.5%%", sh.name, x, 100*share)
			case x > 1 && good < 0.85:
				t.Errorf("%s at %gx: %.0f%% of capacity served in seconds 1-7, want >= 85%%", sh.name, x, 100*good)
			default:
				t.Logf("%s at %gx: %.0f%% of capacity served, %.1f%% refused", sh.name, x, 100*good, 100*share)
			}
		}
	}
}

// TestSimulatedSlowStartDoublesWhatWasAnswered: before 200 slots of 500 ms
// at 5x their capacity, slow start doubles the limit at most to twice the
// concurrency the service has answered at, as TCP doubles once per round
// trip. Doubling every 100 ms window, before any answer to a doubled
// limit came back, took it to max_limit (1,000) in the first second: 800
// requests queued in the service, past the clients' 2 s, and 76-78% of
// capacity was served in seconds 1-7 (4 seeds); now the limit peaks at
// 546-612 (answers admitted at 300, whose window's median still read no
// queue, let it double once more) and 83-88% is served.
func TestSimulatedSlowStartDoublesWhatWasAnswered(t *testing.T) {
	sh := simShape{"200x500ms", 200, 500 * time.Millisecond, 0.25, 0, 0, 0, 0}
	var good float64
	const seeds = 4
	for seed := uint64(1); seed <= seeds; seed++ {
		peak := 0
		r := runSluiceAs(sh.open(5, 7*time.Second, seed), "gradient2", func(l *adaptive.Limiter) sim.Limiter { return peakLimit{l, &peak} })
		if peak > 7*sh.slots/2 {
			t.Errorf("seed %d: the limit reached %d before %d slots of %v, want at most %d", seed, peak, sh.slots, sh.svc, 7*sh.slots/2)
		}
		good += perSecond(r.Window(time.Second, 7*time.Second).Good, 6*time.Second) / sh.capacity() / seeds
	}
	if good < 0.8 {
		t.Errorf("%.0f%% of capacity served in seconds 1-7, want >= 80%%", 100*good)
	}
}

// peakLimit is a sim.Limiter that keeps the highest limit it admitted
// under.
type peakLimit struct {
	l    *adaptive.Limiter
	peak *int
}

func (p peakLimit) TryAcquire() (sluice.Permit, bool) {
	*p.peak = max(*p.peak, p.l.Limit())
	return p.l.TryAcquire()
}

// TestSimulatedStartBehindFewSlots: the start gate (firstProbe.ended).
// The initial limit of 20, sent at once into 2 slots x 200 ms at twice
// their capacity, queued for seconds in the service, past the clients'
// 2 s: 36% of capacity was served in seconds 1-6 (4 seeds), and as much
// at five times it. Once the first requests show a queue behind the
// concurrency their fast answers allowed, the limit holds there, and the
// estimate starts from it: 89% at 2x. At 5x the first 20 are sent before
// any queue shows; a load asking for over twice what the gate allows
// binds it: 60% (50% with a queue as the only reason). Over 10 seeds that
// was 62% at 2x and 50% at 5x: in half of them the gate (4) was not
// heeded, too few requests having been admitted at or below its half to
// show the queue; counting those admitted alone in flight among them
// when fewer than two others are there (firstProbe.queuedAt): 86% and 74%.
func TestSimulatedStartBehindFewSlots(t *testing.T) {
	sh := simShape{"2x200ms", 2, 200 * time.Millisecond, 0.25, 0.1, 0, 0, 0}
	for _, c := range []struct{ x, want float64 }{{2, 0.8}, {5, 0.7}} {
		var good float64
		const seeds = 10
		for seed := uint64(1); seed <= seeds; seed++ {
			r := runSluice(sh.open(c.x, 6*time.Second, seed), "gradient2")
			good += perSecond(r.Window(time.Second, 6*time.Second).Good, 5*time.Second) / sh.capacity() / seeds
		}
		if good < c.want {
			t.Errorf("at %gx: %.0f%% of capacity served in seconds 1-6, want >= %.0f%%", c.x, 100*good, 100*c.want)
		}
	}
}

// TestSimulatedContentionFindsItsSlots: before a service that slows as
// work queues in it (10 slots x 20 ms, 50% slower per waiting request per
// slot), open loops at 2x and 5x, 6 seeds each, seconds 10-30: down-probes
// find that a limit nearer the 10 slots serves more, so the mean limit
// stays within 20% of them and goodput averages >= 93% of capacity.
// Gradient2 alone settles where the RTT stands its tolerance above the
// baseline: a mean limit of 12.7-14.1 and 88-93% (90.7% on average).
func TestSimulatedContentionFindsItsSlots(t *testing.T) {
	sh := simShapes()[6]
	if sh.name != "10x20ms-contention50%" {
		t.Fatalf("shape %s", sh.name)
	}
	const seeds = 6
	for _, x := range []float64{2, 5} {
		var limit, good float64
		for seed := uint64(1); seed <= seeds; seed++ {
			r := runSluice(sh.open(x, 30*time.Second, seed), "gradient2")
			w := r.Window(10*time.Second, 30*time.Second)
			limit += meanLimit(r, 10, 30) / seeds
			good += perSecond(w.Good, 20*time.Second) / sh.capacity() / seeds
		}
		if limit > 12 || good < 0.93 {
			t.Errorf("%gx: mean limit %.1f, goodput %.1f%% of capacity; want <= 12 and >= 93%%", x, limit, 100*good)
		}
	}
}

// manySlots is a fast service of far more slots than any limit the
// start reaches: what slow start's climb is measured against.
var manySlots = simShape{name: "1000x20ms", slots: 1000, svc: 20 * time.Millisecond, sigma: 0.25}

// TestSimulatedSlowStartClockedByAnswers: an open loop before a service
// of many slots (1,000 x 20 ms) that needs four to ten times the initial
// limit at once. Slow start doubled once a 100 ms window, five round
// trips: the demand over the limit was refused (in the sidecar, it waited)
// while the limit climbed 20, 44, 88, 176 (through the binary at 4,000 a
// second, the first second's p99 was 387 ms against 36 without a limit).
// Now the first requests' verdict of no queue takes slow start's step as
// soon as it is known, and a window in slow start closes once it has
// twice the limit's answers, as TCP's slow start doubles once a round
// trip: the first second refuses 4-5% at 4,000 a second (12-13% before)
// and 9% at 10,000 (24% before).
func TestSimulatedSlowStartClockedByAnswers(t *testing.T) {
	sh := manySlots
	for _, c := range []struct{ x, most float64 }{{0.08, 0.07}, {0.2, 0.12}} {
		for seed := uint64(1); seed <= 3; seed++ {
			first := runSluice(sh.open(c.x, 2*time.Second, seed), "gradient2").Seconds[0]
			if refused := float64(first.Rejected) / float64(first.Offered); refused > c.most {
				t.Errorf("%.0f a second, seed %d: the first second refused %.1f%% (%d of %d), want at most %.0f%%",
					c.x*sh.capacity(), seed, 100*refused, first.Rejected, first.Offered, 100*c.most)
			}
		}
	}
}

// TestSimulatedBurstSlowStartsWithinARoundTrip: a burst after a light load
// (200 a second, then 4,000 or 10,000) before 1,000 slots of 20 ms. The
// limit, left near the initial 20 by the light load, waited up to a whole
// window for slow start's first step while the burst queued (through the
// binary: the burst's first second at p99 223 ms against 36 without a
// limit). A window that refused as many as the limit, with as many
// answers whose mean shows no queue, now closes then: over three seeds
// the burst's first second refuses 2.5% at 4,000 a second (5.4% before)
// and 5.4% at 10,000 (10.1% before).
func TestSimulatedBurstSlowStartsWithinARoundTrip(t *testing.T) {
	sh := manySlots
	for _, c := range []struct{ rate, most float64 }{{4000, 0.035}, {10000, 0.075}} {
		var refused, offered int
		for seed := uint64(1); seed <= 3; seed++ {
			sc := sh.run(5*time.Second, seed)
			sc.Rate = step(3*time.Second, 200.0, c.rate)
			burst := runSluice(sc, "gradient2").Seconds[3]
			refused, offered = refused+burst.Rejected, offered+burst.Offered
		}
		if share := float64(refused) / float64(offered); share > c.most {
			t.Errorf("200 a second, then %.0f: the burst's first second refused %.1f%% (%d of %d over three seeds), want at most %.1f%%",
				c.rate, 100*share, refused, offered, 100*c.most)
		}
	}
}
