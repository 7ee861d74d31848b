// Package sluice holds the vocabulary shared by every part of sluice: the
// Decision a limiter returns, the Reason behind a rejection, the Outcome a
// released Permit reports, and the Clock that every time-dependent part reads.
//
// The parts themselves live in sub-packages: static (keyed quotas), adaptive
// (concurrency limits), queue (waiting for capacity) and sidecar (the HTTP
// face). This package has no logic of its own beyond small helpers.
package sluice

import (
	"sync"
	"sync/atomic"
	"time"
)

// Reason says why a Decision denied a request. The zero value, ReasonNone,
// goes with an allowed Decision.
type Reason uint8

// The reasons a request can be denied.
const (
	// ReasonNone: the request was allowed.
	ReasonNone Reason = iota
	// ReasonQuota: a rate quota (requests per window) is used up.
	ReasonQuota
	// ReasonConcurrency: too many requests of this key are in flight.
	ReasonConcurrency
	// ReasonQueueFull: the wait queue had no room.
	ReasonQueueFull
	// ReasonQueueTimeout: the request waited in the queue as long as it may.
	ReasonQueueTimeout
	// ReasonOverload: the adaptive limit is reached and the request was shed.
	ReasonOverload
	// ReasonStoreDown: the store could not decide and the rule's failure
	// policy is to deny.
	ReasonStoreDown
	// ReasonDeadline: the client's deadline would pass before the request
	// could be served (its expected wait plus the service's median exceed
	// it, or it passed while the request waited).
	ReasonDeadline
)

var reasonNames = [...]string{
	ReasonNone:         "none",
	ReasonQuota:        "quota",
	ReasonConcurrency:  "concurrency",
	ReasonQueueFull:    "queue_full",
	ReasonQueueTimeout: "queue_timeout",
	ReasonOverload:     "overload",
	ReasonStoreDown:    "store_down",
	ReasonDeadline:     "deadline",
}

// String returns the snake_case name of r, as used in metrics labels and logs.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Never is the RetryAfter of a denial that no retry of the same cost can turn
// into an admission: the cost is larger than the policy's capacity, or the
// limit is zero. It mirrors redis-cell's retry_after of -1.
const Never time.Duration = -1

// Decision is the answer of a limiter for one request. A rejection is a
// Decision with Allowed false, never an error: an error means the limiter
// could not decide at all.
//
// The quota fields describe the rule named by RuleID and are meant for
// response headers (RateLimit, X-RateLimit-*, Retry-After). Durations are
// exact to the nanosecond in memory and to the microsecond in Redis; callers
// that print them round up to the unit they print.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// RuleID is the rule that decided: the first that denied, else the
	// tightest (least remaining) of those that allowed.
	RuleID string
	// Limit is the rule's quota: requests per window for window algorithms,
	// the bucket's capacity for bucket algorithms, the permitted in-flight
	// count for concurrency.
	Limit int64
	// Remaining is the quota left after this call; -1 when unknown.
	Remaining int64
	// ResetAfter is the time until the quota is whole again.
	ResetAfter time.Duration
	// RetryAfter is the time until a retry of the same cost can succeed: 0
	// when allowed, Never when no retry can.
	RetryAfter time.Duration
	// Delay, on an allowed Decision, is how long to hold the request before
	// forwarding it (leaky-bucket pacing, a semaphore's wait for the next
	// period). Zero means forward at once.
	Delay time.Duration
	// Reason says why the request was denied; ReasonNone when allowed.
	Reason Reason
}

// Outcome is what a released Permit reports about the work it admitted. It
// feeds adaptive limits: a Success carries a round-trip-time sample, a Dropped
// is an overload signal, an Ignore is neither.
type Outcome uint8

// The outcomes of admitted work.
const (
	// Success: the work completed; its latency is a valid sample.
	Success Outcome = iota
	// Ignore: the work ended in a way that says nothing about load (a client
	// error, a cancelled request).
	Ignore
	// Dropped: the work failed in a way that signals overload (a timeout, an
	// upstream 503 or 429).
	Dropped
)

// String returns the lower-case name of o.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Ignore:
		return "ignore"
	case Dropped:
		return "dropped"
	}
	return "unknown"
}

// Permit is held by admitted work and released exactly once, by whoever was
// admitted, when the work ends. Releasing gives capacity back and reports how
// the work went. A second Release is a no-op.
type Permit interface {
	Release(Outcome)
}

// NopPermit is a Permit that holds nothing; releasing it does nothing.
type NopPermit struct{}

// Release does nothing.
func (NopPermit) Release(Outcome) {}

// Clock tells the time. Every part of sluice that depends on time reads an
// injected Clock, so that tests can drive it with a FakeClock. It must be safe
// for concurrent use.
type Clock interface {
	Now() time.Time
}

// SystemClock is the Clock of the operating system, read with time.Now() on
// every call. NewSystemClock's clock tells the same time at about half the
// cost; every part of sluice uses that one by default.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewSystemClock returns the operating system's clock, read at the cost of one
// monotonic clock reading instead of time.Now()'s two (wall and monotonic):
// it tells the wall time of an anchor plus the monotonic time elapsed since,
// and takes a new anchor from time.Now() once a second. Both system clocks
// are disciplined alike by NTP, so the reading differs from time.Now() only
// after the wall clock is stepped, and then for at most anchorEvery. Its
// times carry a monotonic reading, so durations between them never go
// negative. Safe for concurrent use.
func NewSystemClock() Clock {
	c := &systemClock{every: anchorEvery}
	c.reanchor()
	return c
}

// anchorEvery is how long a systemClock uses one anchor.
const anchorEvery = time.Second

// anchor is a reading of time.Now() and its Unix nanoseconds.
type anchor struct {
	t    time.Time
	unix int64
}

type systemClock struct {
	anchor atomic.Pointer[anchor]
	every  time.Duration
}

// UnixNano implements NanoClock: the same reading as Now, without building
// a time.Time.
func (c *systemClock) UnixNano() int64 {
	a := c.anchor.Load()
	if d := time.Since(a.t); d < c.every {
		return a.unix + int64(d)
	}
	return c.reanchor().unix
}

// reanchor takes a new anchor from time.Now() and returns it.
func (c *systemClock) reanchor() *anchor {
	now := time.Now()
	a := &anchor{t: now, unix: now.UnixNano()}
	c.anchor.Store(a)
	return a
}

// NanoClock is a Clock that also tells the time as Unix nanoseconds without
// building a time.Time, for the request path; NewSystemClock's clock is one.
type NanoClock interface {
	Clock
	// UnixNano returns Now().UnixNano().
	UnixNano() int64
}

// UnixNano reads c in Unix nanoseconds: through NanoClock's UnixNano when c
// is one, else c.Now().UnixNano().
func UnixNano(c Clock) int64 {
	if n, ok := c.(NanoClock); ok {
		return n.UnixNano()
	}
	return c.Now().UnixNano()
}

func (c *systemClock) Now() time.Time {
	a := c.anchor.Load()
	// time.Since of a time with a monotonic reading reads only the
	// monotonic clock.
	if d := time.Since(a.t); d < c.every {
		return a.t.Add(d)
	}
	return c.reanchor().t
}

// FakeClock is a Clock that only moves when told to. It is safe for
// concurrent use. The zero value is not usable; call NewFakeClock.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a FakeClock that reads start until moved.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start}
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d, which may be negative to simulate a clock
// that steps back.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
