// Package queue holds sluice's bounded wait queue: requests that find no
// room at a limiter wait here, briefly, for a slot, instead of being refused
// at once.
//
// Design. The queue sits in front of any limiter that can be asked for a
// slot without blocking (TryAcquire) and that tells the queue when a slot
// frees (Notify). A freed slot is handed to one waiter directly, under the
// queue's lock, so that no wake-up is lost and no herd is woken. A waiter
// counts itself before it makes its last try, so a release that races with
// its arrival either sees it waiting or leaves it a free slot. A waiter that
// gives up (deadline, cancelled context) and was handed a slot meanwhile
// gives the slot back.
//
// Orders: FIFO; LIFO; and adaptive LIFO, as in "Fail at Scale": first in,
// first out while the queue keeps draining, but once a priority level
// stands (it has not drained for Interval), last in, first out, and its
// waiters older than Target are dropped (CoDel), so that the queue serves
// requests whose clients are still waiting. A level drains when a slot
// frees with nobody waiting, or when serving empties it, and no waiter of
// it was dropped or timed out for Interval; a level emptied by drops,
// timeouts or cancellations has not drained (demand still exceeds the
// limit), so a standing level stays standing under sustained overload
// instead of falling back to FIFO, and to long waits, every time CoDel
// empties it. A hold test (see growth) serves the newest first from its
// start, also before its level stands. Levels stand apart: a high class
// served promptly while a lower one floods keeps FIFO order and is not
// dropped. A pause of the service (no slot freed for far longer than slots
// free while it serves: see paused) is no overload: its arrivals are held,
// nothing is dropped, and the backlog it leaves is served in order.
//
// Priorities and fairness. Levels are served highest first, except that a
// level under its guaranteed share (Config.Guaranteed) comes before those
// over theirs; a newcomer joins the waiters rather than take a free slot
// ahead of them. Within a level, with Config.Fair, tenants are served in
// turn from shuffle-sharded buckets (see level).
package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Order is how waiters are served.
type Order uint8

// The orders.
const (
	FIFO Order = iota
	LIFO
	AdaptiveLIFO
)

// orderNames are the configuration names of the orders, by Order.
var orderNames = [...]string{FIFO: "fifo", LIFO: "lifo", AdaptiveLIFO: "adaptive_lifo"}

// OrderNames returns the configuration names of the orders.
func OrderNames() []string { return append([]string(nil), orderNames[:]...) }

// ParseOrder returns the Order named s ("fifo", "lifo", "adaptive_lifo").
func ParseOrder(s string) (Order, error) {
	for i, n := range orderNames {
		if n == s {
			return Order(i), nil
		}
	}
	return FIFO, fmt.Errorf("unknown queue order %q (want fifo, lifo or adaptive_lifo)", s)
}

// String returns the configuration name of o.
func (o Order) String() string {
	if int(o) < len(orderNames) {
		return orderNames[o]
	}
	return "unknown"
}

