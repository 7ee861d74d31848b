package queue

import "math/bits"

// fairBuckets is how many sub-queues a priority level has when the queue is
// fair among tenants. A tenant's waiters go to one of the handSize buckets
// its key hashes to (shuffle sharding, as Kubernetes' API Priority and
// Fairness does with its queues): the one it used last while no other
// tenant took it over since, else the one with the fewest recent arrivals,
// else one not trimmed lately, else the shortest. The level serves its
// non-empty buckets in turn. A tenant keeps to one bucket, so it gets one
// turn per round however much it sends (a flood spread over its whole hand
// would take three), and a bucket that another tenant floods is left for
// another of the hand. CoDel trims only buckets that receive more than
// their turns serve, so a tenant asking for less than its share is never
// dropped for waiting its turn (max-min fairness). Memory does not grow
// with the number of tenants; a flooding tenant crowds the few tenants
// whose every bucket is taken by heavier tenants (with one flood, a tenant
// whose three buckets all are the flood's one: 1 in 64^3), and the others
// are served at their turn whatever it sends.
const fairBuckets = 64

// handSize is how many buckets a tenant may use.
const handSize = 3

// level is one priority level: one bucket of waiters, or fairBuckets
// served round robin. Methods are called with the queue's lock held.
type level[P any] struct {
	buckets []deque[P]
	// arrivals counts, per bucket, the waiters that joined it lately
	// (halved every queue interval): a flood's buckets keep a high count
	// even when they are short for a moment. served counts those handed a
	// slot, halved with arrivals: a bucket whose arrivals outrun what it is
	// served is backlogged (see dropOlder).
	arrivals  []uint32
	served    []uint32
	owner     []uint64 // per bucket, the tenant of the last waiter that joined it
	arrivedAt int64    // when arrivals were last halved (Unix ns)
	trimmed   []int64  // per bucket, when CoDel last trimmed it (Unix ns): a fat flow's
	busy      uint64   // bit i: buckets[i] has waiters
	next      int      // the bucket whose turn is next
	length    int
	drained   int64 // when the level last drained (Unix ns): see Queue.serveLevel
	shed      int64 // when a waiter of the level was last dropped or timed out (Unix ns)
	// impatient: when a waiter's client last left it after it had waited
	// past MaxWait (Unix ns; see Queue.heldLonger).
	impatient int64
	growth
	loop loopWatch // a closed loop within MaxSize (see loopWatch)
	// holds: the level may run hold tests (the queue has one level and a
	// ClosedLoopSize above MaxSize). With priority levels it does not: a
	// lower level held beyond MaxSize would take the room of a higher one.
	holds bool
}

// growth tells, for adaptive LIFO, a standing queue that holds steady (a
// closed loop: clients that send their next request when the last one is
// answered, as wrk and most benchmarks do, or a load at capacity) from one
// that keeps growing (more arrives than is served: an open-loop overload).
// Dropping from a steady queue buys nothing: a dropped client sends again at
// once, so the queue stays as long and the refusals only cost CPU.
//
// Growth can be measured only while nothing is lost (a lost waiter's client
// may send again, which looks like an arrival), so a standing level watches
// before it drops: it drops nothing, serves the newest, and measures each
// interval (from halfway to standing: a level that had no arrival or serve
// then starts by dropping). A closed loop's queue grows while its clients
// come back from their refusals (or connect), then holds: the level is
// steady, served in order, and drops nothing. An open loop's queue grows
// until waiters are lost (the queue is full, or the oldest waited MaxWait),
// faster than twice what is served, or for 10 intervals: the level drops
// (CoDel), and watches again after 20 intervals, then 80, then every 160
// while each watch ends so (5 after it started dropping unwatched). A
// steady level that grows past where it held watches again, and returns to
// steady only as short as it held (unless a hold test found it a closed
// loop, whose size wanders): an open loop growing by fewer waiters an
// interval than a closed loop's jitter still grows from there. One that
// loses waiters drops, unless a hold test found it a closed loop (then
// only growth ends the hold: see measure).
type growth struct {
	state      growthState
	markAt     int64  // when the current interval began (Unix ns); 0: none
	markLen    int    // the level's length then
	markSize   int    // ... and its size (see size), when a premark or measure set the mark; 0: not known
	prevLen    int    // ... and at the mark before (see measure's watching)
	markLost   uint64 // lost then
	lost       uint64 // waiters dropped, timed out or refused for lack of room, ever
	held       int    // the smallest the level's loop was at a mark while steady (see size)
	served     uint64 // waiters served, ever
	markServed uint64 // served at the mark
	watched    int    // intervals watched in a row
	dropFor    int    // intervals to drop before the next watch
	dropEvery  int    // ... and the next time

	// The hold test (see holdTest).
	testing     bool   // a hold test runs
	testHalves  int    // ... has measured so many half intervals,
	testAt      int64  // the last at this time (Unix ns), where
	testLen     int    // the level was this long,
	testLost    uint64 // had lost so many
	testServed  uint64 // and served so many;
	testPeak    int    // and so much in its fastest half
	testSize    int    // the level's largest size (see level.size) at a half
	testRefused uint64 // waiters lost in the interval before the test, at the pace of a whole one
	testEarly   bool   // the test began at an overflow (see holdTestAtOverflow)
	testRef     int    // ... of a level whose loop stood this large, steady or watched: judged by size; 0: by growth
	closed      bool   // a hold test found a closed loop: the level may hold up to Config.ClosedLoopSize
	nextTest    int64  // no hold test before this (Unix ns)
	testEvery   int    // intervals between failed hold tests: 20, 80, then 160
	tests       uint64 // hold tests run, ever
	closedLoops uint64 // ... that found a closed loop
}

