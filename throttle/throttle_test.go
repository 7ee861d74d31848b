package throttle_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/throttle"
)

// seq returns a Rand that walks [0, 1) evenly, so that a probability p
// refuses a share p of calls exactly over many calls.
func seq() func() float64 {
	i := 0
	return func() float64 {
		i++
		return math.Mod(float64(i)*0.618033988749895, 1)
	}
}

// TestThrottleFollowsTheAcceptRate: while the service accepts everything
// nothing is refused locally; when it accepts a tenth, the client refuses
// nearly everything locally, still sending a few, and stops refusing once
// the window has slid past the overload.
func TestThrottleFollowsTheAcceptRate(t *testing.T) {
	clock := sluice.NewFakeClock(time.Unix(1_700_000_000, 0))
	th := throttle.New(throttle.Config{Clock: clock, Rand: seq()})
	for range 1000 {
		if !th.Allow() {
			t.Fatal("refused while the service accepts everything")
		}
		th.Accepted()
		clock.Advance(10 * time.Millisecond)
	}
	if p := th.Probability(); p != 0 {
		t.Fatalf("probability %v with every request accepted", p)
	}
	// Two minutes later the service accepts one request in ten.
	clock.Advance(2 * time.Minute)
	sent := 0
	for i := range 10000 {
		if th.Allow() {
			sent++
			if sent%10 == 0 {
				th.Accepted()
			}
		}
		if i%100 == 0 {
			clock.Advance(time.Second)
		}
	}
	// A tenth accepted is below 1/K: the throttle refuses nearly all
	// locally (p = 1 - 2 x accepts / requests climbs toward 1), but keeps
	// sending a few, which is how it notices a recovery.
	if sent < 5 || sent > 1000 {
		t.Errorf("sent %d of 10000 requests to a service accepting a tenth, want a few (5-1000)", sent)
	}
	// The service recovers: two minutes on, nothing is refused.
	clock.Advance(2*time.Minute + time.Second)
	for range 100 {
		if !th.Allow() {
			t.Fatal("refused after the window slid past the overload")
		}
		th.Accepted()
	}
}

// TestThrottleK: a higher K tolerates more refusals before refusing.
func TestThrottleK(t *testing.T) {
	clock := sluice.NewFakeClock(time.Unix(1_700_000_000, 0))
	for _, c := range []struct {
		k      float64
		refuse bool
	}{{2, false}, {1.5, true}} {
		th := throttle.New(throttle.Config{K: c.k, Clock: clock, Rand: seq()})
		for i := range 1000 { // the service accepts 60%
			th.Allow()
			if i%5 < 3 {
				th.Accepted()
			}
		}
		if p := th.Probability(); (p > 0) != c.refuse {
			t.Errorf("K %v at 60%% accepted: probability %v, want refusing %v", c.k, p, c.refuse)
		}
	}
}

// TestRetryBudget: retries stay within Ratio of first tries plus the
// reserve, over the TTL, and come back as it slides.
func TestRetryBudget(t *testing.T) {
	clock := sluice.NewFakeClock(time.Unix(1_700_000_000, 0))
	b := throttle.NewRetryBudget(throttle.BudgetConfig{Ratio: 0.2, MinPerSecond: -1, TTL: 10 * time.Second, Clock: clock})
	for range 100 {
		b.Deposit()
	}
	retries := 0
	for b.TryWithdraw() {
		retries++
		if retries > 1000 {
			t.Fatal("the budget never ran out")
		}
	}
	if retries != 20 {
		t.Fatalf("%d retries for 100 first tries at 20%%, want 20", retries)
	}
	clock.Advance(11 * time.Second)
	if b.TryWithdraw() {
		t.Error("a retry without first tries in the last TTL and no reserve")
	}
	r := throttle.NewRetryBudget(throttle.BudgetConfig{Clock: clock}) // defaults: 10% + 10/s over 10 s
	n := 0
	for r.TryWithdraw() {
		n++
		if n > 1000 {
			t.Fatal("the reserve never ran out")
		}
	}
	if n != 100 {
		t.Errorf("the default reserve allowed %d retries with no traffic, want 10/s x 10 s = 100", n)
	}
}