// Config configures a Queue. Zero fields take the documented defaults.
type Config struct {
	// MaxSize is the most requests waiting at once; default 100. Zero after
	// SetDefaults is impossible; a negative value disables queueing.
	MaxSize int
	// ClosedLoopSize is the most requests waiting at once while the queue
	// holds a closed loop (with AdaptiveLIFO and one priority level:
	// clients that send their next request only once answered, so that
	// refusing them only costs CPU; see growth): default 4096; at most
	// MaxSize (or negative) turns it off. With several priority levels the
	// queue holds MaxSize (a lower level held beyond it would take the room
	// of a higher one).
	ClosedLoopSize int
	// MaxWait is the longest a request waits; default 500 ms.
	MaxWait time.Duration
	// ClosedLoopMaxWait is the longest a request waits while its level
	// holds a closed loop that a hold test found (served in order, nothing
	// dropped: see growth): its client sends again as soon as it is
	// refused, so a refusal at MaxWait frees no room and only costs the
	// client an error and the sidecar a request. It still bounds the wait:
	// a loop served in order whose wait outlasts its clients' patience
	// would serve each request just after its client gave up (a Go client
	// of 2,048 connections with a 1 s timeout before 8 slots of 5 ms, a
	// wait of 1.3 s: 960-1,110 good a second held up to 5 s against 1,343
	// timed out at 500 ms), so the default, 1 s, stays under the timeouts
	// of common clients (wrk's 2 s), and a client seen leaving past MaxWait
	// turns it off for a while (see heldLonger). Below MaxWait (or
	// negative) it is MaxWait.
	ClosedLoopMaxWait time.Duration
	// Order is the serving order; default FIFO.
	Order Order
	// Priorities is the number of priority levels, 0 the highest; default 1.
	Priorities int
	// Guaranteed, when set, reports whether priority prio is below its
	// guaranteed share of the limiter (adaptive.Partitioned.UnderShare): a
	// freed slot goes first to the highest such level that waits, so that a
	// class gets its share back from borrowers as their requests end.
	Guaranteed func(prio int) bool
	// Fair makes each level fair among tenants (AcquireAs's tenant): its
	// waiters are served from 64 shuffle-sharded buckets in turn, and when
	// the queue is full a newcomer pushes out the newest waiter of the
	// longest bucket of its level. Without it a level is one bucket.
	Fair bool
	// Target and Interval drive adaptive LIFO's CoDel: once the queue has not
	// been empty for Interval (default 100 ms), waiters older than Target
	// (default 5 ms) are dropped.
	Target, Interval time.Duration
	// RTT, when set, reports the limiter's recent round trip
	// (adaptive.Limiter.RTT; 0: none yet): until the queue has timed
	// enough gaps between slots freeing, a silence of several round trips
	// while requests wait is a pause of the service, and while it reports
	// none and no slot has freed for a waiter, a silence of 50 ms (the
	// first requests are still out; see paused). It is called with the
	// queue's lock held and must not block.
	RTT func() time.Duration
	// InFlight, when set, reports the limiter's requests in flight
	// (adaptive.Limiter.InFlight): with one priority level, the queue
	// judges a closed loop's growth by its waiters and these together, so
	// that a limit cut is not read as new clients. It is called with the
	// queue's lock held and must not block.
	InFlight func() int
	// Clock reads the time; default the system clock. Waiting itself uses
	// timers (testing/synctest fakes them).
	Clock sluice.Clock
}

// SetDefaults fills the zero fields of c.
func (c *Config) SetDefaults() {
	if c.MaxSize == 0 {
		c.MaxSize = 100
	}
	if c.ClosedLoopSize == 0 {
		c.ClosedLoopSize = 4096
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 500 * time.Millisecond
	}
	if c.ClosedLoopMaxWait == 0 {
		c.ClosedLoopMaxWait = time.Second
	}
	c.ClosedLoopMaxWait = max(c.ClosedLoopMaxWait, c.MaxWait)
	if c.Priorities <= 0 {
		c.Priorities = 1
	}
	if c.Target <= 0 {
		c.Target = 5 * time.Millisecond
	}
	if c.Interval <= 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.Clock == nil {
		c.Clock = sluice.NewSystemClock()
	}
}

// Errors a waiter can get. A context error is returned as is.
var (
	// ErrFull: the queue had no room.
	ErrFull = errors.New("queue: full")
	// ErrTimeout: the request waited MaxWait, or was dropped by CoDel as
	// too old to be worth serving.
	ErrTimeout = errors.New("queue: wait timed out")
)

// Queue is a bounded wait queue handing out what acquire gives (a permit).
// It is safe for concurrent use.
type Queue[P any] struct {
	cfg     Config
	acquire func(prio int) (P, bool)
	release func(P) // gives back a slot a departed waiter was handed

	waiting     atomic.Int64 // waiters, counted before their last try
	mu          sync.Mutex
	levels      []level[P]
	length      int
	idle        atomic.Bool // a slot freed with nobody waiting since the queue last had waiters
	closedLoop  atomic.Bool // a level holds a closed loop (noteClosed)
	waitingLoop atomic.Bool // a level holds one within MaxSize (noteClosed)

	enqueued, served, timeouts, full, dropped, cancelled atomic.Uint64
	waitHist                                             histogram

	// A pause of the service (see paused), guarded by mu: waitingSince is
	// when the queue last went from empty to waiting, lastRelease when a
	// slot last freed while waiters waited, releaseGap an average of the
	// gaps between such releases (ns) over the gaps measured, and pausedAt
	// when the current pause was first seen (0: none), pauseEnded when the
	// last one ended; afterPause: the queue still holds what a pause left
	// (see enqueue).
	waitingSince, lastRelease, releaseGap, pausedAt, pauseEnded int64
	gaps                                                        int // gaps measured, up to minGaps
	afterPause                                                  bool
	pauses                                                      atomic.Uint64
}

// New returns a Queue in front of a limiter: acquire asks it for a slot
// without blocking; release gives back a slot that was handed to a waiter
// who had already left. Call Notify whenever a slot frees.
func New[P any](cfg Config, acquire func() (P, bool), release func(P)) *Queue[P] {
	return NewPrioritized(cfg, func(int) (P, bool) { return acquire() }, release)
}

