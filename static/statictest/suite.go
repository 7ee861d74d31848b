package statictest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
)

// NewStore returns an empty store that reads clock for the time. Anything it
// starts must be stopped through t.Cleanup.
type NewStore func(t *testing.T, clock sluice.Clock) static.Store

// Run runs the whole conformance suite against the stores newStore makes.
func Run(t *testing.T, newStore NewStore) {
	t.Run("tables", func(t *testing.T) {
		for _, c := range Cases() {
			t.Run(c.Name, func(t *testing.T) { RunCase(t, newStore, c) })
		}
	})
	t.Run("all_or_nothing", func(t *testing.T) { allOrNothing(t, newStore) })
	t.Run("count_blocked_counts_when_another_rule_denies", func(t *testing.T) { countBlockedAcrossRules(t, newStore) })
	t.Run("shadow", func(t *testing.T) { shadow(t, newStore) })
	t.Run("tightest_rule_reported", func(t *testing.T) { tightest(t, newStore) })
	t.Run("concurrency_permits", func(t *testing.T) { concurrencyPermits(t, newStore) })
	t.Run("undo", func(t *testing.T) { undo(t, newStore) })
	t.Run("charge", func(t *testing.T) { charge(t, newStore) })
	t.Run("dry_run_takes_nothing", func(t *testing.T) { dryRun(t, newStore) })
	t.Run("policy_change", func(t *testing.T) { policyChange(t, newStore) })
	t.Run("reserve_takes_in_advance", func(t *testing.T) { reserve(t, newStore) })
}

// RunCase runs one table on a fresh store.
func RunCase(t *testing.T, newStore NewStore, c Case) {
	clock := sluice.NewFakeClock(Start)
	s := newStore(t, clock)
	pol := c.Policy
	if err := pol.Validate(); err != nil {
		t.Fatalf("policy: %v", err)
	}
	for i, st := range c.Steps {
		clock.Set(Start.Add(st.At))
		lim := []static.Limit{{RuleID: "r", Key: "case:" + c.Name, Policy: &pol, Cost: st.Cost}}
		res, err := s.Check(context.Background(), lim, nil)
		if err != nil {
			t.Fatalf("step %d (at %v, cost %d): %v", i, st.At, st.Cost, err)
		}
		want := sluice.Decision{
			Allowed: st.Allowed, RuleID: "r", Limit: c.Limit, Remaining: st.Remaining,
			ResetAfter: st.ResetAfter, RetryAfter: st.RetryAfter, Delay: st.Delay,
		}
		if msg := diff(res.Decision, want); msg != "" {
			t.Errorf("step %d (at %v, cost %d): %s", i, st.At, st.Cost, msg)
		}
		if res.Allowed {
			res.Permit.Release(sluice.Success)
		}
	}
}

// diff describes how got differs from want, durations within Tolerance.
func diff(got, want sluice.Decision) string {
	near := func(a, b time.Duration) bool {
		if (a < 0) != (b < 0) {
			return false
		}
		return a-b < Tolerance && b-a < Tolerance
	}
	if got.Allowed != want.Allowed || got.RuleID != want.RuleID || got.Limit != want.Limit ||
		got.Remaining != want.Remaining || !near(got.ResetAfter, want.ResetAfter) ||
		!near(got.RetryAfter, want.RetryAfter) || !near(got.Delay, want.Delay) {
		return fmt.Sprintf("got %s\n\t\twant %s", format(got), format(want))
	}
	if want.Allowed != (got.Reason == sluice.ReasonNone) {
		return fmt.Sprintf("reason %v does not fit allowed=%v", got.Reason, got.Allowed)
	}
	return ""
}

func format(d sluice.Decision) string {
	return fmt.Sprintf("{allowed:%v rule:%q limit:%d remaining:%d reset:%v retry:%v delay:%v}",
		d.Allowed, d.RuleID, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay)
}

func check(t *testing.T, s static.Store, limits []static.Limit, each []sluice.Decision) static.Result {
	t.Helper()
	res, err := s.Check(context.Background(), limits, each)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	return res
}

// remaining peeks (cost 0) at one limit's remaining quota.
func remaining(t *testing.T, s static.Store, l static.Limit) int64 {
	t.Helper()
	l.Cost = 0
	l.Shadow = false
	return check(t, s, []static.Limit{l}, nil).Remaining
}

