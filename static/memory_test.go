package static_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/statictest"
)

func newMemory(_ *testing.T, clock sluice.Clock) static.Store {
	return static.NewMemory(static.MemoryOptions{Clock: clock})
}

func TestMemoryConformance(t *testing.T) {
	statictest.Run(t, newMemory)
}

// TestMemoryOneLockConformance: a store with every key under one lock (as
// sluice replay makes it) keeps every contract of the sharded one.
func TestMemoryOneLockConformance(t *testing.T) {
	statictest.Run(t, func(_ *testing.T, clock sluice.Clock) static.Store {
		return static.NewMemory(static.MemoryOptions{Clock: clock, OneLock: true})
	})
}

// countingPolicies are the algorithms whose admissions at one instant are
// bounded by a known number, with that number.
func countingPolicies() map[string]struct {
	p    static.Policy
	want int64
} {
	w := time.Minute
	return map[string]struct {
		p    static.Policy
		want int64
	}{
		"fixed_window":   {static.Policy{Algorithm: static.FixedWindow, Limit: 100, Window: w}, 100},
		"sliding_window": {static.Policy{Algorithm: static.SlidingWindow, Limit: 100, Window: w}, 100},
		"sliding_log":    {static.Policy{Algorithm: static.SlidingLog, Limit: 100, Window: w}, 100},
		"token_bucket":   {static.Policy{Algorithm: static.TokenBucket, Limit: 10, Window: w, Burst: 100}, 100},
		"gcra":           {static.Policy{Algorithm: static.GCRA, Limit: 10, Window: w, Burst: 99}, 100},
		"leaky_bucket":   {static.Policy{Algorithm: static.LeakyBucket, Limit: 10, Window: w, Burst: 99, NoDelay: true}, 100},
		"semaphore":      {static.Policy{Algorithm: static.Semaphore, Limit: 100, Window: w}, 100},
		"concurrency":    {static.Policy{Algorithm: static.Concurrency, Limit: 100}, 100},
	}
}