// growthState is what a standing level does.
type growthState uint8

const (
	dropping growthState = iota // serve the newest, drop the old (CoDel)
	watching                    // serve the newest, drop nothing, measure
	steady                      // serve in order, drop nothing
)

// maxWatch is how many intervals a watch lasts at most.
const maxWatch = 10

// premark starts watching a level that waits but does not stand yet, halfway
// to standing, inflight being the limiter's requests in flight. A level that
// held a closed loop before it drained holds it still when the loop is a
// quarter as large as what it held or more (see size; a loop's clients on
// their way back, as through a sidecar short of CPU, do not count, and were
// half of a 256-connection loop at times): a closed loop's queue drains
// whenever the limit rises above what waits, or its clients are slow to come
// back, and the next cut would otherwise send them into a queue of MaxSize
// (through the binary, the drained loop was refused until a hold test found it
// again: 2,800 refusals in a run at 1,024 connections). A smaller one is
// proven again. Called on arrivals and serves, with the queue's lock held.
func (lv *level[P]) premark(now, interval int64, inflight int) {
	g := &lv.growth
	if g.markAt > lv.drained || lv.length == 0 || now-lv.drained < interval/2 || now-lv.drained > interval {
		return
	}
	size := lv.size(inflight)
	if g.holdsLoop() && 4*size >= g.held {
		g.markAt, g.markLen, g.markSize, g.markLost, g.markServed = now, lv.length, size, g.lost, g.served
		return
	}
	g.watch(now, lv.length, 5)
	g.closed = false // a closed loop is proven again
	g.markSize = size
}

func (g *growth) watch(now int64, length, dropEvery int) {
	*g = growth{state: watching, markAt: now, markLen: length, prevLen: length, markLost: g.lost, lost: g.lost, dropEvery: dropEvery,
		served: g.served, markServed: g.served,
		closed: g.closed, nextTest: g.nextTest, testEvery: g.testEvery, tests: g.tests, closedLoops: g.closedLoops}
}

// A hold test tells a closed loop that the queue refuses from an open-loop
// overload when the level sheds much (more than it serves, in an
// interval): the clients of a closed loop send again as soon as they are
// refused, so refusing them only costs CPU (each refusal is followed by a
// new request at once) while their number stays the same, but no growth
// can show it (the queue is full, or CoDel keeps it short). During the test
// the level holds every arrival (up to Config.ClosedLoopSize, newest
// first, dropping nothing) and measures its growth every half interval: a
// closed loop's clients, held, stop sending, so the queue grows while they
// come back (by 16 or more in all) and then stops (a half in which it grew
// by half its fastest half or less), losing none; an open loop's
// arrivals do not depend on what the queue does, and it grows half after
// half. The test lasts one interval, and runs on, for 2 intervals at most,
// while the queue grew by fewer than the waiters lost in an interval at
// the pace of the one before the test: clients that come back slowly from
// their refusals (as from a sidecar short of CPU, which answers its
// refusals and reads them back at its own, steady, pace) may still be on
// their way back, while an open loop's queue grows by as many in about an
// interval. A closed loop makes the level steady, allowed ClosedLoopSize,
// until it loses waiters or drains; an open loop drops as before, and the
// next test waits 20 intervals, then 80, then 160. The cost of a test in an
// open-loop overload is about one interval of its arrivals held, then
// dropped.
const holdTestEvery = 20