func fixed(limit int64) *static.Policy {
	return &static.Policy{Algorithm: static.FixedWindow, Limit: limit, Window: time.Minute}
}

func allOrNothing(t *testing.T, newStore NewStore) {
	s := newStore(t, sluice.NewFakeClock(Start))
	a := static.Limit{RuleID: "a", Key: "aon:a", Policy: fixed(5), Cost: 1}
	b := static.Limit{RuleID: "b", Key: "aon:b", Policy: fixed(1), Cost: 1}
	c := static.Limit{RuleID: "c", Key: "aon:c", Policy: &static.Policy{Algorithm: static.TokenBucket, Limit: 5, Window: time.Minute}, Cost: 1}
	if res := check(t, s, []static.Limit{a, b, c}, nil); !res.Allowed {
		t.Fatalf("first request denied: %+v", res.Decision)
	}
	each := make([]sluice.Decision, 3)
	res := check(t, s, []static.Limit{a, b, c}, each)
	if res.Allowed || res.RuleID != "b" || res.Reason != sluice.ReasonQuota || res.Index != 1 {
		t.Fatalf("second request: got %+v (index %d), want denied by b (index 1)", res.Decision, res.Index)
	}
	if !each[0].Allowed || each[1].Allowed || !each[2].Allowed {
		t.Fatalf("per-limit decisions: %+v", each)
	}
	if got := remaining(t, s, a); got != 4 {
		t.Errorf("a consumed by a denied request: remaining %d, want 4", got)
	}
	if got := remaining(t, s, c); got != 4 {
		t.Errorf("c consumed by a denied request: remaining %d, want 4", got)
	}
	// Two denials: the retry is the later of the two.
	z := static.Limit{RuleID: "z", Key: "aon:z", Policy: fixed(0), Cost: 1}
	res = check(t, s, []static.Limit{a, b, z}, nil)
	if res.Allowed || res.RuleID != "b" || res.RetryAfter != sluice.Never {
		t.Errorf("two denials: got %+v, want rule b, retry never", res.Decision)
	}
}

func countBlockedAcrossRules(t *testing.T, newStore NewStore) {
	s := newStore(t, sluice.NewFakeClock(Start))
	lg := static.Limit{RuleID: "log", Key: "cb:log", Policy: &static.Policy{
		Algorithm: static.SlidingLog, Limit: 3, Window: time.Minute, CountBlocked: true}, Cost: 1}
	plain := static.Limit{RuleID: "plain", Key: "cb:plain", Policy: &static.Policy{
		Algorithm: static.SlidingLog, Limit: 3, Window: time.Minute}, Cost: 1}
	shut := static.Limit{RuleID: "shut", Key: "cb:shut", Policy: fixed(0), Cost: 1}
	for i := 0; i < 2; i++ {
		if res := check(t, s, []static.Limit{lg, plain, shut}, nil); res.Allowed {
			t.Fatal("request allowed past a zero limit")
		}
	}
	if got := remaining(t, s, lg); got != 1 {
		t.Errorf("count_blocked log: remaining %d, want 1 (two blocked attempts recorded)", got)
	}
	if got := remaining(t, s, plain); got != 3 {
		t.Errorf("plain log: remaining %d, want 3 (nothing consumed)", got)
	}
}

func shadow(t *testing.T, newStore NewStore) {
	s := newStore(t, sluice.NewFakeClock(Start))
	enforced := static.Limit{RuleID: "enforced", Key: "sh:e", Policy: fixed(10), Cost: 1}
	sh := static.Limit{RuleID: "shadow", Key: "sh:s", Policy: fixed(1), Cost: 1, Shadow: true}
	each := make([]sluice.Decision, 2)
	for i := 0; i < 3; i++ {
		res := check(t, s, []static.Limit{enforced, sh}, each)
		if !res.Allowed {
			t.Fatalf("request %d denied by %q; a shadow rule must never deny", i, res.RuleID)
		}
		if wantShadow := i == 0; each[1].Allowed != wantShadow {
			t.Errorf("request %d: shadow decision allowed=%v, want %v", i, each[1].Allowed, wantShadow)
		}
	}
	if got := remaining(t, s, enforced); got != 7 {
		t.Errorf("enforced remaining %d, want 7", got)
	}
	if got := remaining(t, s, sh); got != 0 {
		t.Errorf("shadow remaining %d, want 0", got)
	}
	// A request with only shadow limits is admitted and reports them.
	res := check(t, s, []static.Limit{sh}, nil)
	if !res.Allowed || res.RuleID != "shadow" {
		t.Errorf("shadow-only request: %+v", res.Decision)
	}
}

