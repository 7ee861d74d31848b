package throttle

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// BudgetConfig configures a RetryBudget. The zero value allows retries of
// 10% of first tries, plus 10 a second, counted over the last 10 s (the
// defaults of Finagle's and Linkerd's retry budgets).
type BudgetConfig struct {
	// Ratio is the share of first tries that may be retried; default 0.1.
	Ratio float64
	// MinPerSecond is what may be retried whatever the traffic, so that
	// a client that sends little can still retry; default 10, and a
	// negative value allows none.
	MinPerSecond float64
	// TTL is how long a first try counts toward the budget; default 10 s.
	TTL time.Duration
	// Clock tells time; default sluice's system clock.
	Clock sluice.Clock
}

// RetryBudget bounds retries to a share of first tries. It is safe for
// concurrent use.
type RetryBudget struct {
	ratio, reserve float64 // reserve: MinPerSecond x TTL
	clock          sluice.Clock

	mu     sync.Mutex
	counts ring // first tries, retries
}

// NewRetryBudget returns a RetryBudget.
func NewRetryBudget(cfg BudgetConfig) *RetryBudget {
	if cfg.Ratio <= 0 {
		cfg.Ratio = 0.1
	}
	if cfg.MinPerSecond < 0 {
		cfg.MinPerSecond = 0
	} else if cfg.MinPerSecond == 0 {
		cfg.MinPerSecond = 10
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = sluice.NewSystemClock()
	}
	return &RetryBudget{ratio: cfg.Ratio, reserve: cfg.MinPerSecond * cfg.TTL.Seconds(), clock: cfg.Clock,
		counts: newRing(cfg.TTL)}
}

// Deposit records a first try: it earns Ratio of a retry.
func (b *RetryBudget) Deposit() {
	now := sluice.UnixNano(b.clock)
	b.mu.Lock()
	b.counts.add(now, 0, 1)
	b.mu.Unlock()
}

// TryWithdraw reports whether a retry may go, and if so counts it: retries
// in the last TTL stay within Ratio of the first tries plus MinPerSecond x
// TTL.
func (b *RetryBudget) TryWithdraw() bool {
	now := sluice.UnixNano(b.clock)
	b.mu.Lock()
	defer b.mu.Unlock()
	tries, retries := b.counts.sums(now)
	if retries+1 > b.reserve+b.ratio*tries {
		return false
	}
	b.counts.add(now, 1, 1)
	return true
}
