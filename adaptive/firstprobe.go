package adaptive

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// firstMax is the most requests the first-requests probe measures.
const firstMax = 32

// firstProbe measures the service's no-load RTT from the first requests a
// limiter admits, without lowering the limit. A load that begins admits
// its first requests one after another, at a concurrency rising from 1:
// the first half of them ran at most at half the concurrency of the
// second, as a probe at half the limit does. When the second half's
// median is within 20% of the first's (the step finishProbe takes for "a
// small queue, if any"), the service did not queue at that concurrency,
// and the faster half's median is the baseline (the first answers may be
// the slower: new connections, a service warming up). Otherwise (a queue, a
// drop, too few admitted, or the answer not known in time) the limiter
// probes as it would have.
//
// Before, the first saturated window always probed at half the limit:
// before a 500 ms service that is one RTT waiting for the requests over
// half to end and another for the probe's own, while the clients over the
// limit wait in the queue, and many pass max_wait (12.5% of a load at
// half the capacity of 200 x 500 ms refused in seconds 1-6).
type firstProbe struct {
	open atomic.Bool  // still collecting: read on every admission and release
	read atomic.Bool  // they measured the baseline: those still in flight are no samples
	n    atomic.Int64 // admissions counted
	want int          // how many it measures: 2 x MinSamples, at most firstMax
	// By admission order: the RTT (ns; 0 while in flight, -1 for a drop),
	// the concurrency the request was admitted at, and when.
	rtt [firstMax]atomic.Int64
	in  [firstMax]atomic.Int64
	at  [firstMax]atomic.Int64
	// The start gate (see ended): while gated (until the first window with
	// enough samples closes), gate bounds the limit (0: not yet); fast is
	// the fastest of their first answers (ns; 0: none yet); nfast counts the
	// answers that moved the gate.
	gated atomic.Bool
	// binds: the first requests showed a queue (queuedAt), or the load
	// outran the gate (outran); it bounds the limit from then on.
	binds atomic.Bool
	fast  atomic.Int64
	slow  atomic.Int64 // the slowest of the first fastOf answers (ns)
	gate  atomic.Int64
	nfast atomic.Int64
	// answered counts their answers: fast is the fastest of the first
	// fastOf, the ones least likely to have queued. (The fastest of all
	// twenty, before a heavy tail, is far below its median: too few would
	// count as fast, and the gate would hold a light load back.)
	answered atomic.Int64
	// queued: their verdict is a deep queue (firstDeep), or no queue with
	// demand over the limit (firstYes), and the window they are in closes
	// at once (checkQueue, Limiter.maybeClose).
	queued atomic.Bool
}

// fastOf is how many of the first answers fast is the fastest of.
const fastOf = 3

// admitted numbers an admission at concurrency in, at now: its index
// among the first, or -1.
func (f *firstProbe) admitted(in, now int64) int8 {
	if !f.open.Load() {
		return -1
	}
	i := f.n.Add(1) - 1
	if i >= int64(f.want) {
		return -1
	}
	f.in[i].Store(in)
	f.at[i].Store(now)
	return int8(i)
}

// ended records, at now, the RTT of the i-th first request; rtt < 0 for
// one that measured nothing (a drop, a client that left, a restarted
// clock). What is recorded first stands: a restart's -1 is not
// overwritten at release. It reports whether the start gate moved while
// it bounds the limit.
//
// The start gate is TCP's slow start before the first window is read:
// the initial limit (20) sent at once into a service of 2 slots x 200 ms
// queues for 2 s in it, past a client's timeout, and every request of the
// first seconds is lost (the sweep's 2 x 200 ms cell at 2x served 22-26%
// of capacity). So, until the first window with enough samples closes, a
// request admitted at concurrency c >= 2 and answered within twice the
// fastest of the first three answers lets 2 x c be in flight (at least
// twice the number of such answers), as acknowledgements let TCP's window
// grow; slower answers let nothing more in. The gate bounds the limit
// only once the load asks for over twice what it allows (outran), or the
// first requests show a queue behind it (queuedAt): a light load's chance
// bursts, and a heavy tail's slow answers, are no reason to refuse.
// (Requests alone in flight, a health check long before the load, say
// nothing and bound nothing.) Requests admitted together (a burst) are
// answered alike, whatever the service's size, and the gate opens past
// the initial limit at once; requests that queue behind a few slots are
// answered ever later, and the gate stays at twice the slots.
func (f *firstProbe) ended(i int8, rtt, now, asked int64) bool {
	if rtt >= 0 {
		rtt = max(rtt, 1)
	}
	if !f.rtt[i].CompareAndSwap(0, rtt) || rtt <= 0 || !f.gated.Load() {
		return false
	}
	if f.answered.Add(1) <= fastOf {
		for {
			v := f.fast.Load()
			if (v > 0 && v <= rtt) || f.fast.CompareAndSwap(v, rtt) {
				break
			}
		}
		storeMax(&f.slow, rtt)
	}
	moved := false
	if in := f.in[i].Load(); in >= 2 && float64(rtt) <= f.tolerance()*float64(f.fast.Load()) {
		c := 2 * max(in, f.nfast.Add(1))
		for {
			g := f.gate.Load()
			if g >= c {
				break
			}
			if f.gate.CompareAndSwap(g, c) {
				moved = true
				break
			}
		}
	}
	if !f.binds.Load() && (f.queuedAt(now) || f.outran(now, asked)) {
		f.binds.Store(true)
		moved = true
	}
	return moved && f.binds.Load()
}

