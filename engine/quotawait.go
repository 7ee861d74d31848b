package engine

import (
	"context"
	"sync"
	"time"
)

// This file holds the lines in which requests wait for a rule's quota to
// come back (rules[].max_wait), one line per key, in arrival order. It
// imports no net/http.

// maxQuotaWaiters bounds the requests waiting for quota at once, over all
// keys: beyond it a request over its quota gets its 429 at once.
const maxQuotaWaiters = 10000

// quotaLines are the per-key lines of requests waiting for quota. Only the
// head of a line checks the store; the others wait for their turn, so a
// key's quota goes to its waiters in the order they came, and the store is
// asked once per retry time, not once per waiter. A line exists only while
// someone waits in it: memory follows the waiters, bounded by
// maxQuotaWaiters.
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
	if q.n >= maxQuotaWaiters || len(q.lines[key]) > most {
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