// NewPrioritized is New for a limiter that admits by priority (as
// adaptive.Partitioned does by class): acquire asks it for a slot for a
// request of priority prio. When a slot frees, the queue offers it to the
// highest level whose next waiter the limiter admits, so that a lower
// class with an unused guarantee is served while a higher one that has
// used its share and may not borrow waits.
func NewPrioritized[P any](cfg Config, acquire func(prio int) (P, bool), release func(P)) *Queue[P] {
	cfg.SetDefaults()
	q := &Queue[P]{cfg: cfg, acquire: acquire, release: release, levels: make([]level[P], cfg.Priorities)}
	now := sluice.UnixNano(cfg.Clock)
	for i := range q.levels {
		q.levels[i] = newLevel[P](cfg.Fair)
		q.levels[i].holds = cfg.Priorities == 1 && cfg.ClosedLoopSize > cfg.MaxSize
		q.levels[i].drained = now
	}
	q.idle.Store(true) // nobody has waited yet: the first waiters find a drained queue
	return q
}

// waiter is one request in the queue.
type waiter[P any] struct {
	ready    chan struct{} // closed when handed a permit or dropped
	permit   P
	ok       bool // handed a permit
	dropped  bool // dropped by CoDel
	evicted  bool // pushed out by a higher priority when full
	back     bool // taken from the back of its bucket (to put it back there)
	enqueued int64
	prio     int
	bucket   int  // within its level
	gone     bool // left the queue
}

// Acquire returns a permit, at once if the limiter has room, else after
// waiting in the queue at priority prio (0 highest) until a slot is handed
// over, MaxWait passes (ErrTimeout), the queue is full (ErrFull), or ctx
// ends (its error).
func (q *Queue[P]) Acquire(ctx context.Context, prio int) (P, error) {
	return q.AcquireAs(ctx, prio, 0)
}

// TryAcquire returns a permit if the limiter has room now and nobody
// waits, as Acquire's first step, without waiting (false: Acquire would
// wait or refuse).
func (q *Queue[P]) TryAcquire(prio int) (P, bool) {
	return q.tryFirst(min(max(prio, 0), len(q.levels)-1))
}

// tryFirst is a newcomer's try for a slot ahead of the queue: only when
// nobody waits. A slot freed while others wait is theirs, handed over by
// the release's Notify (or by a newcomer's enqueue, in the queue's order);
// a newcomer that took it first, between the release and its Notify,
// stepped ahead of every waiter, and a flood's newcomers, many times the
// others' arrivals, took so many that fairness failed (one flood and three
// quiet tenants at 4.6x a service's capacity: the flood served 218 a
// second against a fair 125, and 3-6% of a quiet tenant's requests timed
// out in the queue, in most runs under the race detector).
func (q *Queue[P]) tryFirst(prio int) (P, bool) {
	if q.waiting.Load() > 0 {
		var zero P
		return zero, false
	}
	return q.acquire(prio)
}

// AcquireAs is Acquire for a request of a tenant (a hash of its user,
// address or key): with Config.Fair, tenants that wait at the same
// priority are served in turn.
func (q *Queue[P]) AcquireAs(ctx context.Context, prio int, tenant uint64) (P, error) {
	prio = min(max(prio, 0), len(q.levels)-1)
	if p, ok := q.tryFirst(prio); ok {
		return p, nil
	}
	var zero P
	if q.cfg.MaxSize < 0 {
		q.full.Add(1)
		return zero, ErrFull
	}
	w, p, err := q.enqueue(prio, tenant)
	if w == nil {
		return p, err
	}
	return q.await(ctx, w)
}