// tolerance is how many times the fastest of the first answers an answer
// may take and still move the gate: twice, the spread of a lognormal
// service without a queue, or 1.1 times once the first fastOf answers
// came within 2% of each other. A service that answers alike makes every
// wait a whole number of half or whole service times: before 5 slots x
// 50 ms at twice their capacity, the requests admitted at 6-10 in flight
// took 1.5 times the fastest, and the next five twice, and with the
// tolerance at 2 the gate opened to the initial 20 (the first second's
// p99 250 ms against 154). Not for answers under tightFrom: there the
// sidecar's own scheduling and a busy CPU make answers slower the more are
// in flight without any queue in the service (a closed loop of 1,024
// through a busy sidecar, simulated, was held whole after 8.2 s against
// 3.4-3.7 s).
func (f *firstProbe) tolerance() float64 {
	if f.alike() {
		return 1.1
	}
	return 2
}

// alike reports whether the first fastOf answers came within 2% of each
// other, each at least tightFrom: a service that answers alike.
func (f *firstProbe) alike() bool {
	fast := f.fast.Load()
	return f.answered.Load() >= fastOf && fast >= int64(tightFrom) && float64(f.slow.Load()) <= 1.02*float64(fast)
}

// tightFrom is the shortest fastest answer for which answers alike make
// the start gate's tolerance tight.
const tightFrom = 10 * time.Millisecond

// outran reports whether the load, asked requests since the first was
// admitted, asks at now for over twice the concurrency the gate allows:
// by Little's law, its rate times the fastest answer (a load at the gate
// may be a light one whose chance bursts the answers vet as they come:
// 4,000 a second before a service answering in 1 ms). Such a load fills
// whatever the gate does not hold back before the answers that would
// vet it come (TCP's slow start engages only when the sender has more to
// send than its window); a load under the gate is none of its business.
func (f *firstProbe) outran(now, asked int64) bool {
	fast, g, since := f.fast.Load(), f.gate.Load(), now-f.at[0].Load()
	return fast > 0 && g > 0 && since > 0 && float64(asked)*float64(fast)/float64(since) > 2*float64(g)
}

