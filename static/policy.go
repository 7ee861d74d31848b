// Package static holds sluice's keyed static limits: the algorithms (token
// bucket, leaky bucket, GCRA, fixed window, sliding window counter, sliding
// log, Resilience4j-style semaphore, per-key concurrency), the Store interface
// they are checked through, and Memory, the embedded in-process store.
//
// Every algorithm is a pure function of a key's state, the time and the cost
// of the request: it reads time as an argument and never the wall clock, so a
// test can drive it step by step. Stores read an injected sluice.Clock.
package static

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Algorithm names a static limiting algorithm.
type Algorithm uint8

// The algorithms. Their semantics are documented on Policy.
const (
	// AlgorithmUnknown is the zero value; a Policy with it does not validate.
	AlgorithmUnknown Algorithm = iota
	FixedWindow
	SlidingWindow
	SlidingLog
	TokenBucket
	LeakyBucket
	GCRA
	Semaphore
	Concurrency
)

var algorithmNames = [...]string{
	AlgorithmUnknown: "unknown",
	FixedWindow:      "fixed_window",
	SlidingWindow:    "sliding_window",
	SlidingLog:       "sliding_log",
	TokenBucket:      "token_bucket",
	LeakyBucket:      "leaky_bucket",
	GCRA:             "gcra",
	Semaphore:        "semaphore",
	Concurrency:      "concurrency",
}

// String returns the configuration name of a (e.g. "token_bucket").
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "unknown"
}

// AlgorithmNames returns the configuration names of the algorithms.
func AlgorithmNames() []string {
	names := make([]string, 0, len(algorithmNames)-1)
	for i, n := range algorithmNames {
		if i != int(AlgorithmUnknown) {
			names = append(names, n)
		}
	}
	return names
}

// ParseAlgorithm returns the Algorithm named s, as written in configuration.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if i != int(AlgorithmUnknown) && n == s {
			return Algorithm(i), nil
		}
	}
	return AlgorithmUnknown, fmt.Errorf("unknown algorithm %q (want one of fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket, gcra, semaphore, concurrency)", s)
}

// Bounds that keep every algorithm's integer arithmetic exact.
const (
	// MaxWindow is the longest window or period a Policy may have.
	MaxWindow = 10 * 365 * 24 * time.Hour
	// MaxLimit is the largest limit or burst a Policy may have.
	MaxLimit = 1 << 40
	// MaxSlidingLogLimit bounds a sliding log's limit: the log keeps one
	// timestamp (8 bytes) per admitted request in the window.
	MaxSlidingLogLimit = 100_000
)

// Policy is one rule's static limit. The same Policy type drives every
// algorithm; fields an algorithm does not use must be zero (Validate says so).
//
// Semantics, per Algorithm (L = Limit, W = Window, B = Burst, T = W/L):
//
//   - FixedWindow: at most L per window; windows are aligned to the Unix
//     epoch. Two full windows back to back admit 2L within a short span (the
//     fixed-window double burst): that is the algorithm, not a bug. Memory
//     per key: 2 integers.
//   - SlidingWindow: Cloudflare's sliding window counter. A request is
//     admitted while prev*(W-elapsed)/W + cur + cost <= L, where prev and cur
//     are the counts of the previous and current aligned windows. Memory per
//     key: 3 integers.
//   - SlidingLog: exact rolling window, as classdojo's rolling-rate-limiter:
//     admitted while fewer than L requests were admitted in (now-W, now] and,
//     when MinInterval is set, at least MinInterval passed since the last one.
//     With CountBlocked, blocked attempts are recorded too, so a client that
//     keeps retrying stays blocked. Memory per key: 8 bytes per request in the
//     window, at most L (bounded by MaxSlidingLogLimit).
//   - TokenBucket: capacity B (L when B is 0), refilled at L per W; a request
//     of cost c is admitted while c tokens are there. With Warmup, it follows
//     Guava's SmoothWarmingUp instead: a key that was idle starts cold, at a
//     third of the rate, and ramps linearly to L/W over Warmup of use; the
//     stored capacity is Warmup/T permits, and a request is admitted when the
//     previous one's cost has been paid off (Burst must then be 0). Memory per
//     key: 2 numbers.
//   - LeakyBucket: nginx limit_req. Requests leave at a constant rate L/W; up
//     to B requests wait in the bucket (the Decision's Delay says how long to
//     hold each so that the outflow stays smooth); more are denied. NoDelay
//     admits the burst at once but keeps the accounting. Memory per key: 1
//     integer.
//   - GCRA: the generic cell rate algorithm with redis-cell's semantics and
//     answers (CL.THROTTLE key B L W cost): emission interval T, tolerance
//     T*(B+1). Memory per key: 1 integer.
//   - Semaphore: Resilience4j's RateLimiter. L permits per refresh period W
//     (periods aligned to the epoch); a caller that finds none may reserve one
//     in a coming period if it would wait no longer than Timeout, and is
//     admitted with that Delay. A request of cost > 1 takes all its permits
//     from one period (Resilience4j may split them), so no period ever runs
//     more than L. Memory per key: 2 integers.
//   - Concurrency: a per-key bulkhead: at most L requests in flight, each
//     holding a Permit until it ends. With Timeout, a caller waits up to that
//     long for a slot to free. Memory per key: 1 integer.
//
// For every algorithm a cost larger than the capacity, or any cost against a
// Limit of 0, is denied with RetryAfter sluice.Never. A cost of 0 asks
// without consuming. The zero Policy is not valid.
type Policy struct {
	// Algorithm selects the algorithm. Required.
	Algorithm Algorithm
	// Limit is the quota: requests per Window, permits per period, or
	// requests in flight. Zero denies every request of positive cost.
	Limit int64
	// Window is the window, refill period or refresh period. Required for all
	// but Concurrency, at most MaxWindow.
	Window time.Duration
	// Burst is the token bucket's capacity (0 means Limit), GCRA's max_burst,
	// or the leaky bucket's queue size.
	Burst int64
	// Warmup, for TokenBucket only, enables Guava-style warm-up.
	Warmup time.Duration
	// NoDelay, for LeakyBucket only, admits a burst at once.
	NoDelay bool
	// MinInterval, for SlidingLog only, is the least time between two
	// admitted requests.
	MinInterval time.Duration
	// CountBlocked, for SlidingLog and FixedWindow, records blocked
	// attempts too (a fixed window then counts every hit, as
	// envoyproxy/ratelimit's does). Such a
	// rule consumes even when another rule of the request denies it.
	CountBlocked bool
	// Timeout, for Semaphore and Concurrency, is how long a caller may wait
	// for a permit. Zero means do not wait.
	Timeout time.Duration
}

