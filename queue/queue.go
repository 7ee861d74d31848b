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
// first out while the queue keeps emptying, but once a standing queue forms
// (it has not drained for Interval), last in, first out, and waiters older
// than Target are dropped (CoDel), so that the queue serves requests whose
// clients are still waiting. The queue drains when a slot frees with nobody
// waiting and no waiter was dropped or timed out for Interval; a queue
// emptied by serving, drops, timeouts or cancellations has not drained
// (demand still exceeds the limit), so a
// standing queue stays standing under sustained overload instead of falling
// back to FIFO, and to long waits, every time CoDel empties it.
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
	// MaxWait is the longest a request waits; default 500 ms.
	MaxWait time.Duration
	// Order is the serving order; default FIFO.
	Order Order
	// Priorities is the number of priority levels, 0 the highest; default 1.
	Priorities int
	// Target and Interval drive adaptive LIFO's CoDel: once the queue has not
	// been empty for Interval (default 100 ms), waiters older than Target
	// (default 5 ms) are dropped.
	Target, Interval time.Duration
	// Clock reads the time; default the system clock. Waiting itself uses
	// timers (testing/synctest fakes them).
	Clock sluice.Clock
}

// SetDefaults fills the zero fields of c.
func (c *Config) SetDefaults() {
	if c.MaxSize == 0 {
		c.MaxSize = 100
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 500 * time.Millisecond
	}
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
		c.Clock = sluice.SystemClock{}
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
	acquire func() (P, bool)
	release func(P) // gives back a slot a departed waiter was handed

	waiting atomic.Int64 // waiters, counted before their last try
	mu      sync.Mutex
	levels  []deque[P]
	length  int
	drained int64       // when the queue last drained (Unix ns)
	shed    int64       // when a waiter was last dropped or timed out (Unix ns)
	idle    atomic.Bool // a slot freed with nobody waiting since the queue last had waiters

	enqueued, served, timeouts, full, dropped, cancelled atomic.Uint64
	waitHist                                             histogram
}

// New returns a Queue in front of a limiter: acquire asks it for a slot
// without blocking; release gives back a slot that was handed to a waiter
// who had already left. Call Notify whenever a slot frees.
func New[P any](cfg Config, acquire func() (P, bool), release func(P)) *Queue[P] {
	cfg.SetDefaults()
	q := &Queue[P]{cfg: cfg, acquire: acquire, release: release, levels: make([]deque[P], cfg.Priorities)}
	q.drained = cfg.Clock.Now().UnixNano()
	return q
}

// waiter is one request in the queue.
type waiter[P any] struct {
	ready    chan struct{} // closed when handed a permit or dropped
	permit   P
	ok       bool // handed a permit
	dropped  bool // dropped by CoDel
	evicted  bool // pushed out by a higher priority when full
	back     bool // taken from the back of its level (to put it back there)
	enqueued int64
	prio     int
	gone     bool // left the queue
}