// queuedAt reports whether the first requests show a queue behind the
// start gate at now: of those sent with another in flight, most of the
// ones admitted above half the gate took longer than the tolerance allows (answered
// so, or still in flight at now for longer), and at most half as large a
// share of those admitted at or below it. A queue makes requests slower
// the more there are ahead of them; a heavy tail makes some slow at every
// concurrency, and says nothing. When fewer than two were admitted at or
// below half the gate with another in flight, those admitted alone count
// among them: before 2 slots the gate is 4, and the few admitted at 2 left
// nothing to compare with (the gate went unheeded in half the simulated
// runs of the sweep's 2 x 200 ms cells, and the initial limit queued for
// seconds in the service). Not otherwise: the first request of a burst is
// admitted alone and answered first, and counted always it made a heavy
// tail's burst (a closed loop of 1,024 before 50 slots, sigma 1) look
// queued: the estimate started from the gate, and the loop was served 30%
// of the service's capacity instead of 60-70%.
func (f *firstProbe) queuedAt(now int64) bool {
	fast, half, tol := f.fast.Load(), f.gate.Load()/2, f.tolerance()
	if fast <= 0 || half <= 0 {
		return false
	}
	type group struct{ n, slow int }
	var alone, lo, hi group
	for i := range min(int(f.n.Load()), f.want) {
		in, r, at := f.in[i].Load(), f.rtt[i].Load(), f.at[i].Load()
		if r == 0 && at > 0 && float64(now-at) > tol*float64(fast) {
			r = now - at // still in flight: at least this
		}
		if r <= 0 {
			continue // no sample, being admitted, or in flight and not slow yet
		}
		g := &lo
		switch {
		case in < 2:
			g = &alone
		case in > half:
			g = &hi
		}
		g.n++
		if float64(r) > tol*float64(fast) {
			g.slow++
		}
	}
	if lo.n < 2 {
		lo.n, lo.slow = lo.n+alone.n, lo.slow+alone.slow
	}
	return lo.n >= 2 && hi.n >= 2 && 2*hi.slow > hi.n && 2*lo.slow*hi.n <= hi.slow*lo.n
}

// maxIn is the highest concurrency the first requests were admitted at.
func (f *firstProbe) maxIn() int64 {
	var m int64
	for i := range min(int(f.n.Load()), f.want) {
		m = max(m, f.in[i].Load())
	}
	return m
}

// firstVerdict is what the first requests say of the baseline.
type firstVerdict int

const (
	firstWait firstVerdict = iota // not known yet: do not probe yet
	firstNo                       // a queue, a drop, or no answer in time: probe
	firstDeep                     // a queue the earlier half met too: probe below it
	firstYes                      // no queue: the baseline is measured
)

// firstStep is what the first requests measured, as a probe's step: a
// median RTT (ns; 0: none) and, for firstDeep, the mean concurrency the
// earlier half was admitted at.
type firstStep struct{ rtt, in float64 }

// verdict reads the first requests at now. A request still in flight was
// admitted by the last one's admission, so its RTT is at least the time
// since: a half's median is known once its rank is reached by requests
// that ended faster (as a probe's, probeMedianKnown). giveUp is when to
// stop waiting for an answer (the fastest success ever times four: a
// service without a queue answers the first requests well within it).
// It returns the faster half's median with firstYes, and the earlier
// half's median and mean concurrency with firstDeep.
func (f *firstProbe) verdict(now int64, giveUp int64) (firstVerdict, firstStep) {
	k := f.want
	if f.n.Load() < int64(k) || k < 4 {
		return firstNo, firstStep{}
	}
	bound := now - f.at[k-1].Load() // what each one still in flight has taken at least
	var in [2]float64
	var halves [2][]int64
	var buf [firstMax]int64
	halves[0], halves[1] = buf[:0:k/2], buf[k/2:k/2]
	for i := range k {
		r := f.rtt[i].Load()
		if r < 0 {
			return firstNo, firstStep{}
		}
		h := i * 2 / k
		in[h] += float64(f.in[i].Load())
		if r > 0 {
			halves[h] = append(halves[h], r)
		}
	}
	if in[1] < 1.5*in[0] {
		return firstNo, firstStep{} // admitted at alike concurrencies: no comparison
	}
	// median returns a half's median and whether it is known; when not, at
	// least the lower bound it returns.
	median := func(h []int64, size int) (float64, bool) {
		slices.Sort(h)
		rank := int(0.5*float64(size)) + 1
		if len(h) >= rank && h[rank-1] < bound {
			return float64(h[rank-1]), true
		}
		return float64(bound), false
	}
	m1, known1 := median(halves[0], k/2)
	m2, known2 := median(halves[1], k-k/2)
	switch {
	case known1 && m2 > 1.2*m1:
		// Slower at the higher concurrency: a queue. Deep: the earlier
		// half queued too, twice as slow as the start gate's tolerance
		// of the fastest answer allows (its median request waited for
		// at least three others: a service of 10 slots, which slows as
		// work waits in it, made the earlier half 2x the fastest).
		if m1 > 2*f.tolerance()*float64(f.fast.Load()) {
			return firstDeep, firstStep{rtt: m1, in: in[0] / float64((k+1)/2)}
		}
		return firstNo, firstStep{}
	case known1 && known2:
		return firstYes, firstStep{rtt: math.Min(m1, m2)}
	case now >= giveUp:
		return firstNo, firstStep{}
	}
	return firstWait, firstStep{}
}

