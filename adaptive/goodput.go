package adaptive

import (
	"math"
	"time"
)

// Reason says why the limit last moved.
type Reason uint8

// Why the limit moved.
const (
	// ReasonNone: the limit has not moved yet.
	ReasonNone Reason = iota
	// ReasonGrow: the algorithm grew the limit (no queue in the service).
	ReasonGrow
	// ReasonQueue: the algorithm cut the limit on latency: a queue in the
	// service, or one it could not yet tell from one.
	ReasonQueue
	// ReasonDrops: requests failed as overload (timeouts, 503s).
	ReasonDrops
	// ReasonStall: requests in flight and none ended.
	ReasonStall
	// ReasonProbe: a probe of the no-load RTT holds the limit lower.
	ReasonProbe
	// ReasonBusy: cuts on latency cost goodput and were undone: the
	// latency rose outside the service (a busy sidecar or client, a CPU
	// shared with the service), where a lower limit only refuses work.
	ReasonBusy
	// ReasonGoodput: a goodput probe holds or chose the limit: a higher
	// limit tried (kept when it bought more goodput) or a lower one (kept
	// when it served more: what it cut was queue); or a closed loop's
	// first cut waits for goodput to be measured (see goodput.adjust).
	ReasonGoodput
	// ReasonStart: the start gate holds the first requests to twice the
	// concurrency the service answered fast at (see Limiter).
	ReasonStart
	// ReasonStallOver: the service answered a request it held through a
	// stall, so the stall was a pause, not lost capacity: the limit is
	// back where it stood before the stall.
	ReasonStallOver
	// ReasonBackgroundDrops: cuts on drops (failures the service answered,
	// timeouts) did not lower their share of the outcomes: they are the
	// service's background failures, not overload. The cuts are undone and
	// that share of drops is no longer read as overload.
	ReasonBackgroundDrops
)

var reasonNames = [...]string{"none", "grow", "queue_in_service", "drops", "stall", "probe", "sidecar_busy", "goodput_probe", "start_gate", "stall_over", "background_drops"}

// Reasons returns every Reason but ReasonNone, in order.
func Reasons() []Reason {
	return []Reason{ReasonGrow, ReasonQueue, ReasonDrops, ReasonStall, ReasonProbe, ReasonBusy, ReasonGoodput, ReasonStart, ReasonStallOver, ReasonBackgroundDrops}
}