// enqueue puts a waiter of class prio and tenant in the queue, after a
// last try for a slot: it returns the waiter, or no waiter and the slot of
// that last try, or no waiter and ErrFull.
func (q *Queue[P]) enqueue(prio int, tenant uint64) (*waiter[P], P, error) {
	var zero P
	q.waiting.Add(1)
	q.mu.Lock()
	defer q.mu.Unlock()
	// The last try, now that a releaser will see this waiter, unless others
	// wait: then the newcomer takes its place among them and the queue's
	// order decides (the slot may be a higher class's, or an earlier
	// waiter's).
	if q.length == 0 {
		if p, ok := q.acquire(prio); ok {
			q.waiting.Add(-1)
			return nil, p, nil
		}
	}
	now := sluice.UnixNano(q.cfg.Clock)
	if q.length == 0 && q.idle.Load() {
		// A slot went unused since the queue last had waiters: it drained,
		// unless waiters were shed lately (then CoDel emptied it and the
		// demand still exceeds the limit).
		q.idle.Store(false)
		for i := range q.levels {
			if lv := &q.levels[i]; now-lv.shed > int64(q.cfg.Interval) {
				lv.drained = now
			}
		}
	}
	if q.length == 0 {
		// Nobody waits: a pause whose waiters all left (past MaxWait) is
		// over too, or it would outlive them into the next overload.
		q.waitingSince, q.pausedAt, q.afterPause = now, 0, false
	}
	lv := &q.levels[prio]
	bucket := lv.bucketFor(tenant, now-int64(q.cfg.Interval))
	lv.arrive(bucket, tenant, now, int64(q.cfg.Interval))
	if q.afterPause && (q.length < q.cfg.MaxSize || lv.state == dropping && now-lv.drained > int64(q.cfg.Interval)) {
		q.afterPause = false // drained below MaxSize, or found an overload after all
	}
	// Nothing ends in the service, or it serves what a pause left: the
	// queue holds the arrivals (each within MaxWait) up to ClosedLoopSize
	// instead of refusing what it would serve once the pause ends.
	over := q.length >= q.room(lv) && !(q.length < q.cfg.ClosedLoopSize && (q.afterPause || q.paused(now)))
	if over && lv.holds && q.cfg.Order == AdaptiveLIFO {
		lv.growth.holdTestAtOverflow(now, lv.length, lv.size(q.inflight()), lv.drained) // a test holds up to ClosedLoopSize
	}
	if over && q.length >= max(q.room(lv), q.drainRoom(lv)) && !q.evictBelow(prio) && !q.evictFlooder(prio, bucket) {
		lv.lost++
		q.waiting.Add(-1)
		q.full.Add(1)
		return nil, zero, ErrFull
	}
	w := &waiter[P]{ready: make(chan struct{}), enqueued: now, prio: prio, bucket: bucket}
	lv.pushBack(w)
	if q.cfg.Order == AdaptiveLIFO && q.pausedAt == 0 { // a pause is not measured: see serveLevel
		inflight := q.inflight()
		lv.premark(now, int64(q.cfg.Interval), inflight)
		lv.noteLoop(now, int64(q.cfg.Interval), inflight)
		q.noteClosed(lv)
	}
	q.length++
	q.enqueued.Add(1)
	if q.length > 1 {
		// Others wait: serve whoever the order says while slots are free
		// (the newcomer itself, if it is next).
		for q.length > 0 && q.serveOne(now) {
		}
	}
	return w, zero, nil
}

// await waits until w is handed a slot, MaxWait passes or ctx ends, then
// takes w out of the queue and counts how it left; a slot handed to it as
// it gave up goes to the next waiter.
func (q *Queue[P]) await(ctx context.Context, w *waiter[P]) (P, error) {
	var zero P
	timer := time.NewTimer(q.cfg.MaxWait)
	defer timer.Stop()
	var err error
	for waiting := true; waiting; {
		select {
		case <-w.ready:
			waiting = false
		case <-timer.C:
			more := q.heldLonger(w)
			select {
			case <-w.ready: // handed a slot (or dropped) as its time ran out
				waiting = false
				continue
			default:
			}
			if more > 0 {
				timer.Reset(more)
				continue
			}
			err, waiting = ErrTimeout, false
		case <-ctx.Done():
			err, waiting = ctx.Err(), false
		}
	}
	q.mu.Lock()
	if !w.gone {
		q.remove(w)
	}
	if err == ErrTimeout || errors.Is(err, context.DeadlineExceeded) {
		// Out of time, its own (MaxWait) or its client's (a deadline):
		// lost to the queue alike. (A hold test that did not count
		// deadlines would read waiters leaving at theirs as a closed
		// loop that stopped growing, and hold an open-loop overload.)
		q.levels[w.prio].shed = sluice.UnixNano(q.cfg.Clock)
		q.levels[w.prio].lost++
	}
	if now := sluice.UnixNano(q.cfg.Clock); err != nil && err != ErrTimeout && now-w.enqueued > int64(q.cfg.MaxWait) {
		q.levels[w.prio].impatient = now // its client gave up past MaxWait
	}
	handed, dropped, evicted := w.ok, w.dropped, w.evicted
	q.mu.Unlock()
	q.waiting.Add(-1)
	q.waitHist.observe(time.Duration(sluice.UnixNano(q.cfg.Clock) - w.enqueued))
	switch {
	case handed && err == nil:
		q.served.Add(1)
		return w.permit, nil
	case handed:
		// Handed a slot just as it gave up: give it back to the next waiter.
		q.release(w.permit)
	case evicted:
		q.full.Add(1)
		return zero, ErrFull
	case dropped:
		q.dropped.Add(1)
		return zero, ErrTimeout
	}
	if errors.Is(err, ErrTimeout) {
		q.timeouts.Add(1)
	} else {
		q.cancelled.Add(1)
	}
	return zero, err
}