// checkQueue, at the answer of one of the first requests at now, marks
// them queued once their verdict is a queue that even the earlier half
// met (deep), for the window to close at once (Limiter.maybeClose): the
// window's probe is due, and the queue of a limit many times the
// service's slots does not wait for the window's end. Before one slot of
// 1 ms at twice its capacity, the initial 20 in flight queued 20 ms in
// it; the first requests showed it within 20 ms, and the 100 ms window's
// 70 answers at 22 ms were the run's p99 (23 ms against a service's own
// 7). Not a queue that only the later half met: a limit near the
// service's slots (10 of 20 ms, a tenth of them ten times slower) is
// read by its window as before, and its probe measured at a step near
// the slots (simulated: closing early, one run of four held the limit
// at 5-9 for seconds, 67% of capacity).
//
// A verdict of no queue closes the window at once too when the window
// refused requests (refused: demand over the limit), so that slow start
// takes its step (firstMeasured) then instead of at the window's end, as
// TCP's doubles once a round trip (4,000 a second before a 20 ms service
// of unlimited concurrency waited at the initial limit for the whole first
// window, 400 arrivals queued in the sidecar).
func (f *firstProbe) checkQueue(now int64, refused bool) {
	if !f.open.Load() || f.queued.Load() {
		return
	}
	if v, _ := f.verdict(now, math.MaxInt64); v == firstDeep || (v == firstYes && refused) {
		f.queued.Store(true)
	}
}

// firstMeasured, at the close of a saturated window s with no baseline
// yet (early: closed before its time by their queue, checkQueue), reads
// the first requests: it reports whether they measured the
// baseline (then the window is theirs, and taken); when they say no, or
// cannot tell in time, it closes their probe, and the window's probe at
// half is due; while their answer is still to come, their probe stays
// open, and no probe is due (maybeProbe). When their deep queue closed
// the window early, it also returns what they measured of it: the
// window is theirs (a few of them, the rest in flight), its median the
// ramp of their concurrency, not the queue at the limit, and the
// earlier half is the step before the probe's first (maybeProbe).
// Called with l.mu held.
func (l *Limiter) firstMeasured(now int64, s Sample, early bool) (bool, firstStep) {
	f := &l.first
	giveUp := f.at[0].Load() + int64(4*math.Max(l.minRTT, 1))
	v, q := f.verdict(now, giveUp)
	switch v {
	case firstWait:
		return false, firstStep{}
	case firstNo, firstDeep:
		f.open.Store(false)
		if v == firstDeep && early {
			return false, q
		}
		return false, firstStep{}
	}
	m := q.rtt
	// No queue at the whole limit, and demand over it (the window
	// refused): take the step slow start takes once a window shows that.
	// The window is theirs (the first to end were read by the first
	// window, the slowest close this one, so its median is the burst's
	// tail, not a queue): the algorithm does not read it, and the first
	// requests that end from now on are no samples.
	f.open.Store(false)
	f.read.Store(true)
	l.measured(m, now, true)
	l.lastProbeAt = now
	l.recent = [3]probeResult{l.recent[1], l.recent[2], {at: now, rtt: m}}
	next := l.estimate
	if ss, ok := l.cfg.Algorithm.(SlowStarter); ok && ss.SlowStarts() {
		// Unless this window's own RTT shows no queue at the limit (as
		// slow start reads one), to twice the concurrency they were
		// admitted at, as slow start doubles at most twice what was
		// answered: the limit may have doubled since they were sent (20
		// slots of 40 ms at 2x: slow start took 20 to 40 on the first
		// window, and their verdict, of 20 in flight, a window later
		// took 40, at 1.5x their RTT, to 80; the first second's p99 was
		// 257 ms).
		next = 2 * l.estimate
		if s.RTT <= 0 || float64(s.RTT) > slowStartRTT*m {
			next = math.Max(l.estimate, math.Min(next, 2*float64(f.maxIn())))
		}
		if next > l.estimate {
			l.steppedAt = now // the next window may close early (quick)
		}
	}
	s.NoLoadRTT = time.Duration(m)
	l.setEstimate(next, ReasonGrow, s)
	return true, firstStep{}
}
