// Package statictest is the conformance suite of static.Store
// implementations: step tables that every algorithm must answer the same way
// in every store, and behaviour tests of the Store contract (all-or-nothing,
// shadow limits, concurrency permits, undo). The memory store and the Redis
// store both run it, so both give the same decisions for the same steps.
package statictest

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
)

// Start is the time every case starts at: midnight UTC, aligned to every
// window that divides a day.
var Start = time.Unix(1_699_920_000, 0)

// Step is one request of a Case and the decision it must get.
type Step struct {
	// At is the request's time, since Start.
	At time.Duration
	// Cost is the request's cost.
	Cost int64
	// Allowed, Remaining, ResetAfter, RetryAfter and Delay are the expected
	// decision. Durations compare to within Tolerance.
	Allowed    bool
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Delay      time.Duration
}

// Tolerance is how far a store's durations may be from the table's: stores
// that keep time in microseconds, or weigh windows in floating point, round.
const Tolerance = time.Millisecond

// Case is a policy and the steps it must answer, on one key.
type Case struct {
	Name   string
	Policy static.Policy
	// Limit is the Decision's expected Limit.
	Limit int64
	Steps []Step
}

const ms = time.Millisecond

// allow and deny build steps tersely: at (ms), cost, remaining, reset (ms),
// and for deny the retry-after (ms, or sluice.Never).
func allow(at, cost, rem int64, reset time.Duration) Step {
	return Step{At: time.Duration(at) * ms, Cost: cost, Allowed: true, Remaining: rem, ResetAfter: reset}
}

func delayed(at, cost, rem int64, reset, delay time.Duration) Step {
	s := allow(at, cost, rem, reset)
	s.Delay = delay
	return s
}

func deny(at, cost, rem int64, reset, retry time.Duration) Step {
	return Step{At: time.Duration(at) * ms, Cost: cost, Remaining: rem, ResetAfter: reset, RetryAfter: retry}
}