// TestMemoryExactUnderContention hammers one key from many goroutines with
// time standing still: exactly the limit is admitted, never one more.
func TestMemoryExactUnderContention(t *testing.T) {
	for name, tc := range countingPolicies() {
		t.Run(name, func(t *testing.T) {
			s := static.NewMemory(static.MemoryOptions{Clock: sluice.NewFakeClock(statictest.Start)})
			p := tc.p
			// A second rule on another key makes every check lock two shards.
			other := static.Policy{Algorithm: static.FixedWindow, Limit: 1 << 30, Window: time.Minute}
			limits := []static.Limit{
				{RuleID: name, Key: "hot", Policy: &p, Cost: 1},
				{RuleID: "wide", Key: "wide", Policy: &other, Cost: 1},
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 50; i++ {
						res, err := s.Check(context.Background(), limits, nil)
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != tc.want {
				t.Errorf("admitted %d, want exactly %d", got, tc.want)
			}
		})
	}
}

// TestMemoryMaxKeys floods the store with a million distinct keys: it never
// holds more than max_keys, and counts what it evicted.
func TestMemoryMaxKeys(t *testing.T) {
	const maxKeys = 10_000
	const flood = 1_000_000
	clock := sluice.NewFakeClock(statictest.Start)
	s := static.NewMemory(static.MemoryOptions{Clock: clock, MaxKeys: maxKeys})
	p := static.Policy{Algorithm: static.GCRA, Limit: 10, Window: time.Hour}
	limits := []static.Limit{{RuleID: "r", Policy: &p, Cost: 1}}
	peak := 0
	for i := 0; i < flood; i++ {
		limits[0].Key = "flood:" + strconv.Itoa(i)
		if res, _ := s.Check(context.Background(), limits, nil); !res.Allowed {
			t.Fatalf("key %d denied on its first request", i)
		}
		if i%50_000 == 0 {
			peak = max(peak, s.Stats().Keys)
		}
	}
	st := s.Stats()
	peak = max(peak, st.Keys)
	if st.MaxKeys > maxKeys || peak > st.MaxKeys {
		t.Fatalf("held %d keys at peak, cap %d (configured %d)", peak, st.MaxKeys, maxKeys)
	}
	if st.Keys < st.MaxKeys*9/10 {
		t.Errorf("holds only %d keys of %d: the cap is wasted", st.Keys, st.MaxKeys)
	}
	if want := uint64(flood - st.Keys); st.Evictions != want {
		t.Errorf("evictions %d, want %d (every key dropped was still in use)", st.Evictions, want)
	}
	// The most recent key survived; its usage is intact.
	res, _ := s.Check(context.Background(), limits, nil)
	if res.Remaining != 0 {
		t.Errorf("most recent key: remaining %d, want 0 after two requests", res.Remaining)
	}
}

// TestMemoryIdleKeysExpire: a key is dropped once its state is whole again,
// by Sweep or to make room, and that is not counted as an eviction.
func TestMemoryIdleKeysExpire(t *testing.T) {
	clock := sluice.NewFakeClock(statictest.Start)
	s := static.NewMemory(static.MemoryOptions{Clock: clock, MaxKeys: 100})
	p := static.Policy{Algorithm: static.FixedWindow, Limit: 5, Window: time.Second}
	for i := 0; i < 50; i++ {
		l := []static.Limit{{RuleID: "r", Key: "idle:" + strconv.Itoa(i), Policy: &p, Cost: 1}}
		if _, err := s.Check(context.Background(), l, nil); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(999 * time.Millisecond)
	s.Sweep()
	if got := s.Stats().Keys; got != 50 {
		t.Fatalf("keys before their window ended: %d, want 50", got)
	}
	clock.Advance(time.Millisecond) // exactly at reset
	s.Sweep()
	st := s.Stats()
	if st.Keys != 0 || st.Expirations != 50 || st.Evictions != 0 {
		t.Fatalf("after reset: %+v, want 0 keys, 50 expirations, 0 evictions", st)
	}
	// Concurrency keys are kept while permits are out.
	c := static.Policy{Algorithm: static.Concurrency, Limit: 1}
	l := []static.Limit{{RuleID: "c", Key: "held", Policy: &c, Cost: 1}}
	res, _ := s.Check(context.Background(), l, nil)
	clock.Advance(time.Hour)
	s.Sweep()
	if got := s.Stats().Keys; got != 1 {
		t.Fatalf("a key with a permit out was dropped")
	}
	res.Permit.Release(sluice.Success)
	s.Sweep()
	if got := s.Stats().Keys; got != 0 {
		t.Fatalf("keys after release: %d, want 0", got)
	}
}

// TestMemoryConcurrencyWait: a caller waits up to the rule's timeout for a
// slot, is admitted as soon as one frees, and gives up at the timeout or when
// its context ends.
func TestMemoryConcurrencyWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := static.NewMemory(static.MemoryOptions{}) // the system clock is the bubble's fake clock
		p := static.Policy{Algorithm: static.Concurrency, Limit: 1, Timeout: time.Second}
		l := []static.Limit{{RuleID: "c", Key: "k", Policy: &p, Cost: 1}}
		first, _ := s.Check(context.Background(), l, nil)

		start := time.Now()
		go func() {
			time.Sleep(300 * time.Millisecond)
			first.Permit.Release(sluice.Success)
		}()
		second, err := s.Check(context.Background(), l, nil)
		if err != nil || !second.Allowed {
			t.Fatalf("waiter: %+v, %v", second.Decision, err)
		}
		if waited := time.Since(start); waited != 300*time.Millisecond {
			t.Errorf("waiter admitted after %v, want at the release (300ms)", waited)
		}

		start = time.Now()
		third, err := s.Check(context.Background(), l, nil)
		if err != nil || third.Allowed || third.Reason != sluice.ReasonConcurrency {
			t.Fatalf("timed-out waiter: %+v, %v", third.Decision, err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("gave up after %v, want the timeout (1s)", waited)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = s.Check(ctx, l, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("cancelled waiter: err %v, want deadline exceeded", err)
		}
		second.Permit.Release(sluice.Success)
	})
}

// TestHoldGivesBackOnCancel: a semaphore caller admitted with a Delay that
// leaves before the delay ends gets its permit reservation undone.
func TestHoldGivesBackOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := static.NewMemory(static.MemoryOptions{})
		// Start on a period boundary so the reservation's delay is a full period.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		p := static.Policy{Algorithm: static.Semaphore, Limit: 1, Window: time.Second, Timeout: 2 * time.Second}
		l := []static.Limit{{RuleID: "s", Key: "k", Policy: &p, Cost: 1}}
		if res, _ := s.Check(context.Background(), l, nil); !res.Allowed || res.Delay != 0 {
			t.Fatalf("first: %+v", res.Decision)
		}
		res, _ := s.Check(context.Background(), l, nil)
		if !res.Allowed || res.Delay != time.Second {
			t.Fatalf("second: %+v, want admitted with a 1s delay", res.Decision)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := static.Reserved(s, l, res).Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hold: %v", err)
		}
		// The reservation was given back: the next caller waits one period,
		// not two.
		res, _ = s.Check(context.Background(), l, nil)
		if !res.Allowed || res.Delay != 800*time.Millisecond {
			t.Fatalf("after cancel: %+v, want admitted with an 800ms delay", res.Decision)
		}
		start := time.Now()
		if err := static.Reserved(s, l, res).Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if held := time.Since(start); held != 800*time.Millisecond {
			t.Errorf("held %v, want 800ms", held)
		}
	})
}

func TestMemoryManyLimitsPerRequest(t *testing.T) {
	s := static.NewMemory(static.MemoryOptions{Clock: sluice.NewFakeClock(statictest.Start)})
	p := static.Policy{Algorithm: static.FixedWindow, Limit: 1, Window: time.Minute}
	var limits []static.Limit
	for i := 0; i < 20; i++ { // more than the store handles without allocating
		limits = append(limits, static.Limit{RuleID: strconv.Itoa(i), Key: "many:" + strconv.Itoa(i), Policy: &p, Cost: 1})
	}
	each := make([]sluice.Decision, len(limits))
	if res, _ := s.Check(context.Background(), limits, each); !res.Allowed {
		t.Fatalf("first: %+v", res.Decision)
	}
	res, _ := s.Check(context.Background(), limits, each)
	if res.Allowed || res.RuleID != "0" {
		t.Fatalf("second: %+v, want denied by the first rule", res.Decision)
	}
	for i, d := range each {
		if d.Allowed || d.RuleID != strconv.Itoa(i) {
			t.Errorf("limit %d: %+v", i, d)
		}
	}
}