// Validate reports the first problem with p, naming the configuration field
// at fault, or nil when p is usable.
func (p *Policy) Validate() error {
	if p.Algorithm == AlgorithmUnknown || int(p.Algorithm) >= len(algorithmNames) {
		return errors.New("algorithm: required")
	}
	a := p.Algorithm
	if p.Limit < 0 || p.Limit > MaxLimit {
		return fmt.Errorf("limit: %d out of range [0, %d]", p.Limit, int64(MaxLimit))
	}
	if p.Burst < 0 || p.Burst > MaxLimit {
		return fmt.Errorf("burst: %d out of range [0, %d]", p.Burst, int64(MaxLimit))
	}
	if a == Concurrency {
		if p.Window != 0 {
			return errors.New("window: not used by concurrency; remove it")
		}
	} else if p.Window <= 0 || p.Window > MaxWindow {
		return fmt.Errorf("window: %v out of range (0, %v]", p.Window, MaxWindow)
	}
	if p.Burst != 0 && a != TokenBucket && a != LeakyBucket && a != GCRA {
		return fmt.Errorf("burst: not used by %s", a)
	}
	if p.Warmup != 0 {
		if a != TokenBucket {
			return fmt.Errorf("warmup: not used by %s", a)
		}
		if p.Warmup < 0 || p.Warmup > MaxWindow {
			return fmt.Errorf("warmup: %v out of range (0, %v]", p.Warmup, MaxWindow)
		}
		if p.Burst != 0 {
			return errors.New("burst: contradicts warmup (a warming token bucket stores warmup/(window/limit) permits); set one of them")
		}
	}
	if p.NoDelay && a != LeakyBucket {
		return fmt.Errorf("nodelay: not used by %s", a)
	}
	if p.MinInterval != 0 && a != SlidingLog {
		return fmt.Errorf("min_interval: not used by %s", a)
	}
	if p.MinInterval < 0 || p.MinInterval > MaxWindow {
		return fmt.Errorf("min_interval: %v out of range [0, %v]", p.MinInterval, MaxWindow)
	}
	if p.CountBlocked && a != SlidingLog && a != FixedWindow {
		return fmt.Errorf("count_blocked: not used by %s", a)
	}
	if p.Timeout != 0 && a != Semaphore && a != Concurrency {
		return fmt.Errorf("timeout: not used by %s", a)
	}
	if p.Timeout < 0 || p.Timeout > MaxWindow {
		return fmt.Errorf("timeout: %v out of range [0, %v]", p.Timeout, MaxWindow)
	}
	// Every store keeps time in whole microseconds (Redis's TIME): a
	// duration it cannot represent would give another answer there.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"window", p.Window}, {"warmup", p.Warmup}, {"min_interval", p.MinInterval}, {"timeout", p.Timeout}} {
		if d.v%time.Microsecond != 0 {
			return fmt.Errorf("%s: %v is not a whole number of microseconds", d.name, d.v)
		}
	}
	if a == SlidingLog && p.Limit > MaxSlidingLogLimit {
		return fmt.Errorf("limit: %d too large for sliding_log (at most %d; it keeps a timestamp per request)", p.Limit, MaxSlidingLogLimit)
	}
	switch a {
	case TokenBucket, LeakyBucket, GCRA:
		if p.Limit == 0 {
			return nil
		}
		t := p.interval()
		if t < int64(time.Microsecond) {
			return fmt.Errorf("limit: %d per %v is faster than one per microsecond, the finest rate every store keeps", p.Limit, p.Window)
		}
		if float64(t)*float64(p.capacity()+1) > math.MaxInt64/4 {
			return fmt.Errorf("burst: %d at one per %v overflows the bucket's time span", p.Burst, time.Duration(t))
		}
	}
	return nil
}

// interval is the emission interval T = W/L in nanoseconds, rounded up: a
// rate whose interval falls between two nanoseconds is kept a little under,
// never over (the Redis store rounds up to whole microseconds likewise).
// Callers ensure Limit > 0.
func (p *Policy) interval() int64 { return (int64(p.Window) + p.Limit - 1) / p.Limit }

// Capacity is how many unit requests the policy admits at once from a
// fresh key: the Limit its Decisions report (for bucket algorithms the
// bucket's size, not the configured rate).
func (p *Policy) Capacity() int64 { return p.capacity() }

// capacity is Capacity.
func (p *Policy) capacity() int64 {
	if p.Limit == 0 {
		return 0
	}
	switch p.Algorithm {
	case TokenBucket:
		if p.Burst > 0 {
			return p.Burst
		}
		return p.Limit
	case LeakyBucket, GCRA:
		return p.Burst + 1
	}
	return p.Limit
}