func tightest(t *testing.T, newStore NewStore) {
	s := newStore(t, sluice.NewFakeClock(Start))
	loose := static.Limit{RuleID: "loose", Key: "tt:l", Policy: fixed(100), Cost: 1}
	tight := static.Limit{RuleID: "tight", Key: "tt:t", Policy: fixed(3), Cost: 1}
	res := check(t, s, []static.Limit{loose, tight}, nil)
	if !res.Allowed || res.RuleID != "tight" || res.Remaining != 2 || res.Limit != 3 || res.Index != 1 {
		t.Errorf("got %+v (index %d), want the tight rule (index 1) with 2 remaining", res.Decision, res.Index)
	}
}

func concurrencyPermits(t *testing.T, newStore NewStore) {
	s := newStore(t, sluice.NewFakeClock(Start))
	l := []static.Limit{{RuleID: "bulkhead", Key: "cc:k", Policy: &static.Policy{Algorithm: static.Concurrency, Limit: 2}, Cost: 1}}
	p1 := check(t, s, l, nil)
	p2 := check(t, s, l, nil)
	if !p1.Allowed || !p2.Allowed || p2.Remaining != 0 {
		t.Fatalf("first two: %+v, %+v", p1.Decision, p2.Decision)
	}
	res := check(t, s, l, nil)
	if res.Allowed || res.Reason != sluice.ReasonConcurrency {
		t.Fatalf("third in flight: got %+v, want denied for concurrency", res.Decision)
	}
	p1.Permit.Release(sluice.Success)
	p3 := check(t, s, l, nil)
	if !p3.Allowed {
		t.Fatalf("after a release: %+v", p3.Decision)
	}
	// A second release of the same permit frees nothing.
	p1.Permit.Release(sluice.Success)
	if res := check(t, s, l, nil); res.Allowed {
		t.Fatal("a double release freed a slot")
	}
	p2.Permit.Release(sluice.Dropped)
	p3.Permit.Release(sluice.Ignore)
	if got := remaining(t, s, l[0]); got != 2 {
		t.Errorf("after all released: remaining %d, want 2", got)
	}
}

func undo(t *testing.T, newStore NewStore) {
	clock := sluice.NewFakeClock(Start)
	s := newStore(t, clock)
	for _, p := range []static.Policy{
		{Algorithm: static.FixedWindow, Limit: 3, Window: time.Minute},
		{Algorithm: static.SlidingWindow, Limit: 3, Window: time.Minute},
		{Algorithm: static.SlidingLog, Limit: 3, Window: time.Minute},
		{Algorithm: static.TokenBucket, Limit: 3, Window: time.Minute},
		{Algorithm: static.GCRA, Limit: 3, Window: time.Minute, Burst: 2},
		{Algorithm: static.LeakyBucket, Limit: 3, Window: time.Minute, Burst: 2},
		{Algorithm: static.Semaphore, Limit: 3, Window: time.Minute},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			l := []static.Limit{{RuleID: "u", Key: "undo:" + p.Algorithm.String(), Policy: &p, Cost: 1}}
			before := remaining(t, s, l[0])
			res := check(t, s, l, nil)
			if !res.Allowed {
				t.Fatalf("denied: %+v", res.Decision)
			}
			if err := s.Undo(context.Background(), l, res); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, s, l[0]); got != before {
				t.Errorf("after undo: remaining %d, want %d", got, before)
			}
		})
	}
}