// Acquire returns a permit, at once if the limiter has room, else after
// waiting in the queue at priority prio (0 highest) until a slot is handed
// over, MaxWait passes (ErrTimeout), the queue is full (ErrFull), or ctx
// ends (its error).
func (q *Queue[P]) Acquire(ctx context.Context, prio int) (P, error) {
	if p, ok := q.acquire(); ok {
		return p, nil
	}
	var zero P
	if q.cfg.MaxSize < 0 {
		q.full.Add(1)
		return zero, ErrFull
	}
	prio = min(max(prio, 0), len(q.levels)-1)
	q.waiting.Add(1)
	q.mu.Lock()
	// The last try, now that a releaser will see this waiter.
	if p, ok := q.acquire(); ok {
		q.waiting.Add(-1)
		q.mu.Unlock()
		return p, nil
	}
	now := q.cfg.Clock.Now().UnixNano()
	if q.length == 0 && q.idle.Load() {
		// A slot went unused since the queue last had waiters: it drained,
		// unless waiters were shed lately (then CoDel emptied it and the
		// demand still exceeds the limit).
		q.idle.Store(false)
		if now-q.shed > int64(q.cfg.Interval) {
			q.drained = now
		}
	}
	if q.length >= q.cfg.MaxSize && !q.evictBelow(prio) {
		q.waiting.Add(-1)
		q.mu.Unlock()
		q.full.Add(1)
		return zero, ErrFull
	}
	w := &waiter[P]{ready: make(chan struct{}), enqueued: now, prio: prio}
	q.levels[prio].pushBack(w)
	q.length++
	q.enqueued.Add(1)
	q.mu.Unlock()

	timer := time.NewTimer(q.cfg.MaxWait)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
	case <-timer.C:
		err = ErrTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	q.mu.Lock()
	if !w.gone {
		q.remove(w)
	}
	if err == ErrTimeout {
		q.shed = q.cfg.Clock.Now().UnixNano()
	}
	handed, dropped, evicted := w.ok, w.dropped, w.evicted
	q.mu.Unlock()
	q.waiting.Add(-1)
	q.waitHist.observe(time.Duration(q.cfg.Clock.Now().UnixNano() - w.enqueued))
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

// evictBelow makes room for a waiter of priority prio by dropping the newest
// waiter of the lowest priority below it. Called with q.mu held.
func (q *Queue[P]) evictBelow(prio int) bool {
	for lv := len(q.levels) - 1; lv > prio; lv-- {
		if w := q.levels[lv].popBack(); w != nil {
			q.length--
			w.gone, w.evicted = true, true
			close(w.ready)
			return true
		}
	}
	return false
}

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
	for q.length > 0 {
		w := q.next()
		if w == nil {
			return
		}
		p, ok := q.acquire()
		if !ok {
			q.pushFront(w)
			return
		}
		w.permit, w.ok, w.gone = p, true, true
		close(w.ready)
	}
}

// next takes the waiter to serve, applying the order and CoDel. Called with
// q.mu held.
func (q *Queue[P]) next() *waiter[P] {
	now := q.cfg.Clock.Now().UnixNano()
	if q.length == 0 {
		q.drained = now // a slot and nobody to take it
		return nil
	}
	standing := q.cfg.Order == AdaptiveLIFO && now-q.drained > int64(q.cfg.Interval)
	for lv := range q.levels {
		d := &q.levels[lv]
		if standing {
			// Drop those who waited past the target: their clients are
			// likely gone; serve the newest.
			for {
				w := d.front()
				if w == nil || now-w.enqueued <= int64(q.cfg.Target) {
					break
				}
				d.popFront()
				q.length--
				q.shed = now
				w.gone, w.dropped = true, true
				close(w.ready)
			}
		}
		var w *waiter[P]
		if q.cfg.Order == LIFO || standing {
			w = d.popBack()
			if w != nil {
				w.back = true
			}
		} else {
			w = d.popFront()
			if w != nil {
				w.back = false
			}
		}
		if w != nil {
			q.length--
			return w
		}
	}
	return nil
}

// pushFront puts back a waiter next took but could not serve.
func (q *Queue[P]) pushFront(w *waiter[P]) {
	d := &q.levels[w.prio]
	if w.back {
		d.pushBack(w)
	} else {
		d.pushFront(w)
	}
	q.length++
}

// remove takes w out of its level. Called with q.mu held.
func (q *Queue[P]) remove(w *waiter[P]) {
	if q.levels[w.prio].remove(w) {
		q.length--
		w.gone = true
	}
}

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
}

// Stats returns a snapshot of the queue.
func (q *Queue[P]) Stats() Stats {
	return Stats{
		Length: q.Len(), Enqueued: q.enqueued.Load(), Served: q.served.Load(), Timeouts: q.timeouts.Load(),
		Dropped: q.dropped.Load(), Cancelled: q.cancelled.Load(), Full: q.full.Load(), Wait: q.waitHist.snapshot(),
	}
}