// String returns the reason's name as /v1/state and the metrics show it.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// The goodput check's settings.
const (
	// goodputMinSamples is the fewest successes a window needs to count as
	// a throughput measurement (about 14% noise on a Poisson count).
	goodputMinSamples = 50
	// upStep is how much higher an up-probe sets the limit; upGain is the
	// share of the proportional goodput gain it must see to keep it.
	upStep = 1.5
	upGain = 0.4
	// upWindows is how many windows an up-probe holds the higher limit:
	// the first settles, the rest are measured.
	upWindows = 3
	// floorHold is how long a limit that goodput vouched for stands against
	// cuts on latency alone, at first (doubling, up to maxFloorHold, while
	// reverts keep being confirmed).
	floorHold    = 5 * time.Second
	maxFloorHold = 40 * time.Second
	// smallLoss is the most goodput a closed loop's up-probe may lose,
	// undone, without putting the next one off (see holding).
	smallLoss = 0.25
	// baseFor is how long a closed loop's climb is judged against the
	// goodput it started from (see holding): a service's own goodput
	// drifts, and a stale base would halt a climb that costs nothing.
	baseFor = 10 * time.Second
	// maxUpEvery bounds the time between up-probes that find nothing.
	maxUpEvery = 32 * time.Second
	// evidenceFor is how long up-probes run after goodput last showed the
	// limit below the service's capacity (a revert, a gain): only then, so
	// that a service at capacity is not probed into a queue.
	evidenceFor = time.Minute
	// downStep is how much lower a down-probe sets the limit: a limit past
	// the service's slots loses nothing (the cut is queue), one at them a
	// quarter. downZ is how many standard errors above the goodput before
	// it the goodput at the lower limit must be to stand.
	downStep = 0.75
	downZ    = 0.5
	// A down-probe holds the lower limit for a round trip and a window to
	// settle (answers still come at the rate the higher limit sent them),
	// then measures for a round trip, at least minDownMeasure windows,
	// against as many before it; a service slower than maxDownSpan
	// windows is not down-probed.
	minDownMeasure = 3
	maxDownSpan    = 16
	// maxDownSpread is the widest spread of a window's RTTs (p90 / p10)
	// that a down-probe runs at: past it (a lognormal sigma over 0.8), a
	// few windows' goodput swings with the long answers that happen to
	// end in them by more than a quarter of the limit costs.
	maxDownSpread = 8
	// minDownFrom is the lowest limit a down-probe starts from: below it
	// a step is too coarse to tell a queue from a slot.
	minDownFrom = 6
	// maxTurnedAway is the most arrivals per success that the limit turns
	// away in a window with a down-probe still allowed. An open loop at 10x
	// its service's capacity turns away 9; a closed loop that the queue
	// refuses (until a hold test finds it) sends each refused request again
	// at once, and turns away 30-40 per success (wrk -c128 before 10 slots
	// of 20 ms): a lower limit there only adds refusals, which the hold
	// test then reads as an open loop's.
	maxTurnedAway = 20
	// downAfterKeep is the wait for the next down-probe after one kept.
	downAfterKeep = 2 * time.Second
	// ceilingCheck is how long after a down-probe is kept an up-probe may
	// check its ceiling (the algorithm's growth is stopped there).
	ceilingCheck = time.Second
	// maxDownEvery bounds the time between down-probes that find nothing.
	maxDownEvery = 32 * time.Second
	// swingOf is how many pairs of windows the goodput's swing is averaged
	// over (an exponential mean), and minSwing the fewest it is read from.
	swingOf  = 16
	minSwing = 4
	// maxSwing bounds swing: a closed loop's up-probe that loses more
	// than 1.5 x maxSwing (smallLoss) is undone, however noisy the
	// machine.
	maxSwing = smallLoss / 1.5
)