// holdTestHalves is the most half intervals a hold test lasts. Longer
// tests found slower closed loops but cost open-loop floods (loadtest
// scenarios flash_crowd 26-53% of capacity served during the crowd with 3
// intervals against 66-84%, overload_10x p99 816 ms against 143 ms).
const holdTestHalves = 4

// holdTest starts a hold test if the interval that just closed shed more
// than it served, and none ran lately. Called as an interval closes.
func (g *growth) holdTest(now, interval int64, length int) bool {
	if g.closed || g.testing || now < g.nextTest || g.lost-g.markLost <= g.served-g.markServed+8 {
		return false
	}
	g.state, g.testing, g.watched = watching, true, 0
	// The interval's losses, at the pace of a whole interval (one closes
	// after half of one when the level just came to stand).
	g.testHalves, g.testPeak, g.testSize = 0, 0, 0
	g.testRefused = (g.lost - g.markLost) * uint64(interval) / uint64(max(now-g.markAt, interval/2))
	g.tests++
	g.markAt, g.markLen, g.markLost, g.markServed = now, length, g.lost, g.served
	g.testAt, g.testLen, g.testLost, g.testServed = now, length, g.lost, g.served
	return true
}

// holdTestAtOverflow starts a hold test when a level that came to wait
// since it last drained, and was not measured yet, finds no room: a closed
// loop larger than the queue (a benchmark's connections, all sending at
// once) is held from its first request instead of refused until an
// interval has shown the refusals. It runs as holdTest's, without an
// interval before it to run on for. If it finds no closed loop, the level
// drops and the next test may start as soon as an interval shows refusals:
// this test sets no backoff (tried with one: a closed loop whose limit was
// cut just after its queue drained failed it and was refused for the 2 s of
// the backoff, 20,000-54,000 refusals in 5 of 9 runs at 1,024 connections,
// while the flash crowd scenario did no better). A level already measured
// waits for holdTest: there a closed loop whose limit is being cut grows
// half after half, as an open loop does, and an early test would fail it
// (tried: 1,100-8,700 refusals in 7 of 8 runs at 1,024 connections, against
// none in 6 of 9 without). A measured level that overflows with its loop
// (size: waiters and requests in flight) no larger than where it stood (where
// it held steady, or its size at the mark of its watch) is a closed loop
// whose limit was cut, or whose last clients came back: the cut moved
// clients from running to waiting, past MaxSize. Its test is judged by size,
// which such a loop keeps however the limit moves (before, it waited for an
// interval of refusals: a loop of 300 whose limit fell from 200 to 40 was
// refused 15,000 times in 200 ms, and one watched from its start 6,000-8,000
// times). Called as an arrival finds no room.
func (g *growth) holdTestAtOverflow(now int64, length, size int, drained int64) bool {
	ref := 0 // where the loop stood
	switch {
	case g.state == steady:
		ref = g.held
	case g.state == watching:
		ref = g.markSize
	}
	if ref > 0 && !within(size, ref) {
		ref = 0 // grown: judged by growth, as a level not measured since it drained
	}
	if g.closed || g.testing || now < g.nextTest || g.markAt > drained && ref == 0 {
		return false
	}
	now = max(now, drained+1) // measured after the drain, on a clock that did not move
	g.state, g.testing, g.testEarly, g.testRef, g.watched = watching, true, true, ref, 0
	g.testHalves, g.testPeak, g.testSize, g.testRefused = 0, 0, 0, 0
	g.tests++
	g.markAt, g.markLen, g.markLost, g.markServed = now, length, g.lost, g.served
	g.testAt, g.testLen, g.testLost, g.testServed = now, length, g.lost, g.served
	return true
}