// The cap is exactly what was configured, whatever the shard count.
func TestMemoryMaxKeysExact(t *testing.T) {
	p := static.Policy{Algorithm: static.FixedWindow, Limit: 10, Window: time.Hour}
	for _, c := range []struct {
		maxKeys int
		oneLock bool
	}{{1, false}, {7, false}, {129, false}, {12_345, false}, {1_000_000, false}, {129, true}, {12_345, true}} {
		maxKeys := c.maxKeys
		s := static.NewMemory(static.MemoryOptions{MaxKeys: maxKeys, OneLock: c.oneLock})
		if got := s.Stats().MaxKeys; got != maxKeys {
			t.Errorf("max_keys %d reported as %d", maxKeys, got)
		}
		if maxKeys > 20_000 {
			continue
		}
		limits := []static.Limit{{RuleID: "r", Policy: &p, Cost: 1}}
		for i := range 2 * maxKeys {
			limits[0].Key = "k" + strconv.Itoa(i)
			_, _ = s.Check(context.Background(), limits, nil)
		}
		if got := s.Stats().Keys; got > maxKeys {
			t.Errorf("max_keys %d: holds %d", maxKeys, got)
		}
	}
}

// A flood of one-off identities does not make the store forget a slow
// client that has spent most of its quota: eviction drops what carries the
// least information first.
func TestMemoryFloodKeepsSlowClient(t *testing.T) {
	clock := sluice.NewFakeClock(statictest.Start)
	s := static.NewMemory(static.MemoryOptions{Clock: clock, MaxKeys: 1000})
	p := static.Policy{Algorithm: static.SlidingWindow, Limit: 5, Window: time.Minute}
	slow := []static.Limit{{RuleID: "r", Key: "{user:slow}:r", Policy: &p, Cost: 1}}
	flood := []static.Limit{{RuleID: "r", Policy: &p, Cost: 1}}
	admitted, n := 0, 0
	for range 20 { // one request every 3 s: 60 s, limit 5 a minute
		if res, _ := s.Check(context.Background(), slow, nil); res.Allowed {
			admitted++
		}
		for range 5000 { // 5,000 fresh identities between two of its requests
			flood[0].Key = "{user:f" + strconv.Itoa(n) + "}:r"
			n++
			_, _ = s.Check(context.Background(), flood, nil)
		}
		clock.Advance(3 * time.Second)
	}
	if admitted > 5 {
		t.Errorf("slow client admitted %d times against 5 a minute: the flood made the store forget it", admitted)
	}
	if st := s.Stats(); st.Evictions == 0 {
		t.Error("no evictions counted under the flood")
	}
}

// TestMemoryFloodDoesNotResetASlowClient: a flood of fresh identities, each
// used twice, evicts a slow client's key between its requests; the key's
// usage is remembered, so the client gets its 5 per hour and no more, on a
// first pass over the flood's identities and on a second (issue 25, item
// 13). Keys the flood never touched still start afresh.
func TestMemoryFloodDoesNotResetASlowClient(t *testing.T) {
	const maxKeys = 1000
	clock := sluice.NewFakeClock(statictest.Start)
	s := static.NewMemory(static.MemoryOptions{Clock: clock, MaxKeys: maxKeys})
	ctx := context.Background()
	for _, alg := range []static.Algorithm{static.FixedWindow, static.SlidingWindow, static.TokenBucket, static.GCRA, static.SlidingLog} {
		p := static.Policy{Algorithm: alg, Limit: 5, Window: time.Hour}
		if alg == static.GCRA {
			p.Burst = 5
		}
		check := func(key string) bool {
			res, err := s.Check(ctx, []static.Limit{{RuleID: "r", Key: alg.String() + ":" + key, Policy: &p, Cost: 1}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return res.Allowed
		}
		admitted := 0
		for round := range 24 {
			if check("slow") {
				admitted++
			}
			// 2 x the store's keys, each used twice; the second pass
			// reuses the first's identities.
			for i := range 2 * maxKeys {
				id := "flood:" + strconv.Itoa((round%12)*2*maxKeys+i)
				check(id)
				check(id)
			}
			clock.Advance(time.Second)
		}
		// 5; or 4, as a remembered key's usage counts from its return
		// (later than it was spent: never more quota, maybe less).
		if admitted > 5 || admitted < 4 {
			t.Errorf("%s: the slow client was admitted %d times in 24 tries against 5 per hour", alg, admitted)
		}
		if !check("never-seen") {
			t.Errorf("%s: a key the flood never touched was denied its first request", alg)
		}
	}
	if st := s.Stats(); st.Restored == 0 || st.Evictions == 0 {
		t.Errorf("stats %+v: keys were evicted and came back", st)
	}
}