// goodput checks the latency algorithm against Little's law: below the
// service's capacity, goodput is limit/RTT and a lower limit costs
// goodput; past it (a queue in the service), goodput stays at capacity and
// a lower limit only shortens the queue. The algorithm reads a rise in RTT
// as a queue in the service, but the RTT also rises when the sidecar or the
// client is short of CPU, or when the service shares a CPU with them; then
// a lower limit refuses work (or queues it) without making anything faster.
// So goodput is measured in windows in which demand exceeded the limit
// (requests were refused or waited):
//
//   - A run of cuts on latency alone is compared with the goodput before
//     it. When the cuts cost goodput (more than half what a limit-bound
//     goodput would lose, and over a tenth), they are undone, and the limit
//     they started from stands as a floor against cuts on latency for a
//     while (doubling while that keeps being confirmed). If goodput does not
//     come back with the limit, the service itself changed: the floor goes.
//   - While the algorithm holds or cuts with demand over the limit, an
//     up-probe now and then tries a limit upStep higher for a few windows;
//     if goodput rises with it by upGain of the proportional gain, the
//     service had room: the new limit stands as a floor. Otherwise it is
//     undone, and the next up-probe waits twice as long. While the queue
//     holds a closed loop (Limiter.SetClosedLoop), whose clients wait as
//     long in the service as in the queue, a higher limit that costs no
//     goodput (beyond chance: the counts', or the goodput's own swing
//     between windows, see swing) is kept, the next step is then 2.25x,
//     and up-probes run without evidence first, also while the algorithm
//     cuts or the floor refuses its cuts.
//   - While the algorithm holds or grows with demand over the limit (an
//     open loop: a closed one's goodput does not tell its queue from the
//     service's), a down-probe now and then tries a limit downStep lower
//     for a round trip and a few windows. If goodput is higher there,
//     beyond chance, what the cut removed was only a queue in the service
//     (Little's law: as much throughput at a lower concurrency is a shorter
//     wait), in a service that serves more with less of it queued
//     (contention): the lower limit stands as a ceiling on the algorithm's
//     growth while demand exceeds it, for a while (doubling while probes
//     confirm it: one kept again, or one from it undone), and the next
//     down-probe comes after downAfterKeep. Otherwise it is undone, and the
//     next waits twice as long. After each probe that sets or confirms a
//     ceiling, one up-probe checks it: the service may have grown (the
//     gain was its own, not the cut's), and only goodput can say so. The
//     algorithm alone settles where the RTT stands its tolerance above
//     the baseline: a queue of a few requests in
//     the service, which costs a contended service a tenth of its
//     throughput. Not for a service slower than maxDownSpan windows, or
//     one whose answers spread past maxDownSpread.
//
// Drops, stalls and probes of the no-load RTT override it: overload is
// always answered. goodput is used under the Limiter's mutex.
type goodput struct {
	window   time.Duration
	evidence int64                 // until when up-probes may run: a revert or a gain was seen (Unix ns)
	last     [2]gpWindow           // the latest windows, newest last
	swingAvg float64               // consecutive windows' goodput differences at one limit, as a share: their mean
	swings   int                   // how many such pairs swingAvg has seen
	span     [maxDownSpan]gpWindow // the latest windows for a down-probe, newest last
	refL     float64               // the limit before the current run of latency cuts; 0: none
	refX     float64               // goodput there, per ns
	refAge   int                   // windows since refL was set
	verify   int                   // windows until a revert is checked
	verifyX  float64
	floor    float64 // cuts on latency stop here until floorAt
	floorAt  int64
	hold     time.Duration
	up       int // windows into the current up-probe; 0: none
	upFrom   float64
	upX      float64
	upN      int64 // successes behind upX
	upNext   int64
	upEvery  time.Duration
	upKept   bool // a closed loop's last up-probe was kept
	upClosed bool // the current up-probe began with a closed loop
	// A closed loop's climb is judged also against its base: the goodput
	// (per ns) at the limit baseL it started from, at baseAt (Unix ns),
	// kept for baseFor while the limit stays at or above it.
	baseX    float64
	baseL    float64
	baseAt   int64
	reverts  uint64
	upProbes uint64
	upGains  uint64
	upUndone uint64

	// The down-probe: like up's fields, and a ceiling on the algorithm's
	// growth until ceilingAt, held for ceilHold.
	down       int // windows into the current down-probe; 0: none
	downSettle int // its windows to settle
	downSpan   int // and to measure
	downFrom   float64
	downX      float64
	downN      int64
	downNext   int64
	downEvery  time.Duration
	ceiling    float64
	ceilingAt  int64
	ceilHold   time.Duration
	downProbes uint64
	downKept   uint64
	downUndone uint64

	// An up-probe that met drops (the service failed requests past a
	// bound: a fail-fast queue) tried failLimit; until failUntil the next
	// ones stop short of it (see overloaded).
	failLimit float64
	failUntil int64
}

// gpWindow is one sample window as the goodput check sees it.
type gpWindow struct {
	limit float64
	x     float64 // successes per ns
	n     int64
	sat   bool // demand exceeded the limit
}

// at reports whether the window ran at the limit lim: within a tenth of
// it, and half a request.
func (w gpWindow) at(lim float64) bool { return math.Abs(w.limit-lim) <= 0.1*lim+0.5 }

func newGoodput(window time.Duration) goodput {
	return goodput{window: window, hold: floorHold, upEvery: time.Second, downEvery: time.Second, ceilHold: floorHold}
}