// holdTesting measures a hold test at each half interval and decides
// whether the level holds a closed loop, holds no closed loop, or needs
// another half to tell.
func (g *growth) holdTesting(now, interval int64, length, size int) {
	if now-g.testAt < interval/2 {
		return
	}
	grew, lost, served := length-g.testLen, g.lost-g.testLost, g.served-g.testServed
	g.testHalves++
	g.testPeak = max(g.testPeak, grew)
	g.testSize = max(g.testSize, size)
	g.testAt, g.testLen, g.testLost, g.testServed = now, length, g.lost, g.served
	if g.testHalves < 2 {
		return
	}
	lostNone := lost <= 1+served/64
	bySize := g.testRef > 0
	if bySize && !within(g.testSize, g.testRef) {
		// Grown past where it stood: clients still arriving (a loop
		// that begins while its first waiters are watched), not a
		// loop whose limit was cut. Judged by growth from here, as a
		// test at a level's first overflow is.
		bySize, g.testRef = false, 0
	}
	if bySize && lostNone ||
		!bySize && lostNone && length-g.markLen >= 16 && 2*grew <= g.testPeak {
		// Where it holds: the test's largest half (a closed loop's size
		// wanders), or where it stood before, if larger.
		g.testing, g.testEarly, g.held, g.testRef = false, false, max(g.testSize, g.testRef), 0
		g.closed, g.testEvery = true, 0 // a failed test after this one waits holdTestEvery again
		g.closedLoops++
		g.state, g.dropEvery = steady, 5
		g.markAt, g.markLen, g.markLost, g.markServed = now, length, g.lost, g.served
		return
	}
	if !bySize && lostNone && g.testHalves < holdTestHalves && grew > 0 &&
		(uint64(length-g.markLen) < g.testRefused || g.testEarly && grew <= g.testPeak) {
		// Not all who were refused came back yet, or a loop that began
		// at the overflow may still be arriving, no faster than it
		// did (1,024 connections that a client on one core opens over
		// 100-150 ms, two or three halves): another half tells.
		return
	}
	if !bySize && lostNone && !pastJitter(g.markLen, length) {
		// Held every arrival and lost none, yet no longer than when the
		// test began but for a loop's jitter: whatever comes, the slots
		// serve it (the limit rose under a loop, or its last clients
		// are on their way back). No overload to drop: watched again,
		// as a level that just came to stand. (Dropped, a closed loop
		// of 125 over a limit that rose from 20 to 60 before 5 ms slots
		// lost a fifth of its requests to CoDel for good: its drops read
		// as an open loop's losses at every watch, and were too few to
		// test it again.) A watch ends the test: it keeps none of it.
		g.watch(now, length, max(g.dropEvery, 5))
		return
	}
	g.testing, g.testRef = false, 0
	if g.testEarly {
		g.testEarly = false // no backoff: the next test has an interval's refusals to go by
	} else {
		g.testEvery = min(4*max(g.testEvery, holdTestEvery/4), 160)
		g.nextTest = now + int64(g.testEvery)*interval
	}
	g.dropEvery = max(g.dropEvery, 5)
	g.drop(now, length)
}

// size is the level's loop: its waiters, and for a level that holds (the
// queue's only one) the limiter's requests in flight (Config.InFlight). A
// closed loop's clients are in one or the other (or on their way back), so
// a limit cut that moves some from running to waiting leaves it as large:
// measured on the waiters alone, the cut looked like growth and ended the
// hold (through the binary, a Go client's 256 connections before an
// instant service: held and dropped 4 times in its first second, 7,760
// waiters dropped, 5,062 refused).
func (lv *level[P]) size(inflight int) int {
	if lv.holds {
		return lv.length + inflight
	}
	return lv.length
}

