package static

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestPolicyValidate(t *testing.T) {
	w := time.Second
	cases := []struct {
		p       Policy
		wantErr string // a substring naming the field; "" for valid
	}{
		{Policy{Algorithm: FixedWindow, Limit: 10, Window: w}, ""},
		{Policy{Algorithm: Concurrency, Limit: 10, Timeout: w}, ""},
		{Policy{Algorithm: TokenBucket, Limit: 10, Window: w, Warmup: w}, ""},
		{Policy{Algorithm: LeakyBucket, Limit: 0, Window: w, Burst: 5}, ""},
		{Policy{}, "algorithm"},
		{Policy{Algorithm: FixedWindow, Limit: -1, Window: w}, "limit"},
		{Policy{Algorithm: FixedWindow, Limit: 1}, "window"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Window: MaxWindow + 1}, "window"},
		{Policy{Algorithm: Concurrency, Limit: 1, Window: w}, "window"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Window: w, Burst: 2}, "burst"},
		{Policy{Algorithm: GCRA, Limit: 1, Window: w, Warmup: w}, "warmup"},
		{Policy{Algorithm: TokenBucket, Limit: 1, Window: w, Warmup: w, Burst: 3}, "burst"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Window: w, NoDelay: true}, "nodelay"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Window: w, MinInterval: w}, "min_interval"},
		{Policy{Algorithm: SlidingWindow, Limit: 1, Window: w, CountBlocked: true}, "count_blocked"},
		{Policy{Algorithm: GCRA, Limit: 1, Window: w, Timeout: w}, "timeout"},
		{Policy{Algorithm: SlidingLog, Limit: MaxSlidingLogLimit + 1, Window: w}, "limit"},
		{Policy{Algorithm: GCRA, Limit: 2_000_000_000, Window: w}, "limit"},
		{Policy{Algorithm: TokenBucket, Limit: 1, Window: MaxWindow, Burst: MaxLimit}, "burst"},
		{Policy{Algorithm: Semaphore, Limit: 1, Window: w, Timeout: -w}, "timeout"},
		// Finer than a microsecond: Redis could not give the same answers.
		{Policy{Algorithm: GCRA, Limit: 1_000_000, Window: time.Second}, ""},
		{Policy{Algorithm: GCRA, Limit: 2_000_000, Window: time.Second}, "limit"},
		{Policy{Algorithm: LeakyBucket, Limit: 2_000_000, Window: time.Second}, "limit"},
		{Policy{Algorithm: TokenBucket, Limit: 2_000_000, Window: time.Second}, "limit"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Window: 1500 * time.Nanosecond}, "window"},
		{Policy{Algorithm: SlidingLog, Limit: 1, Window: w, MinInterval: time.Nanosecond}, "min_interval"},
		{Policy{Algorithm: Concurrency, Limit: 1, Timeout: time.Nanosecond}, "timeout"},
	}
	for _, c := range cases {
		err := c.p.Validate()
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", c.p, err)
		case c.wantErr != "" && err == nil:
			t.Errorf("%+v: no error, want one about %s", c.p, c.wantErr)
		case c.wantErr != "" && !strings.HasPrefix(err.Error(), c.wantErr):
			t.Errorf("%+v: error %q does not start with the field %q", c.p, err, c.wantErr)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for a := FixedWindow; a <= Concurrency; a++ {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAlgorithm("unknown"); err == nil {
		t.Error("ParseAlgorithm(unknown) succeeded")
	}
}

// FuzzAlgorithms drives every algorithm with arbitrary policies and request
// sequences, committing as a store would, and checks what must always hold:
// no panic, sane decisions, and never more admitted than the algorithm
// allows over any span of time.
func FuzzAlgorithms(f *testing.F) {
	f.Add([]byte{1, 3, 10, 0, 0, 5, 1, 5, 1, 200, 1, 0, 2})
	f.Add([]byte{3, 3, 10, 0, 1, 0, 1, 0, 1, 0, 1, 50, 1, 255, 3})
	f.Add([]byte{4, 5, 20, 3, 0, 0, 2, 0, 2, 9, 1, 0, 7})
	f.Add([]byte{5, 2, 10, 2, 1, 0, 1, 0, 1, 0, 1, 0, 1})
	f.Add([]byte{6, 1, 10, 4, 0, 0, 1, 0, 1, 0, 6, 0, 1})
	f.Add([]byte{7, 2, 10, 0, 2, 0, 1, 0, 1, 99, 1, 0, 1})
	f.Add([]byte{4, 10, 10, 0, 3, 0, 1, 0, 1, 30, 1, 10, 1})
	f.Add([]byte{2, 4, 10, 0, 0, 0, 4, 90, 1, 5, 2, 0, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 5 {
			return
		}
		p := Policy{
			Algorithm: Algorithm(1 + int(data[0])%7), // all but Concurrency, whose bound is tested elsewhere
			Limit:     int64(data[1] % 12),
			Window:    time.Duration(1+int(data[2])) * 10 * time.Millisecond,
		}
		flags := data[4]
		switch p.Algorithm {
		case TokenBucket:
			if flags&1 != 0 && p.Limit > 0 {
				p.Warmup = time.Duration(1+data[3]%8) * p.Window
			} else {
				p.Burst = int64(data[3] % 8)
			}
		case LeakyBucket:
			p.Burst = int64(data[3] % 8)
			p.NoDelay = flags&1 != 0
		case GCRA:
			p.Burst = int64(data[3] % 8)
		case SlidingLog:
			p.CountBlocked = flags&1 != 0
			if flags&2 != 0 {
				p.MinInterval = time.Duration(data[3]) * time.Millisecond
			}
		case Semaphore:
			p.Timeout = time.Duration(data[3]) * 5 * time.Millisecond
		}
		if err := p.Validate(); err != nil {
			return
		}
		type admit struct{ at, cost int64 }
		var admitted []admit
		var st KeyState
		now := int64(1_699_920_000) * 1e9
		capacity := p.capacity()
		// dirty is a Step reused across checks, as stores reuse theirs:
		// evaluating into it must decide as into a fresh one.
		dirty := Step{Record: 9, CommitOnDeny: true, Until: -1,
			Decision: sluice.Decision{Allowed: true, RuleID: "stale", Delay: 7, Reason: sluice.ReasonConcurrency}}
		for i := 5; i+1 < len(data); i += 2 {
			dt := int64(data[i]) * int64(time.Millisecond)
			if data[i] == 255 {
				dt = -50 * int64(time.Millisecond) // the clock steps back
			}
			now += dt
			cost := int64(data[i+1] % 5)
			s := p.Evaluate(st, now, cost)
			d := s.Decision
			dirty.Decision.RuleID = "stale"
			p.evaluate(&dirty, &st, now, cost, 0)
			if !reflect.DeepEqual(dirty, s) {
				t.Fatalf("step %d: into a reused step %+v, into a fresh one %+v", i, dirty, s)
			}
			at := max(now, st.Last)
			switch {
			case d.Remaining < 0, d.ResetAfter < 0, d.Delay < 0:
				t.Fatalf("step %d: negative field in %+v", i, d)
			case d.Allowed && (d.RetryAfter != 0 || d.Reason != sluice.ReasonNone):
				t.Fatalf("step %d: allowed with retry %v reason %v", i, d.RetryAfter, d.Reason)
			case !d.Allowed && d.RetryAfter <= 0 && d.RetryAfter != sluice.Never:
				t.Fatalf("step %d: denied with retry-after %v", i, d.RetryAfter)
			case !d.Allowed && d.RetryAfter == sluice.Never && cost <= capacity && p.Limit > 0:
				t.Fatalf("step %d: cost %d <= capacity %d denied forever", i, cost, capacity)
			case p.Warmup == 0 && d.Remaining > capacity:
				t.Fatalf("step %d: remaining %d above capacity %d", i, d.Remaining, capacity)
			case s.Next.Last != at:
				t.Fatalf("step %d: state time %d, want %d", i, s.Next.Last, at)
			}
			if d.Allowed || s.CommitOnDeny {
				p.Commit(&st, &s)
			}
			if d.Allowed && cost > 0 {
				admitted = append(admitted, admit{at + int64(d.Delay), cost})
			}
		}
		// Admission bounds over every span that starts at an admission.
		w := int64(p.Window)
		for i := range admitted {
			var sum int64
			for j := i; j < len(admitted); j++ {
				sum += admitted[j].cost
				span := admitted[j].at - admitted[i].at
				var bound int64
				switch p.Algorithm {
				case FixedWindow, Semaphore:
					if windowStart(admitted[i].at, w) != windowStart(admitted[j].at, w) {
						continue
					}
					bound = p.Limit
				case SlidingLog:
					if span >= w {
						continue
					}
					bound = p.Limit
				case SlidingWindow:
					// The counter allows at most the limit within one aligned
					// window, and 2x the limit across a boundary.
					if span >= w {
						continue
					}
					bound = 2 * p.Limit
				case TokenBucket, GCRA, LeakyBucket:
					if p.Warmup > 0 {
						continue // Guava pays later: bounded by the next test
					}
					bound = capacity + span/p.interval() + 1
				}
				if sum > bound {
					t.Fatalf("%v: admitted %d over %v, bound %d (%+v)", p.Algorithm, sum, time.Duration(span), bound, admitted)
				}
			}
		}
	})
}