// observe records a closed window.
func (g *goodput) observe(w gpWindow) {
	if p := g.last[1]; p.sat && w.sat && p.n >= goodputMinSamples && w.n >= goodputMinSamples && w.at(p.limit) {
		// Two windows in a row at one limit: how far their goodput differs.
		d := math.Abs(w.x-p.x) / ((w.x + p.x) / 2)
		if g.swings == 0 {
			g.swingAvg = d
		} else {
			g.swingAvg += (d - g.swingAvg) / swingOf
		}
		g.swings++
	}
	g.last = [2]gpWindow{g.last[1], w}
	copy(g.span[:], g.span[1:])
	g.span[len(g.span)-1] = w
}

// spanned returns the goodput of the newest k windows (at most
// maxDownSpan) when all ran saturated at the limit cur, with
// goodputMinSamples successes between them: a down-probe measures a
// service of a few hundred requests a second, whose windows are short of
// them one by one.
func (g *goodput) spanned(cur float64, k int) (x float64, n int64, ok bool) {
	var age float64
	for _, w := range g.span[len(g.span)-k:] {
		if !w.sat || w.x <= 0 || !w.at(cur) {
			return 0, 0, false
		}
		n += w.n
		age += float64(w.n) / w.x
	}
	if n < goodputMinSamples {
		return 0, 0, false
	}
	return float64(n) / age, n, true
}

// recent returns the goodput of the last two windows when both ran
// saturated at the limit cur with enough successes.
func (g *goodput) recent(cur float64) (float64, bool) { return g.lastTwo(cur, true) }

// lastTwo returns the goodput of the last two windows when both ran at the
// limit cur with enough successes, and saturated if sat (without: a
// closed loop's goodput at a limit it fits under).
func (g *goodput) lastTwo(cur float64, sat bool) (float64, bool) {
	var sum float64
	for _, w := range g.last {
		if sat && !w.sat || w.n < goodputMinSamples || !w.at(cur) {
			return 0, false
		}
		sum += w.x
	}
	return sum / 2, true
}

// swing returns how far two measurements of goodput, two windows each at
// one limit, differ by chance, as a share: the standard deviation of one
// window's goodput (which that of the difference of two two-window means
// equals), read from the mean difference between consecutive windows at
// one limit (a normal's is 1.128 standard deviations: 2 / sqrt(pi)), over
// about the latest swingOf such pairs; 0 before minSwing pairs, and at
// most maxSwing. It holds what the counts' chance does not: a busy
// machine's swings.
func (g *goodput) swing() float64 {
	if g.swings < minSwing {
		return 0
	}
	return math.Min(g.swingAvg/1.128, maxSwing)
}

// recentN returns the successes of the last two windows.
func (g *goodput) recentN() int64 { return g.last[0].n + g.last[1].n }

// reset forgets what the check knew: overload (drops, a stall) was seen.
func (g *goodput) reset() {
	g.refL, g.floor, g.up, g.verify = 0, 0, 0, 0
	g.baseX = 0
	g.hold = floorHold
	g.down, g.ceiling, g.ceilHold = 0, 0, floorHold
}

// costly reports whether the cuts from refL to cur cost goodput (x, per
// ns): more than half what a limit-bound goodput would lose, and over a
// tenth.
func (g *goodput) costly(cur, x float64) bool {
	return cur <= 0.85*g.refL && x < 0.9*g.refX && x < g.refX*(1-0.5*(1-cur/g.refL))
}