// measure closes the level's interval when one has passed and decides what
// the standing level does next (see growth), inflight being the limiter's
// requests in flight. Called on every serve of a standing level, with the
// queue's lock held.
func (lv *level[P]) measure(now, interval int64, inflight int) {
	g := &lv.growth
	size := lv.size(inflight)
	if g.markAt <= lv.drained || now-max(g.markAt, g.testAt) > 4*interval {
		// Nothing measured since the level came to stand (no arrival or
		// serve in the half interval before), or no serve for long: drop,
		// and watch in 5 intervals.
		g.dropEvery = 5
		g.drop(now, lv.length)
		return
	}
	if g.testing {
		g.holdTesting(now, interval, lv.length, size)
		return
	}
	// A waiter or two lost in an interval (one timed out at the back of a
	// long steady queue) is no open-loop overload; more than a sixty-fourth
	// of those served, and two, is.
	lostNow := g.lost-g.markLost > 1+(g.served-g.markServed)/64
	// A closed loop held (a hold test found it) that loses waiters
	// without growing is one too long for MaxWait at the pace it is
	// served: its clients whose wait ran out send again at once, so the
	// length holds. Dropping it (newest first, the old at Target) would
	// answer every waiter over a few ms with a 503 instead of the few
	// past MaxWait, and each 503 comes straight back: 5,500 shed in 2 s
	// through the binary at 1,024 connections. Only growth ends its hold.
	if g.state == steady && (lostNow && !g.closed || g.grownPast(size)) {
		// Lost waiters, or grew past where it held: not steady after all.
		if lostNow {
			g.drop(now, lv.length)
		} else {
			held := g.held
			g.watch(now, lv.length, g.dropEvery)
			g.held = held // a watch from steady returns to it only as short (see measure's watching)
		}
		return
	}
	if now-g.markAt < interval/2 || now-g.markAt < interval && g.markAt-lv.drained > interval {
		return // a premark measures the half interval before standing; others a whole one
	}
	if lv.holds && g.holdTest(now, interval, lv.length) {
		return
	}
	grew := pastJitter(g.markLen, lv.length)
	switch g.state {
	case watching:
		g.watched++
		switch {
		case lostNow || g.watched >= maxWatch || lv.length-g.markLen > 8+2*int(g.served-g.markServed):
			// Waiters lost, no end in sight, or growing faster than twice
			// what is served (a closed loop grows that fast only while
			// its clients connect): an open-loop overload.
			g.dropEvery = min(4*g.dropEvery, 160)
			g.drop(now, lv.length)
			return
		case !grew && (g.held == 0 || !g.grownPast(size)) && (g.closed || g.watched >= 2 && !pastJitter(g.prevLen, lv.length)):
			// Held steady, over this interval and (unless a hold test
			// found a closed loop, whose size wanders) over the two
			// last: an open loop at 2x a 5-slot service grows 10 an
			// interval, within one interval's jitter once 16 wait, and
			// held in order it served its oldest at 300-430 ms (p99
			// 537-585 ms against 154) until they timed out. Its growth
			// adds up over two; a closed loop's jitter does not. And
			// (when the watch began from steady) no longer than where
			// it held then: a slow-growing open loop (2x a 5-slot
			// service, its queue growing 6 an interval)
			// grows less in each interval than a closed loop's jitter,
			// but not from where it held; let back into order each
			// time, it served its oldest at MaxWait (p99 520-550 ms
			// against 154). A held closed loop, too, returns to steady
			// only back within where it held: one past it goes on
			// being watched, and is dropped after maxWatch intervals
			// (an open loop at 1.05x whose start a hold test misread
			// grew 5 an interval, each watch went back to steady the
			// next, and its waiters were served in order at 350 ms).
			g.state, g.held, g.dropEvery = steady, size, 5
		}
	case steady:
		// A steady level holds at the smallest it was. A held closed
		// loop keeps where its test found it instead: its size wanders
		// with its clients on their way back (a Go client's 256
		// connections through a busy sidecar: 60-256 at times), so the
		// test's largest half is its measure. Following it up, even only
		// while nothing was lost, held a slow-growing open loop found
		// closed by chance (2x) in order until its waiters waited
		// MaxWait: p99 562 ms against 154.
		if !g.closed {
			g.held = min(g.held, size)
		}
	case dropping:
		if g.dropFor--; g.dropFor <= 0 {
			g.watch(now, lv.length, g.dropEvery)
			return
		}
	}
	g.prevLen = g.markLen
	g.markAt, g.markLen, g.markSize, g.markLost, g.markServed = now, lv.length, size, g.lost, g.served
}

// holdsLoop reports whether the level holds a closed loop that a hold
// test found, served in order.
func (g *growth) holdsLoop() bool { return g.closed && g.state == steady }