// charge: a cost learned after admission is added past the limit, never
// refused, and the key denies until it recovers; a negative one gives back
// what the check took; concurrency limits are not charged.
func charge(t *testing.T, newStore NewStore) {
	clock := sluice.NewFakeClock(Start)
	s := newStore(t, clock)
	ctx := context.Background()
	for _, p := range []static.Policy{
		{Algorithm: static.FixedWindow, Limit: 10, Window: time.Minute},
		{Algorithm: static.SlidingWindow, Limit: 10, Window: time.Minute},
		{Algorithm: static.SlidingLog, Limit: 10, Window: time.Minute},
		{Algorithm: static.TokenBucket, Limit: 10, Window: time.Minute},
		{Algorithm: static.GCRA, Limit: 10, Window: time.Minute, Burst: 9},
		{Algorithm: static.LeakyBucket, Limit: 10, Window: time.Minute, Burst: 9, NoDelay: true},
		{Algorithm: static.Semaphore, Limit: 10, Window: time.Minute},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			l := static.Limit{RuleID: "c", Key: "charge:" + p.Algorithm.String(), Policy: &p, Cost: 1}
			res := check(t, s, []static.Limit{l}, nil)
			if !res.Allowed {
				t.Fatalf("denied: %+v", res.Decision)
			}
			before := remaining(t, s, l)
			more := l
			more.Cost = 4
			if err := s.Charge(ctx, []static.Limit{more}, res.At); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, s, l); got != before-4 {
				t.Errorf("after a charge of 4: remaining %d, want %d", got, before-4)
			}
			back := l
			back.Cost = -1
			if err := s.Charge(ctx, []static.Limit{back}, res.At); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, s, l); got != before-3 {
				t.Errorf("after giving 1 back: remaining %d, want %d", got, before-3)
			}
			more.Cost = 50 // far past the limit: recorded, not refused
			if err := s.Charge(ctx, []static.Limit{more}, res.At); err != nil {
				t.Fatal(err)
			}
			if got := check(t, s, []static.Limit{l}, nil); got.Allowed {
				t.Errorf("a key charged past its limit admits: %+v", got.Decision)
			}
			// The key recovers: a window later (two for the sliding
			// window, six for the buckets' debt of 5 windows' tokens).
			clock.Advance(7 * time.Minute)
			if got := check(t, s, []static.Limit{l}, nil); !got.Allowed {
				t.Errorf("still denied 7 windows later: %+v", got.Decision)
			}
		})
	}
	t.Run("concurrency_ignored", func(t *testing.T) {
		p := static.Policy{Algorithm: static.Concurrency, Limit: 1}
		l := static.Limit{RuleID: "c", Key: "charge:concurrency", Policy: &p, Cost: 5}
		if err := s.Charge(ctx, []static.Limit{l}, clock.Now()); err != nil {
			t.Fatal(err)
		}
		l.Cost = 1
		res := check(t, s, []static.Limit{l}, nil)
		if !res.Allowed {
			t.Fatalf("a concurrency limit was charged: %+v", res.Decision)
		}
		res.Permit.Release(sluice.Success)
	})
}

func policyChange(t *testing.T, newStore NewStore) {
	s := newStore(t, sluice.NewFakeClock(Start))
	l := static.Limit{RuleID: "p", Key: "pc:k", Policy: fixed(2), Cost: 1}
	check(t, s, []static.Limit{l}, nil)
	check(t, s, []static.Limit{l}, nil)
	// The same policy in a new value (a reload that did not change the rule)
	// keeps its counters.
	l.Policy = fixed(2)
	if res := check(t, s, []static.Limit{l}, nil); res.Allowed {
		t.Error("an unchanged rule lost its counters")
	}
	// A new limit applies to the usage so far: raised, it adds room;
	// lowered, it is not a fresh quota.
	l.Policy = fixed(5)
	if got := remaining(t, s, l); got != 3 {
		t.Errorf("a raised limit: remaining %d, want 3", got)
	}
	l.Policy = fixed(1)
	if res := check(t, s, []static.Limit{l}, nil); res.Allowed {
		t.Error("a lowered limit handed out a fresh quota")
	}
	// Any other change starts afresh.
	l.Policy = &static.Policy{Algorithm: static.FixedWindow, Limit: 5, Window: 2 * time.Minute}
	if got := remaining(t, s, l); got != 5 {
		t.Errorf("a changed window: remaining %d, want 5", got)
	}
}