// holding reports whether an up-probe holds the limit, and the limit to
// use: the probe's, or, once measured, the one it chose.
//
// A closed loop's probe of a fast service (rtt, the window's median, under
// a tenth of a window) has no window to settle: the requests admitted at
// the lower limit end within the first tenth of the first window, and the
// two windows after the probe began are measured. One kept there is
// followed at once by the next, from the limit kept, its two windows the
// next one's measure (while maxLimit allows): the loop waits in the queue
// for every step, and before, each step took five windows (wrk -c256
// before a service that answers at once held the limit under the loop for
// 0.9-2.3 s, a tenth to a fifth of the proxy's throughput lost over a 5 s
// run).
func (g *goodput) holding(now int64, cur, maxLimit float64, closed bool, rtt time.Duration) (next float64, reason Reason, held bool) {
	if g.down > 0 {
		return g.holdingDown(now, cur)
	}
	if g.up == 0 {
		return 0, 0, false
	}
	// The queue's read of a closed loop lapses once the loop fits under
	// the limit: a probe that began with one is judged as one. Not while
	// demand still exceeds the limit and the queue reads no closed loop:
	// then the loop is an open one (one misread at a flood's onset, when
	// the first hold test may take a burst for a loop), and a higher limit
	// that only queues in the service costs it latency, not goodput: kept
	// as a closed loop's, step after step, it took the limit before one
	// slot of 1 ms at 5x from 4 to max_limit (1,000) in 2 s, the RTT from
	// 1 ms to 1 s.
	closed = closed || (g.upClosed && !g.last[1].sat)
	g.up++
	windows := upWindows
	if closed && rtt > 0 && 10*rtt <= g.window {
		windows = upWindows - 1
	}
	if g.up <= windows {
		return cur, ReasonGoodput, true
	}
	g.up = 0
	x, ok := g.recent(cur)
	if !ok && !g.last[1].sat && !g.last[0].sat {
		if !closed {
			// Demand fits under the higher limit: it was needed.
			g.upKept = false
			g.keep(now, cur)
			return cur, ReasonGoodput, true
		}
		// A closed loop fits under the higher limit: all of it is in
		// the service, which says nothing of need (a loop fits under
		// any limit past its size). Its goodput there still tells:
		// before a service that serves less with more in flight, a
		// probe that took in the whole loop was kept for fitting (40
		// clients before 10 slots slowing 20% per waiting request:
		// the limit went from 26 to 60, goodput from 950 to 670 a
		// second).
		x, ok = g.lastTwo(cur, false)
	}
	want := g.upX * (1 + upGain*(cur/g.upFrom-1))
	if closed {
		// A closed loop waits as long in the service as in the queue: a
		// higher limit is kept unless it lost goodput, by more than the
		// two measurements' chance difference (1.5 standard errors of
		// the difference of two Poisson counts): a neutral probe would
		// otherwise be undone every other time, and the limit climb
		// towards what the loop needs at a quarter of the pace.
		// Chance is the larger of the counts' and the goodput's own swings
		// (swing): on a busy machine a window's goodput swings by a tenth
		// or more, three times a Poisson count's, and a neutral probe was
		// undone two times in five (wrk -c1024 before a service that
		// answers at once, the sidecar's core shared with it).
		chance := math.Max(math.Sqrt(1/float64(max(g.upN, 1))+1/float64(max(g.recentN(), 1))), g.swing())
		want = g.upX * (1 - 1.5*chance)
		// Nor past that of the climb's base: a run of steps each of
		// which lost less than chance is no neutral climb (40 clients
		// before 10 slots slowing 20% per waiting request climbed from
		// 19 to 67 in steps each within chance, goodput from 950 to 670
		// a second).
		want = math.Max(want, g.baseX*(1-1.5*chance))
	}
	if ok && x >= want {
		g.upKept = closed
		g.keep(now, cur)
		if closed && cur < maxLimit && g.last[1].sat {
			// (Not once the loop fits: a higher limit has nothing
			// more to take in.)
			return g.startUp(now, cur, x, closed), ReasonGoodput, true
		}
		return cur, ReasonGoodput, true
	}
	g.upKept = false
	g.upUndone++
	wait := g.upEvery
	if closed && ok && g.swings < minSwing {
		// A closed loop's probe judged before the goodput's swing was
		// measured, on the counts' chance alone (a few percent, where a
		// busy machine swings 10-15%, and a loop's first windows more:
		// its connections still opening upstream): tried again as soon
		// as after a kept one, whatever it lost. The swing is measured
		// within a probe or two (each holds windows at one limit), and a
		// service that serves less with more in flight then puts the
		// next probe off as below. Before, wrk -c256 before a Go service
		// on the sidecar's core had its first 2.25x step (24 to 55)
		// undone one time in four and held 24 for a second.
		wait = 2 * g.window
	} else if !closed || !ok || x < (1-smallLoss)*g.upX {
		// Each probe that finds nothing costs (refusals and waits for an
		// open loop, a service that serves less with more in flight for
		// a closed one): the next waits twice as long. A closed loop's
		// probe undone for a small loss, though, is what a busy
		// machine's swings in throughput make of a neutral one: the
		// next comes as soon, or they would halt the loop's climb.
		g.upEvery = min(2*g.upEvery, maxUpEvery)
		wait = g.upEvery
	}
	g.upNext = now + int64(wait)
	return g.upFrom, ReasonGoodput, true
}

