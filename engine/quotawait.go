package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/static"
)

// This file holds the lines in which requests wait for a rule's quota to
// come back (rules[].max_wait), one line per key, in arrival order. It
// imports no net/http.

// MaxQuotaWaiters bounds the requests waiting for quota at once, over all
// keys: beyond it a request over its quota gets its 429 at once.
const MaxQuotaWaiters = 10000

// quotaLines are the per-key lines of requests waiting for quota. Only the
// head of a line checks the store; the others wait for their turn, so a
// key's quota goes to its waiters in the order they came, and the store is
// asked once per retry time, not once per waiter. A line exists only while
// someone waits in it: memory follows the waiters, bounded by
// MaxQuotaWaiters.
type quotaLines struct {
	mu    sync.Mutex
	lines map[string][]*quotaTurn
	n     int
}

// quotaTurn is one request's place in a line: ready is closed when it is
// at the head.
type quotaTurn struct {
	ready chan struct{}
}

// busy reports whether someone waits for key's quota: a newcomer must
// queue behind them rather than take what comes back first.
func (q *quotaLines) busy(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.lines[key]) > 0
}

// enter puts the request at the back of key's line and returns its turn,
// unless too many wait already or more than most wait in the line (the
// caller's wait would not fit). The key is copied: the caller's may be a
// view of a buffer it reuses.
func (q *quotaLines) enter(key string, most int) (*quotaTurn, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n >= MaxQuotaWaiters || len(q.lines[key]) > most {
		return nil, false
	}
	if q.lines == nil {
		q.lines = map[string][]*quotaTurn{}
	}
	t := &quotaTurn{ready: make(chan struct{})}
	line, ok := q.lines[key]
	if !ok {
		key = string(append([]byte(nil), key...))
	}
	if len(line) == 0 {
		close(t.ready)
	}
	q.lines[key] = append(line, t)
	q.n++
	return t, true
}

// leave takes t out of key's line and, if it was the head, gives the turn
// to the next.
func (q *quotaLines) leave(key string, t *quotaTurn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.lines[key]
	for i, x := range line {
		if x != t {
			continue
		}
		line = append(line[:i], line[i+1:]...)
		q.n--
		if i == 0 && len(line) > 0 {
			close(line[0].ready)
		}
		break
	}
	if len(line) == 0 {
		delete(q.lines, key)
	} else {
		q.lines[key] = line
	}
}

// sleepUntil waits until deadline or ctx ends, reporting whether it
// reached the deadline. Timers, not the engine's clock: testing/synctest
// fakes them.
func sleepUntil(ctx context.Context, wait time.Duration) bool {
	if wait <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitsInLine reports whether any of the matched rules waits for its quota
// in a line (max_wait), rather than reserving the wait through the store (a
// Delay).
func waitsInLine(matched []*rule) bool {
	for _, r := range matched {
		if r.maxWait > 0 && r.reserve == 0 {
			return true
		}
	}
	return false
}

// quotaWait is one request's wait for quota: the line it joined, if any
// (left by leave, whatever the exit), and when its wait ends. Deadlines use
// timers and time.Now, as the queue does, so that testing/synctest runs
// them on virtual time.
type quotaWait struct {
	q        *quotaLines
	ctx      context.Context
	turn     *quotaTurn
	key      string
	deadline time.Time
}

// leave gives the request's place in its line back, if it has one.
func (w *quotaWait) leave() {
	if w.turn != nil {
		w.q.leave(w.key, w.turn)
	}
}

// joinBusy joins the line of the first matched rule whose key others
// already wait for, so that a newcomer does not take what comes back
// first, and waits for its turn or its time. It reports false when that
// line is too long to join (the caller then checks once, without waiting).
func (w *quotaWait) joinBusy(matched []*rule, limits []static.Limit) (bool, error) {
	for i, r := range matched {
		if r.maxWait > 0 && r.reserve == 0 && w.q.busy(limits[i].Key) {
			in, _, err := w.join(limits[i].Key, r, 0)
			return in, err // its turn came, or its time ran out: check now either way
		}
	}
	return true, nil
}

// join puts the request in key's line (r's) and waits for its turn. It
// reports whether the request is in the line and whether it waited; not in
// the line when the line is full or the wait would not fit in max_wait
// (those ahead take the quota as it comes back, one per interval at the
// rule's rate, and the first comes back after first).
func (w *quotaWait) join(key string, r *rule, first time.Duration) (in, waited bool, err error) {
	maxWait := r.maxWait
	most := MaxQuotaWaiters
	if r.nominal > 0 && r.window > 0 {
		if per := r.window / time.Duration(r.nominal); per > 0 {
			most = int((maxWait - first) / per)
		}
	}
	t, ok := w.q.enter(key, most)
	if !ok {
		return false, false, nil
	}
	w.turn, w.key, w.deadline = t, key, time.Now().Add(maxWait)
	select {
	case <-t.ready:
		return true, false, nil // the head: nobody to wait for
	default:
	}
	tm := time.NewTimer(maxWait)
	defer tm.Stop()
	select {
	case <-t.ready:
		return true, true, nil
	case <-tm.C:
		return true, true, nil // out of time: one last check
	case <-w.ctx.Done():
		return true, true, w.ctx.Err()
	}
}