func dryRun(t *testing.T, newStore NewStore) {
	s := newStore(t, sluice.NewFakeClock(Start))
	policies := []*static.Policy{
		fixed(1),
		{Algorithm: static.SlidingLog, Limit: 1, Window: time.Minute},
		{Algorithm: static.GCRA, Limit: 1, Window: time.Minute},
		{Algorithm: static.Concurrency, Limit: 1, Timeout: time.Minute},
	}
	for _, p := range policies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			l := static.Limit{RuleID: "r", Key: "dry:" + p.Algorithm.String(), Policy: p, Cost: 1}
			dry := l
			dry.DryRun = true
			for range 3 {
				if res := check(t, s, []static.Limit{dry}, nil); !res.Allowed {
					t.Fatalf("dry run on a fresh key: %+v", res.Decision)
				}
			}
			real := check(t, s, []static.Limit{l}, nil)
			if !real.Allowed {
				t.Fatalf("after dry runs, the real request was denied: %+v", real.Decision)
			}
			// Used up: a dry run says so, at once, without waiting.
			if res := check(t, s, []static.Limit{dry}, nil); res.Allowed {
				t.Fatalf("dry run on a used-up key: %+v", res.Decision)
			}
			real.Permit.Release(sluice.Ignore)
		})
	}
}

// reserve: a token bucket or GCRA limit with a Reserve admits a request
// over its quota whose turn comes within the Reserve, with the Delay to its
// turn, taking its tokens now (in order: each next one waits one interval
// more); past the Reserve it denies; Undo gives a reservation back; other
// algorithms and shadow limits ignore it.
func reserve(t *testing.T, newStore NewStore) {
	for _, p := range []*static.Policy{
		{Algorithm: static.TokenBucket, Limit: 10, Window: time.Second},
		{Algorithm: static.GCRA, Limit: 10, Window: time.Second, Burst: 9},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			s := newStore(t, sluice.NewFakeClock(Start))
			l := static.Limit{RuleID: "r", Key: "reserve:" + p.Algorithm.String(), Policy: p, Cost: 1, Reserve: 500 * time.Millisecond}
			for i := range 10 {
				if res := check(t, s, []static.Limit{l}, nil); !res.Allowed || res.Delay != 0 {
					t.Fatalf("request %d within the burst: %+v", i, res.Decision)
				}
			}
			var last static.Result
			for i := 1; i <= 5; i++ {
				res := check(t, s, []static.Limit{l}, nil)
				if want := time.Duration(i) * 100 * time.Millisecond; !res.Allowed || res.Delay != want {
					t.Fatalf("reservation %d: %+v, want admitted with delay %v", i, res.Decision, want)
				}
				last = res
			}
			if res := check(t, s, []static.Limit{l}, nil); res.Allowed || res.RetryAfter != 600*time.Millisecond {
				t.Fatalf("past the reserve: %+v, want denied, retry after 600ms (when its turn comes)", res.Decision)
			}
			// The last reservation is given back: the next request takes its turn.
			if err := s.Undo(context.Background(), []static.Limit{l}, last); err != nil {
				t.Fatal(err)
			}
			if res := check(t, s, []static.Limit{l}, nil); !res.Allowed || res.Delay != 500*time.Millisecond {
				t.Fatalf("after giving back a reservation: %+v, want its turn (delay 500ms)", res.Decision)
			}
			shadow := l
			shadow.Key, shadow.Shadow = l.Key+":shadow", true
			for range 11 {
				check(t, s, []static.Limit{shadow}, nil)
			}
			each := make([]sluice.Decision, 1)
			check(t, s, []static.Limit{shadow}, each)
			if each[0].Allowed || each[0].Delay != 0 {
				t.Errorf("a shadow limit reserved: %+v", each[0])
			}
		})
	}
	t.Run("fixed_window_ignores_it", func(t *testing.T) {
		s := newStore(t, sluice.NewFakeClock(Start))
		l := static.Limit{RuleID: "r", Key: "reserve:fixed", Policy: fixed(1), Cost: 1, Reserve: time.Hour}
		check(t, s, []static.Limit{l}, nil)
		if res := check(t, s, []static.Limit{l}, nil); res.Allowed {
			t.Errorf("a fixed window reserved: %+v", res.Decision)
		}
	})
}