// holdingDown is holding for a down-probe.
func (g *goodput) holdingDown(now int64, cur float64) (float64, Reason, bool) {
	g.down++
	if g.down <= g.downSettle+g.downSpan {
		return cur, ReasonGoodput, true
	}
	g.down = 0
	x, n, ok := g.spanned(cur, g.downSpan)
	if !ok {
		// Demand fell under the lower limit, or too few answers to tell:
		// the probe says nothing; back to where it started.
		g.downUndone++
		g.downNext = now + int64(g.downEvery)
		return g.downFrom, ReasonGoodput, true
	}
	// Kept only on goodput that held beyond chance (half a standard
	// error of the difference of the two counts): a lower limit kept by
	// mistake costs goodput for the ceiling's hold, one undone by mistake
	// only the next probe's wait.
	if x >= g.downX*(1+downZ*math.Sqrt(1/float64(max(g.downN, 1))+1/float64(max(n, 1)))) {
		// More goodput at a lower concurrency: the cut was queue.
		g.downKept++
		if g.ceiling > 0 && now < g.ceilingAt {
			g.ceilHold = min(2*g.ceilHold, maxFloorHold)
		}
		g.ceiling, g.ceilingAt = cur, now+int64(g.ceilHold)
		g.downEvery = time.Second
		g.downNext = now + int64(downAfterKeep)
		// The gain may be the service's, not the cut's: one that grew
		// while the probe ran (its slots doubled) serves more at the
		// lower limit too, and the ceiling would then hold it under its
		// new slots for as long as down-probes from it serve less. One
		// up-probe from the ceiling, once it has settled, tells them
		// apart: it is kept (and the ceiling dropped) only if the higher
		// limit now serves more.
		g.checkCeiling(now)
		return cur, ReasonGoodput, true
	}
	// The lower limit served less: the service had the slots.
	g.downUndone++
	if g.ceiling > 0 && g.downFrom <= g.ceiling+0.5 {
		// From the ceiling: the service's slots lie between the two, and
		// the ceiling stands longer, unless they have grown past it: an
		// up-probe from it checks that once.
		g.ceilHold = min(2*g.ceilHold, maxFloorHold)
		g.ceilingAt = now + int64(g.ceilHold)
		g.checkCeiling(now)
	}
	g.downEvery = min(2*g.downEvery, maxDownEvery)
	g.downNext = now + int64(g.downEvery)
	return g.downFrom, ReasonGoodput, true
}

// checkCeiling lets one up-probe run from the ceiling soon (see
// ceilingCheck).
func (g *goodput) checkCeiling(now int64) {
	g.evidence = max(g.evidence, now+int64(ceilingCheck))
	g.upNext = now + int64(2*g.window)
}