// impatientFor is how long, after a client left its waiter past MaxWait,
// a held closed loop's waiters time out at MaxWait again.
const impatientFor = 10 * time.Second

// heldLonger is how much longer w may wait past MaxWait: while its level
// holds a closed loop in order (a hold test found it), up to
// ClosedLoopMaxWait in all, checked again each Interval so that a hold that
// ends times out those past MaxWait within one; 0 when w's time is up (or
// it already left the queue). Not for impatientFor after a client gave up
// on a waiter past MaxWait: clients whose timeout is shorter than the
// loop's wait, served in order, would each be served just after they left
// (a Go client of 2,048 connections with a 1 s timeout before 8 slots of
// 5 ms, a wait of 1.3 s: 1,119 good a second held to 1 s against 1,367
// timed out at MaxWait); timed out at MaxWait, they send again and are
// served in time.
func (q *Queue[P]) heldLonger(w *waiter[P]) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	lv := &q.levels[w.prio]
	now := sluice.UnixNano(q.cfg.Clock)
	if w.gone || !lv.holdsLoop() || lv.impatient != 0 && now-lv.impatient < int64(impatientFor) {
		return 0
	}
	left := time.Duration(w.enqueued + int64(q.cfg.ClosedLoopMaxWait) - now)
	if left <= 0 {
		return 0
	}
	return min(left, q.cfg.Interval)
}

// evictBelow makes room for a waiter of priority prio by dropping the newest
// waiter of the lowest priority below it. Called with q.mu held.
func (q *Queue[P]) evictBelow(prio int) bool {
	for lv := len(q.levels) - 1; lv > prio; lv-- {
		if w := q.levels[lv].evictNewest(1); w != nil {
			q.evict(w)
			return true
		}
	}
	return false
}

// evictFlooder, under fairness, makes room for a waiter joining bucket of
// level prio by pushing out the newest waiter of the level's longest
// bucket, when that one holds at least two more: a tenant that fills the
// queue loses its own place, not the others theirs. Called with q.mu held.
func (q *Queue[P]) evictFlooder(prio, bucket int) bool {
	if !q.cfg.Fair {
		return false
	}
	lv := &q.levels[prio]
	w := lv.evictNewest(len(lv.buckets[bucket].items) + 2)
	if w == nil {
		return false
	}
	q.evict(w)
	return true
}

func (q *Queue[P]) evict(w *waiter[P]) {
	q.levels[w.prio].lost++
	q.length--
	w.gone, w.evicted = true, true
	close(w.ready)
}

// room returns how many may wait in the queue when a request of level lv
// comes: MaxSize, or ClosedLoopSize while lv holds a closed loop or tests
// for one (only a level that holds runs the tests, see growth). Called
// with q.mu held.
func (q *Queue[P]) room(lv *level[P]) int {
	if lv.closed || lv.testing {
		return q.cfg.ClosedLoopSize
	}
	return q.cfg.MaxSize
}

// drainRoom returns how many may wait in a level that holds (see
// level.holds), in adaptive LIFO, when room is full: as many as the
// service drains in drainTargets CoDel targets at its pace now, at most
// ClosedLoopSize (0 where it does not apply; the caller takes the larger
// of it and room). The pace is Little's: the limiter's requests in flight
// over its round trip (Config.InFlight, Config.RTT). Called with q.mu
// held.
func (q *Queue[P]) drainRoom(lv *level[P]) int {
	if !lv.holds || q.cfg.Order != AdaptiveLIFO || q.cfg.RTT == nil {
		return 0
	}
	rtt := int64(q.cfg.RTT())
	if rtt <= 0 {
		return 0
	}
	// Multiplied before dividing: a round trip of 7 ms would otherwise
	// truncate 20 ms / 7 ms to 2 waiters a request in flight.
	return int(min(drainTargets*int64(q.cfg.Target)*int64(q.inflight())/rtt, int64(q.cfg.ClosedLoopSize)))
}