// pastJitter reports whether a level grew from length from to length to by
// more than a closed loop's jitter (8, and an eighth).
func pastJitter(from, to int) bool { return to-from > 8+from/8 }

// grownPast reports whether a level of size has grown past where it held
// steady (held), by more than a closed loop's jitter.
func (g *growth) grownPast(size int) bool { return !within(size, g.held) }

// within reports whether a loop of size is no larger than one of ref, but
// for a closed loop's jitter (a quarter, and 8).
func within(size, ref int) bool { return size <= ref+8+ref/4 }

// drop makes the level drop for dropEvery intervals from now. A level that
// drops holds no closed loop.
func (g *growth) drop(now int64, length int) {
	g.state, g.dropFor, g.watched, g.closed = dropping, g.dropEvery, 0, false
	g.markAt, g.markLen, g.markLost, g.markServed = now, length, g.lost, g.served
}

func newLevel[P any](fair bool) level[P] {
	n := 1
	if fair {
		n = fairBuckets
	}
	return level[P]{buckets: make([]deque[P], n), trimmed: make([]int64, n), arrivals: make([]uint32, n),
		served: make([]uint32, n), owner: make([]uint64, n)}
}

// arrive notes a waiter of tenant joining bucket b at now, first halving
// the counts once per interval (ns) that passed since they last were.
func (lv *level[P]) arrive(b int, tenant uint64, now, interval int64) {
	if len(lv.buckets) == 1 {
		return
	}
	if lv.arrivedAt == 0 || interval <= 0 {
		lv.arrivedAt = now
	}
	for halvings := 0; now-lv.arrivedAt >= interval; halvings++ {
		if halvings == 32 { // all counts are zero by now
			clear(lv.arrivals)
			clear(lv.served)
			lv.arrivedAt = now
			break
		}
		for i := range lv.arrivals {
			lv.arrivals[i] >>= 1
			lv.served[i] >>= 1
		}
		lv.arrivedAt += interval
	}
	if lv.arrivals[b] < 1<<31 {
		lv.arrivals[b]++
	}
	lv.owner[b] = tenant
}

// serve notes a waiter of bucket b handed a slot.
func (lv *level[P]) serve(b int) {
	lv.growth.served++
	if len(lv.buckets) > 1 && lv.served[b] < 1<<31 {
		lv.served[b]++
	}
}

// backlogged reports whether bucket b receives clearly more than it is
// served: a quarter more, and a few, than its turns gave it lately.
func (lv *level[P]) backlogged(b int) bool {
	return lv.arrivals[b] > lv.served[b]+lv.served[b]/4+4
}

// bucketFor returns the bucket a waiter of tenant joins, of the handSize
// its key hashes to: the one the tenant's last waiter joined, if no other
// tenant's joined it since (a tenant keeps to one bucket, one turn per
// round); else among those with no clearly more recent arrivals than the
// least (a flood's buckets keep many even when short for a moment), one
// CoDel has not trimmed within recent (Unix ns) if any (a flood's bucket
// is trimmed all the time, and may look short just after), then the
// shortest, then the first.
func (lv *level[P]) bucketFor(tenant uint64, recent int64) int {
	if len(lv.buckets) == 1 {
		return 0
	}
	var hand [handSize]int
	h := mix(tenant)
	least := uint32(1<<32 - 1)
	for i := range hand {
		hand[i] = int((h >> (21 * i)) % fairBuckets) // 21 bits apart: independent
		least = min(least, lv.arrivals[hand[i]])
	}
	for _, b := range hand {
		if lv.owner[b] == tenant && lv.arrivals[b] > 0 {
			return b
		}
	}
	best := -1
	for _, b := range hand {
		if lv.arrivals[b] > 2*least+4 {
			continue // a flood's
		}
		if best < 0 {
			best = b
			continue
		}
		fatB, fatBest := lv.trimmed[b] > recent, lv.trimmed[best] > recent
		if fatB != fatBest {
			if fatBest {
				best = b
			}
			continue
		}
		if len(lv.buckets[b].items) < len(lv.buckets[best].items) {
			best = b
		}
	}
	return best
}

// mix spreads a tenant key over 64 bits (SplitMix64's finalizer), so that
// keys that differ in few bits land in unrelated buckets.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func (lv *level[P]) pushBack(w *waiter[P]) {
	lv.buckets[w.bucket].pushBack(w)
	lv.busy |= 1 << uint(w.bucket)
	lv.length++
}