// upStep returns how much higher the next up-probe sets the limit: upStep,
// and upStep squared (2.25x) for a closed loop whose last up-probe was
// kept. Where a closed loop's goodput is flat whatever the limit (a
// service that answers at once, behind a sidecar short of CPU), each probe
// is kept and none gains: the loop waits in the queue, each slot handed
// over one at a time, until the limit holds all of it (wrk -c1024: from 64
// in flight, seven 1.5x steps, 3.5 s of probes at best, four steps now;
// the queue's hand-overs, one wake-up of the client per answer, cost
// 7-20% of the sidecar's throughput meanwhile). The first step from a
// limit is still upStep, and a service that serves less with more in
// flight loses goodput at the first larger step, which is undone: the
// next is upStep again.
func (g *goodput) upStep(closed bool) float64 {
	if closed && g.upKept {
		return upStep * upStep
	}
	return upStep
}

// startUp starts an up-probe from cur, whose goodput is x (per ns, over
// the last two windows), and returns the limit it tries.
func (g *goodput) startUp(now int64, cur, x float64, closed bool) float64 {
	g.up, g.upFrom, g.upX, g.upN, g.upClosed = 1, cur, x, g.recentN(), closed
	if closed && (g.baseX == 0 || now >= g.baseAt+int64(baseFor) || cur < g.baseL) {
		g.baseX, g.baseL, g.baseAt = x, cur, now
	}
	g.upProbes++
	g.upNext = now + int64(g.upEvery)
	next := math.Max(cur*g.upStep(closed), cur+2)
	if now < g.failUntil {
		// Halfway to where a probe met drops, at most.
		next = math.Min(next, math.Max(cur+1, (cur+g.failLimit)/2))
	}
	return next
}

// failHold is how long up-probes stop short of a limit at which one met
// drops.
const failHold = 10 * time.Second

// overloaded ends an up-probe that met drops at the limit cur (overload
// is answered at once: see Limiter's cut on drops) as one that found
// nothing: the next waits twice as long, and until failHold has passed
// the next ones go at most halfway back to cur. A service that fails fast
// past a bound (8 slots and a queue of 16 that answers 503 past it) fails
// what passes its bound at once, so each request over it comes back at
// the sidecar's pace, not the service's: a closed loop's up-probe from 20
// to 45 (its 2.25x step) answered 503 to thousands a second until the
// drops cut it, and the next probe came a second later.
func (g *goodput) overloaded(now int64, cur float64) {
	if g.up == 0 {
		return
	}
	g.up, g.upKept = 0, false
	g.upUndone++
	g.upEvery = min(2*g.upEvery, maxUpEvery)
	g.upNext = now + int64(g.upEvery)
	g.failLimit, g.failUntil = cur, now+int64(failHold)
}

// keep makes limit a floor after an up-probe found it needed, and lets the
// next up-probe come soon.
func (g *goodput) keep(now int64, limit float64) {
	g.upGains++
	g.ceiling = 0 // the service has more room than a down-probe found
	g.floor, g.floorAt = limit, now+int64(g.hold)
	g.upEvery = time.Second
	g.upNext = now + int64(2*g.window)
	g.refL = 0
	g.evidence = now + int64(evidenceFor)
}