// Cases returns the conformance tables. Each call returns fresh values.
func Cases() []Case {
	second := time.Second
	huge := static.MaxWindow
	hugeReset := time.Duration(int64(huge) - Start.UnixNano()%int64(huge))
	never := sluice.Never
	return []Case{
		{
			Name:   "fixed_window/basic",
			Policy: static.Policy{Algorithm: static.FixedWindow, Limit: 3, Window: second},
			Limit:  3,
			Steps: []Step{
				allow(0, 1, 2, 1000*ms),
				allow(100, 1, 1, 900*ms),
				allow(200, 1, 0, 800*ms),
				deny(300, 1, 0, 700*ms, 700*ms),
				deny(999, 1, 0, 1*ms, 1*ms),
				// The key's window ends exactly now: a new window.
				allow(1000, 1, 2, 1000*ms),
				allow(1500, 2, 0, 500*ms),
				deny(1600, 1, 0, 400*ms, 400*ms),
			},
		},
		{
			Name:   "fixed_window/double_burst_at_boundary",
			Policy: static.Policy{Algorithm: static.FixedWindow, Limit: 3, Window: second},
			Limit:  3,
			Steps: []Step{
				allow(999, 3, 0, 1*ms),
				deny(999, 1, 0, 1*ms, 1*ms),
				allow(1000, 3, 0, 1000*ms), // 6 in 2 ms: the algorithm's known weakness
				deny(1001, 1, 0, 999*ms, 999*ms),
			},
		},
		{
			Name:   "fixed_window/cost_above_limit",
			Policy: static.Policy{Algorithm: static.FixedWindow, Limit: 3, Window: second},
			Limit:  3,
			Steps: []Step{
				deny(0, 4, 3, 0, never),
				allow(0, 1, 2, 1000*ms),
				deny(10, 4, 2, 990*ms, never),
				allow(20, 2, 0, 980*ms), // the denied cost consumed nothing
			},
		},
		{
			Name:   "fixed_window/time_goes_backwards",
			Policy: static.Policy{Algorithm: static.FixedWindow, Limit: 3, Window: second},
			Limit:  3,
			Steps: []Step{
				allow(2000, 1, 2, 1000*ms),
				// A clock that steps back is read as the latest time seen,
				// so the earlier window's fresh quota is not handed out.
				allow(1500, 1, 1, 1000*ms),
				allow(1999, 1, 0, 1000*ms),
				deny(1999, 1, 0, 1000*ms, 1000*ms),
			},
		},
		{
			Name:   "fixed_window/limit_zero",
			Policy: static.Policy{Algorithm: static.FixedWindow, Limit: 0, Window: second},
			Limit:  0,
			Steps: []Step{
				deny(0, 1, 0, 0, never),
				allow(0, 0, 0, 0),
				deny(5000, 1, 0, 0, never),
			},
		},
		{
			Name:   "fixed_window/huge_window",
			Policy: static.Policy{Algorithm: static.FixedWindow, Limit: 2, Window: huge},
			Limit:  2,
			Steps: []Step{
				allow(0, 1, 1, hugeReset),
				allow(1000, 1, 0, hugeReset-second),
				deny(2000, 1, 0, hugeReset-2*second, hugeReset-2*second),
			},
		},
		{
			Name:   "sliding_window/basic",
			Policy: static.Policy{Algorithm: static.SlidingWindow, Limit: 10, Window: second},
			Limit:  10,
			Steps: []Step{
				allow(0, 5, 5, 2000*ms),
				allow(500, 5, 0, 1500*ms),
				// cur+cost > limit: room comes in the next window, once the
				// weight of these 10 has fallen to 9.
				deny(600, 1, 0, 1400*ms, 500*ms),
				// Next window, 100 ms in: 10*0.9 = 9 estimated.
				allow(1100, 1, 0, 1900*ms),
				deny(1100, 1, 0, 1900*ms, 100*ms),
				allow(1200, 1, 0, 1800*ms),
				allow(1500, 1, 2, 1500*ms),
				// Two windows later everything has aged out.
				allow(3500, 1, 9, 1500*ms),
			},
		},
		{
			Name:   "sliding_window/cost_above_limit_and_zero",
			Policy: static.Policy{Algorithm: static.SlidingWindow, Limit: 4, Window: second},
			Limit:  4,
			Steps: []Step{
				deny(0, 5, 4, 0, never),
				allow(0, 0, 4, 0),
				allow(0, 4, 0, 2000*ms),
				deny(999, 4, 0, 1001*ms, 1001*ms),
			},
		},
		{
			Name:   "sliding_window/huge_window",
			Policy: static.Policy{Algorithm: static.SlidingWindow, Limit: 2, Window: huge},
			Limit:  2,
			Steps: []Step{
				allow(0, 1, 1, hugeReset+huge),
				allow(0, 1, 0, hugeReset+huge),
				deny(0, 1, 0, hugeReset+huge, hugeReset+huge/2),
			},
		},
		{
			Name:   "sliding_log/basic",
			Policy: static.Policy{Algorithm: static.SlidingLog, Limit: 3, Window: second},
			Limit:  3,
			Steps: []Step{
				allow(0, 1, 2, 1000*ms),
				allow(100, 1, 1, 1000*ms),
				allow(200, 1, 0, 1000*ms),
				deny(300, 1, 0, 900*ms, 700*ms),
				// The request at 0 leaves the window exactly at 1000.
				allow(1000, 1, 0, 1000*ms),
				deny(1050, 1, 0, 950*ms, 50*ms),
				deny(1100, 2, 1, 900*ms, 100*ms),
				allow(1200, 2, 0, 1000*ms),
				deny(1200, 4, 0, 1000*ms, never),
			},
		},
		{
			Name:   "sliding_log/min_interval",
			Policy: static.Policy{Algorithm: static.SlidingLog, Limit: 10, Window: second, MinInterval: 100 * ms},
			Limit:  10,
			Steps: []Step{
				allow(0, 1, 9, 1000*ms),
				deny(50, 1, 9, 950*ms, 50*ms),
				allow(100, 1, 8, 1000*ms),
				allow(250, 2, 6, 1000*ms),
				deny(300, 1, 6, 950*ms, 50*ms),
			},
		},
		{
			Name:   "sliding_log/count_blocked",
			Policy: static.Policy{Algorithm: static.SlidingLog, Limit: 2, Window: second, CountBlocked: true},
			Limit:  2,
			Steps: []Step{
				allow(0, 1, 1, 1000*ms),
				allow(100, 1, 0, 1000*ms),
				// Blocked, and recorded: the log is now {100, 200}.
				deny(200, 1, 0, 1000*ms, 900*ms),
				// Without count_blocked this would pass; the retries at 200
				// and now keep the client blocked.
				deny(1050, 1, 0, 1000*ms, 150*ms),
				deny(1150, 1, 0, 1000*ms, 900*ms),
				allow(2150, 1, 1, 1000*ms),
			},
		},
		{
			Name:   "token_bucket/basic",
			Policy: static.Policy{Algorithm: static.TokenBucket, Limit: 10, Window: second, Burst: 5},
			Limit:  5,
			Steps: []Step{
				allow(0, 1, 4, 100*ms),
				allow(0, 4, 0, 500*ms),
				deny(0, 1, 0, 500*ms, 100*ms),
				allow(250, 1, 1, 350*ms),
				deny(250, 6, 1, 350*ms, never),
				deny(250, 2, 1, 350*ms, 50*ms),
				// Refilled exactly when the bucket is full again.
				allow(600, 1, 4, 100*ms),
			},
		},
		{
			// A denied check must not drop what it saw expire: when the
			// clock then steps back, the log still holds it.
			Name:   "sliding_log/denied_check_then_clock_back",
			Policy: static.Policy{Algorithm: static.SlidingLog, Limit: 2, Window: second},
			Limit:  2,
			Steps: []Step{
				allow(0, 1, 1, 1000*ms),
				allow(600, 1, 0, 1000*ms),
				deny(1000, 2, 1, 600*ms, 600*ms),
				deny(800, 1, 0, 800*ms, 200*ms),
				allow(1000, 1, 0, 1000*ms),
			},
		},
		{
			// The fastest rate that validates: one per microsecond.
			Name:   "gcra/one_per_microsecond",
			Policy: static.Policy{Algorithm: static.GCRA, Limit: 1_000_000, Window: second, Burst: 2},
			Limit:  3,
			Steps: []Step{
				allow(0, 1, 2, 0), allow(0, 1, 1, 0), allow(0, 1, 0, 0), deny(0, 1, 0, 0, 0),
				allow(1, 1, 2, 0),
			},
		},
		{
			Name:   "leaky_bucket/one_per_microsecond",
			Policy: static.Policy{Algorithm: static.LeakyBucket, Limit: 1_000_000, Window: second, Burst: 2, NoDelay: true},
			Limit:  3,
			Steps: []Step{
				allow(0, 1, 2, 0), allow(0, 1, 1, 0), allow(0, 1, 0, 0), deny(0, 1, 0, 0, 0),
				allow(1, 1, 2, 0),
			},
		},
		{
			Name:   "token_bucket/burst_defaults_to_limit",
			Policy: static.Policy{Algorithm: static.TokenBucket, Limit: 2, Window: second},
			Limit:  2,
			Steps: []Step{
				allow(0, 1, 1, 500*ms),
				allow(0, 1, 0, 1000*ms),
				deny(0, 1, 0, 1000*ms, 500*ms),
				deny(-100, 1, 0, 1000*ms, 500*ms), // time went back: read as 0
				allow(500, 1, 0, 1000*ms),
			},
		},
		{
			Name:   "token_bucket/warmup",
			Policy: static.Policy{Algorithm: static.TokenBucket, Limit: 10, Window: second, Warmup: second},
			Limit:  10,
			Steps: []Step{
				// Cold: Guava's SmoothWarmingUp stores warmup/interval = 10
				// permits and spends the first 1 s ramping from 300 ms to
				// 100 ms between requests.
				allow(0, 1, 0, 380*ms),
				deny(0, 1, 0, 380*ms, 280*ms),
				allow(280, 1, 0, 440*ms),
				allow(520, 1, 0, 500*ms),
				allow(720, 1, 0, 560*ms),
				allow(880, 1, 0, 620*ms),
				// Warm: the stable interval.
				allow(1000, 1, 0, 700*ms),
				deny(1050, 1, 0, 650*ms, 50*ms),
				allow(1100, 1, 0, 800*ms),
			},
		},
		{
			// redis-cell's own test table: CL.THROTTLE foo 4 1 1 <cost>.
			Name:   "gcra/redis_cell",
			Policy: static.Policy{Algorithm: static.GCRA, Limit: 1, Window: second, Burst: 4},
			Limit:  5,
			Steps: []Step{
				deny(0, 6, 5, 0, never),
				allow(0, 1, 4, 1000*ms),
				allow(0, 1, 3, 2000*ms),
				allow(0, 1, 2, 3000*ms),
				allow(0, 1, 1, 4000*ms),
				allow(0, 1, 0, 5000*ms),
				deny(0, 1, 0, 5000*ms, 1000*ms),
				allow(3000, 1, 2, 3000*ms),
				allow(3100, 1, 1, 3900*ms),
				allow(4000, 1, 1, 4000*ms),
				allow(8000, 1, 4, 1000*ms),
				allow(9500, 1, 4, 1000*ms),
				allow(9500, 0, 4, 1000*ms),
				allow(9500, 2, 2, 3000*ms),
				deny(9500, 5, 2, 3000*ms, 3000*ms),
			},
		},
		{
			Name:   "leaky_bucket/delays",
			Policy: static.Policy{Algorithm: static.LeakyBucket, Limit: 10, Window: second, Burst: 2},
			Limit:  3,
			Steps: []Step{
				allow(0, 1, 2, 100*ms),
				delayed(0, 1, 1, 200*ms, 100*ms),
				delayed(0, 1, 0, 300*ms, 200*ms),
				deny(0, 1, 0, 300*ms, 100*ms),
				delayed(100, 1, 0, 300*ms, 200*ms),
				deny(100, 4, 0, 300*ms, never),
				allow(1000, 1, 2, 100*ms),
				delayed(1000, 2, 0, 300*ms, 100*ms),
			},
		},
		{
			Name:   "leaky_bucket/nodelay",
			Policy: static.Policy{Algorithm: static.LeakyBucket, Limit: 10, Window: second, Burst: 2, NoDelay: true},
			Limit:  3,
			Steps: []Step{
				allow(0, 1, 2, 100*ms),
				allow(0, 1, 1, 200*ms),
				allow(0, 1, 0, 300*ms),
				deny(0, 1, 0, 300*ms, 100*ms),
				allow(100, 1, 0, 300*ms),
			},
		},
		{
			Name:   "semaphore/no_wait",
			Policy: static.Policy{Algorithm: static.Semaphore, Limit: 2, Window: second},
			Limit:  2,
			Steps: []Step{
				allow(0, 1, 1, 1000*ms),
				allow(100, 1, 0, 900*ms),
				deny(200, 1, 0, 800*ms, 800*ms),
				allow(1000, 1, 1, 1000*ms),
				deny(1000, 3, 1, 1000*ms, never),
			},
		},
		{
			Name:   "semaphore/timeout_reserves_next_period",
			Policy: static.Policy{Algorithm: static.Semaphore, Limit: 2, Window: second, Timeout: 500 * ms},
			Limit:  2,
			Steps: []Step{
				allow(0, 1, 1, 1000*ms),
				allow(0, 1, 0, 1000*ms),
				deny(400, 1, 0, 600*ms, 600*ms),
				delayed(600, 1, 0, 1400*ms, 400*ms),
				delayed(600, 1, 0, 1400*ms, 400*ms),
				deny(600, 1, 0, 1400*ms, 1400*ms),
				// The next period opens with both its permits reserved.
				deny(1000, 1, 0, 1000*ms, 1000*ms),
				delayed(1600, 1, 0, 1400*ms, 400*ms),
			},
		},
	}
}