// drainTargets is how many CoDel targets of waiting the queue holds, past
// MaxSize, before a fast service (see room). A service that answers 20,000
// requests a second drains 100 waiters in 5 ms: refusing the 101st then
// costs its client a round trip and the sidecar's CPU to spare it a few
// milliseconds. A closed loop (a benchmark's 256 connections through a
// limit cut to 83, or to 2 at its start) spills past 100 at once: a Go
// client's loop was refused 552 and 1,133 times so in two runs polled
// through the binary, while no hold test ran. An open-loop overload of
// such a service waits no longer for it: CoDel keeps its waiters at
// Target once it drops, and a waiter admitted past MaxSize waits at most
// the drain time. A service slower than MaxSize in drainTargets targets
// (under 5,000 a second at the defaults) keeps MaxSize.
const drainTargets = 4

// Notify tells the queue a slot may have freed: it hands slots to waiters,
// best first, while the limiter gives them. Call it after every release.
func (q *Queue[P]) Notify() {
	if q.waiting.Load() == 0 {
		if !q.idle.Load() { // read first: most releases find it set
			q.idle.Store(true)
		}
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.length == 0 {
		return
	}
	now := sluice.UnixNano(q.cfg.Clock)
	q.released(now)
	for q.length > 0 && q.serveOne(now) {
	}
}

// minPause is the shortest silence of the service read as a pause,
// pauseGaps how many average gaps between releases one lasts at least, and
// minGaps how many gaps make the average known. Before, a pause lasts
// pauseRTTs of the limiter's round trips (Config.RTT): a request in flight
// ends within about one, so that a silence of several while several are in
// flight is no service's usual pace. Before the limiter has read a round
// trip and any slot freed for a waiter, a silence of minPause is one: the
// first requests are still out. Without Config.RTT, no silence is a pause
// until the gaps are known (a slow service's first waiters wait as long as
// a fast one's pause).
const (
	minPause  = 50 * time.Millisecond
	pauseGaps = 32
	minGaps   = 16
	pauseRTTs = 4
)

// paused reports whether the service has paused: waiters wait, and no slot
// has freed since the first of them came for far longer than slots free
// while it serves (pauseGaps average gaps, or pauseRTTs round trips before
// minGaps gaps were timed; at least minPause). A service that pauses (a GC,
// a failover, a dependency that stalls for a moment) answers nothing while
// the load keeps coming, and the queue it leaves grew with nothing served: what
// the level's growth measure reads as an open-loop overload, whose backlog
// CoDel drops once the pause ends, although the service then serves it
// all (at 2,500 requests a second before a 20-slot, 5 ms service pausing
// 300 ms every second, 72% served against 100% with no sidecar, nearly
// all the loss CoDel's drops). While a pause lasts, the queue holds its
// arrivals and neither measures nor drops; endPause restarts the watch.
// An overload frees slots at the service's pace all along, so it never
// reads as one. Called with q.mu held.
func (q *Queue[P]) paused(now int64) bool {
	if q.pausedAt != 0 {
		return true
	}
	var quiet int64
	switch {
	case q.gaps >= minGaps:
		quiet = pauseGaps * q.releaseGap
	case q.cfg.RTT != nil && q.cfg.RTT() > 0:
		quiet = pauseRTTs * int64(q.cfg.RTT())
	case q.cfg.RTT == nil || q.lastRelease != 0:
		return false
	}
	// Else the limiter has read no round trip yet, and no slot has freed
	// for a waiter: the service has not answered its first requests. Its
	// waiters wait for those, not for an overload, and any silence of
	// minPause is a pause (a 500 ms service at half its capacity had 40%
	// of its first second's requests dropped by CoDel while they waited
	// for the first answers, and 1% of the next second's).
	if now-max(q.lastRelease, q.waitingSince) < max(quiet, int64(minPause)) {
		return false
	}
	q.pausedAt = now
	q.pauses.Add(1)
	return true
}

// released notes, at now, a slot that freed while waiters waited, and
// measures the gap since the last one (not across a pause). Called with
// q.mu held.
func (q *Queue[P]) released(now int64) {
	if gap := now - max(q.lastRelease, q.waitingSince); q.pausedAt == 0 && gap >= 0 {
		if q.gaps == 0 {
			q.releaseGap = gap
		} else {
			q.releaseGap += (gap - q.releaseGap) / 8
		}
		q.gaps = min(q.gaps+1, minGaps)
	}
	q.lastRelease = now
}

// endPause ends a pause at now, when a waiter it held is served: the
// levels count as drained then, so that CoDel does not drop what the pause
// held (the standing queue was the pause's, not an overload's) and their
// growth is measured afresh. Called with q.mu held.
func (q *Queue[P]) endPause(now int64) {
	q.pausedAt, q.afterPause, q.pauseEnded = 0, true, now
	for i := range q.levels {
		lv := &q.levels[i]
		lv.drained = now
		if !lv.growth.closed && !lv.growth.testing {
			// A watch that spans the pause measured the pause: the level
			// is watched afresh. (A closed loop it held, or one a hold
			// test is measuring, is judged by its size, which a pause does
			// not change: a silence of sluice's own, short of CPU, read as
			// a pause must not cancel the test that would find the loop.)
			lv.growth.watch(now, lv.length, max(lv.growth.dropEvery, 5))
		}
	}
}

// inflight is Config.InFlight's answer, 0 without one.
func (q *Queue[P]) inflight() int {
	if q.cfg.InFlight == nil {
		return 0
	}
	return q.cfg.InFlight()
}

// serveOne hands one slot to the next waiter, applying the order and
// CoDel per level: first the highest level still under its guaranteed
// share (Config.Guaranteed) that the limiter admits, else the highest
// level the limiter admits. It returns false when no waiter could be
// served. now is the time (Unix ns) its caller read under q.mu. Called
// with q.mu held.
func (q *Queue[P]) serveOne(now int64) bool {
	if g := q.cfg.Guaranteed; g != nil {
		for i := range q.levels {
			if q.levels[i].length > 0 && g(i) && q.serveLevel(i, now) {
				return true
			}
		}
	}
	for i := range q.levels {
		if q.levels[i].length > 0 && q.serveLevel(i, now) {
			return true
		}
	}
	return false
}

// serveLevel hands a slot to level i's next waiter if the limiter admits
// it. A level stands once it has not drained for Interval. A standing level
// that holds steady (growth.measure) is served in order and drops nothing;
// one that grows has its waiters older than Target dropped and the newest
// served. Called with q.mu held.
func (q *Queue[P]) serveLevel(i int, now int64) bool {
	lv := &q.levels[i]
	// The first serve after a pause is served in order, neither measured
	// nor dropped: see endPause.
	paused := q.paused(now)
	standing := q.cfg.Order == AdaptiveLIFO && !paused && now-lv.drained > int64(q.cfg.Interval)
	if standing {
		lv.measure(now, int64(q.cfg.Interval), q.inflight())
		q.noteClosed(lv)
		standing = lv.state != steady
	} else if q.cfg.Order == AdaptiveLIFO && !paused {
		lv.premark(now, int64(q.cfg.Interval), q.inflight())
		q.noteClosed(lv)
	}
	if standing && lv.state == dropping {
		// Drop those who waited past the target: their clients are likely
		// gone; serve the newest.
		lv.dropOlder(now, now-int64(q.cfg.Target), func(w *waiter[P]) {
			q.length--
			lv.shed = now
			lv.lost++
			w.gone, w.dropped = true, true
			close(w.ready)
		})
	}
	// A hold test serves the newest first from its start, before the level
	// stands: an open loop's held arrivals are dropped when it ends, and
	// served in order they waited behind all of them (a flood at 10x:
	// 100-150 held within 30 ms, served at 60-120 ms).
	holdTest := q.cfg.Order == AdaptiveLIFO && !paused && lv.growth.testing
	w := lv.take(q.cfg.Order == LIFO || standing || holdTest || q.early(lv, now, paused))
	if w == nil {
		return false
	}
	p, ok := q.acquire(i)
	if !ok {
		lv.putBack(w) // this level may not have the slot; a lower one may
		return false
	}
	q.length--
	lv.serve(w.bucket)
	if paused {
		q.endPause(now)
	} else if q.cfg.Order == AdaptiveLIFO {
		lv.noteLoop(now, int64(q.cfg.Interval), q.inflight())
		q.noteClosed(lv)
	}
	if lv.length == 0 && now-lv.shed > int64(q.cfg.Interval) {
		// Emptied by serving, with nothing dropped lately: the level keeps
		// up (a high class under a flood of a lower one does).
		lv.drained = now
	}
	w.permit, w.ok, w.gone = p, true, true
	close(w.ready)
	return true
}

// early reports whether lv, not standing yet, is served newest first: once
// the releases of waiters have been timed (minGaps) and lv has not drained
// for orderGaps of their average gaps (at least Target), as far as a
// standing queue reaches for a fast service within Interval, and no pause
// ended within Interval (what a pause held is served in order). Nothing is
// dropped before the level stands; only the order changes, so that the
// queue an overload builds before CoDel reads it delays its oldest, not
// every request (a 1 ms service at twice its capacity: the first 100 ms
// served in order waited up to 60 ms, the p99 of the first seconds). A
// level that held a closed loop (growth.closed) or holds steady keeps its
// order. Called with q.mu held.
func (q *Queue[P]) early(lv *level[P], now int64, paused bool) bool {
	return q.cfg.Order == AdaptiveLIFO && !paused && q.gaps >= minGaps && !lv.growth.closed && lv.state != steady &&
		now-q.pauseEnded > int64(q.cfg.Interval) && now-lv.drained > max(int64(q.cfg.Target), orderGaps*q.releaseGap)
}

// orderGaps is how many average gaps between releases a level waits
// undrained before it is served newest first (see early).
const orderGaps = 16

// remove takes w out of its level. Called with q.mu held.
func (q *Queue[P]) remove(w *waiter[P]) {
	if q.levels[w.prio].remove(w) {
		q.length--
		w.gone = true
	}
}

// Waiting returns about how many requests wait now (entering and leaving
// ones included), without a lock: for estimates on the request path.
func (q *Queue[P]) Waiting() int { return int(max(q.waiting.Load(), 0)) }

// Len returns the number of waiting requests.
func (q *Queue[P]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.length
}

// Stats is a snapshot of a Queue.
type Stats struct {
	// Length is the number waiting now.
	Length int
	// Enqueued counts requests that waited; Served those handed a slot
	// after waiting (not those admitted at once); Timeouts those that waited
	// MaxWait; Dropped those adaptive LIFO's CoDel dropped; Cancelled those
	// whose context ended; Full those refused for lack of room or pushed out
	// by a higher priority (both answered ErrFull).
	Enqueued, Served, Timeouts, Dropped, Cancelled, Full uint64
	// Wait is the distribution of the time spent waiting.
	Wait HistogramSnapshot
	// ClosedLoop reports whether a priority level holds a closed loop now
	// (adaptive LIFO: clients that send again as soon as they are
	// answered, held up to ClosedLoopSize instead of refused); HoldTests
	// counts the tests for one and ClosedLoops those that found one.
	ClosedLoop             bool
	HoldTests, ClosedLoops uint64
	// WaitingLoop reports whether the queue holds a closed loop within
	// MaxSize now, nobody turned away (see Queue.WaitingLoop).
	WaitingLoop bool
	// Pauses counts the pauses of the service the queue held its arrivals
	// through (nothing ended for far longer than usual while waiters
	// waited: see paused) instead of refusing them.
	Pauses uint64
}

// ClosedLoop reports whether the queue holds a closed loop now (see
// growth) that a hold test found (Stats.ClosedLoop): its clients wait as
// long wherever they wait, in the queue or in the service, and the queue
// turned some away before it held them. It takes no lock: a limiter reads
// it under its own as it closes a window, while the queue asks the limiter
// for slots under the queue's.
func (q *Queue[P]) ClosedLoop() bool { return q.closedLoop.Load() }

// WaitingLoop reports whether the queue holds a closed loop now that waits
// within MaxSize, losing nothing and not growing (see loopWatch): nobody
// is turned away, and a higher limit would only save the hand-over of
// every slot. Like ClosedLoop it takes no lock.
func (q *Queue[P]) WaitingLoop() bool { return q.waitingLoop.Load() }

// noteClosed publishes lv's closed loops for ClosedLoop and WaitingLoop:
// only a level that holds (the queue's only one) finds one. Called with
// q.mu held after anything that may change it.
func (q *Queue[P]) noteClosed(lv *level[P]) {
	if q.closedLoop.Load() != lv.closed {
		q.closedLoop.Store(lv.closed)
	}
	if w := lv.holds && lv.loop.loopLike(); q.waitingLoop.Load() != w {
		q.waitingLoop.Store(w)
	}
}

// Stats returns a snapshot of the queue.
func (q *Queue[P]) Stats() Stats {
	st := Stats{
		Enqueued: q.enqueued.Load(), Served: q.served.Load(), Timeouts: q.timeouts.Load(),
		Dropped: q.dropped.Load(), Cancelled: q.cancelled.Load(), Full: q.full.Load(), Wait: q.waitHist.snapshot(),
		Pauses: q.pauses.Load(), WaitingLoop: q.waitingLoop.Load(),
	}
	q.mu.Lock()
	st.Length = q.length
	for i := range q.levels {
		g := &q.levels[i].growth
		st.ClosedLoop = st.ClosedLoop || g.closed
		st.HoldTests += g.tests
		st.ClosedLoops += g.closedLoops
	}
	q.mu.Unlock()
	return st
}