// adjust checks the algorithm's next limit against goodput and returns
// the limit to use and, when it overrode the algorithm, why. rtt and
// spread are the window's median RTT and p90/p10; resending says its
// clients were turned away past maxTurnedAway per success.
func (g *goodput) adjust(now int64, cur, next float64, maxLimit float64, closed bool, rtt time.Duration, spread float64, resending bool) (float64, Reason) {
	if g.floor > 0 && now >= g.floorAt {
		g.floor = 0
	}
	x, ok := g.recent(cur)
	if g.verify > 0 {
		g.verify--
		if g.verify == 0 {
			if ok && x >= 0.9*g.verifyX {
				g.hold = min(2*g.hold, maxFloorHold) // the revert gave goodput back
			} else if ok {
				g.floor, g.hold = 0, floorHold // the service changed, not the limit
			} else {
				g.verify = 1 // not measured yet: at the next window
			}
		}
	}
	if g.refL > 0 {
		g.refAge++
		switch {
		case cur >= g.refL || g.refAge > 30:
			g.refL = 0
		case ok && g.costly(cur, x):
			// The cuts cost goodput: undo them.
			back := g.refL
			g.floor, g.floorAt = back, now+int64(g.hold)
			g.verify, g.verifyX = 3, g.refX
			g.refL = 0
			g.reverts++
			g.evidence = now + int64(evidenceFor)
			return back, ReasonBusy
		}
	}
	var why Reason
	if next < cur {
		if g.refL == 0 && ok {
			g.refL, g.refX, g.refAge = cur, x, 0
		}
		if g.floor > 0 && next < g.floor {
			next, why = math.Max(next, math.Min(g.floor, cur)), ReasonBusy
		}
		if !closed {
			return next, why
		}
		if !ok && g.upProbes == 0 {
			// A closed loop's first cuts, before goodput was measured at
			// any limit: the limit holds until it is (two windows), and
			// the up-probe that follows judges it. Its clients wait as
			// long in the queue as in the service, and the latency the
			// first windows read, that of a loop arriving all at once at
			// a sidecar sharing a core with its service, is no queue in
			// it: cut window after window (never two at one limit, so no
			// up-probe could start), wrk -c256 before a Go service that
			// answers at once took the start gate's 16 to 5 in 0.4 s, and
			// then climbed back step by step.
			return cur, ReasonGoodput
		}
		// A closed loop: its clients wait as long in the queue as in the
		// service, and the algorithm's cuts, on the latency of a busy
		// sidecar or client, are what the floor refuses. So a cut does
		// not put the next up-probe off: the loop's limit may go on
		// climbing. (Before, every window's cut before a floor stood did:
		// wrk -c1024 before a service that answers at once held the limit
		// at 12-16 for 4 s, 1,000 clients waiting.)
	}
	if g.ceiling > 0 && (now >= g.ceilingAt || !g.last[1].sat) {
		// Its hold is over, or demand fits under the limit (an overload
		// over): no ceiling.
		g.ceiling = 0
	}
	rounds := int(math.Ceil(float64(rtt) / float64(g.window)))
	settle, span := rounds+1, max(minDownMeasure, rounds)
	if span > maxDownSpan || spread > maxDownSpread {
		span = 0 // too slow a service to measure in time, or too noisy
	}
	if x, n, ok := g.spanned(cur, span); ok && span > 0 && next >= cur && !closed && !resending && g.verify == 0 && g.refL == 0 && cur >= minDownFrom &&
		now >= g.downNext && now >= g.evidence {
		// The algorithm holds or grows with demand over the limit: would
		// a lower limit serve as much?
		g.down, g.downSettle, g.downSpan, g.downFrom, g.downX, g.downN = 1, settle, span, cur, x, n
		g.downProbes++
		g.downNext = now + int64(g.downEvery)
		return math.Ceil(cur * downStep), ReasonGoodput
	}
	if g.ceiling > 0 && next > cur && next > g.ceiling && !closed {
		// A down-probe found the limit past the service's slots: the
		// algorithm's growth stops at the limit it kept.
		next = math.Max(cur, g.ceiling)
	}
	// The algorithm holds, or grows by less than a probe would (a closed
	// loop at capacity has it grow a little and cut, window after window).
	holds := next <= 1.02*cur || closed && next < upStep*cur
	if (now < g.evidence || closed) && ok && holds && now >= g.upNext && g.verify == 0 && cur < maxLimit {
		return g.startUp(now, cur, x, closed), ReasonGoodput
	}
	return next, why
}