// putBack returns a waiter that take gave but could not be served to where
// it was, and makes its bucket the next to serve.
func (lv *level[P]) putBack(w *waiter[P]) {
	d := &lv.buckets[w.bucket]
	if w.back {
		d.pushBack(w)
	} else {
		d.pushFront(w)
	}
	lv.busy |= 1 << uint(w.bucket)
	lv.next = w.bucket
	lv.length++
}

// turn returns the bucket to serve next: the first non-empty one from next
// on, round robin; -1 when the level is empty.
func (lv *level[P]) turn() int {
	if lv.busy == 0 {
		return -1
	}
	n := len(lv.buckets)
	if n == 1 {
		return 0
	}
	rot := bits.RotateLeft64(lv.busy, -lv.next)
	return (lv.next + bits.TrailingZeros64(rot)) % n
}

// take removes the waiter to serve, from the back of its bucket when
// lifo, and passes the turn to the next bucket.
func (lv *level[P]) take(lifo bool) *waiter[P] {
	b := lv.turn()
	if b < 0 {
		return nil
	}
	d := &lv.buckets[b]
	var w *waiter[P]
	if lifo {
		w = d.popBack()
	} else {
		w = d.popFront()
	}
	w.back = lifo
	lv.emptied(b)
	lv.next = (b + 1) % len(lv.buckets)
	lv.length--
	return w
}

// dropOlder removes, from the front of every bucket, the waiters enqueued
// before cutoff, calling drop for each. Under fairness only the fat
// buckets are trimmed, those at least half as long as the longest that
// receive more than their turns serve, each down to its newest waiter
// (CoDel on the fattest flows, as FQ-CoDel drops): a tenant that sends
// less than its turn serves waits for its turn, which comes after every
// other busy bucket's, instead of being dropped for the flood's queue.
// Every bucket keeps its newest waiter, however long it waited: the drop
// comes as a slot frees, and a slot left idle until the next arrival
// serves nobody (one slot of 200 ms at twice its capacity, arrivals 100
// ms apart on average: busy 80% of the time when the newest was dropped
// too). A waiter still queued is within its MaxWait, and its client has
// not left.
func (lv *level[P]) dropOlder(now, cutoff int64, drop func(*waiter[P])) {
	if lv.busy == 0 {
		return
	}
	fat, keep := 0, 1
	if len(lv.buckets) > 1 {
		fat = (len(lv.buckets[lv.longest()].items) + 1) / 2
	}
	for busy := lv.busy; busy != 0; busy &= busy - 1 {
		b := bits.TrailingZeros64(busy)
		d := &lv.buckets[b]
		if len(d.items) < fat || fat > 0 && !lv.backlogged(b) {
			continue
		}
		for len(d.items) > keep {
			w := d.front()
			if w.enqueued >= cutoff {
				break
			}
			d.popFront()
			lv.length--
			lv.trimmed[b] = now
			drop(w)
		}
		lv.emptied(b)
	}
}

// evictNewest removes the newest waiter of the longest bucket (the tenant
// that sends most, under fairness) if that bucket holds at least atLeast
// (at least one), else returns nil.
func (lv *level[P]) evictNewest(atLeast int) *waiter[P] {
	b := lv.longest()
	if b < 0 || len(lv.buckets[b].items) < max(atLeast, 1) {
		return nil
	}
	w := lv.buckets[b].popBack()
	lv.emptied(b)
	lv.length--
	return w
}

// longest returns the bucket with most waiters, -1 when the level is empty.
func (lv *level[P]) longest() int {
	best, most := -1, 0
	for busy := lv.busy; busy != 0; busy &= busy - 1 {
		b := bits.TrailingZeros64(busy)
		if n := len(lv.buckets[b].items); n > most {
			best, most = b, n
		}
	}
	return best
}

func (lv *level[P]) remove(w *waiter[P]) bool {
	if !lv.buckets[w.bucket].remove(w) {
		return false
	}
	lv.emptied(w.bucket)
	lv.length--
	return true
}

func (lv *level[P]) emptied(b int) {
	if len(lv.buckets[b].items) == 0 {
		lv.busy &^= 1 << uint(b)
	}
}
