package static_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
)

// The benchmarks use a token bucket fast enough that nearly every check is
// admitted, so they measure the work of an admission, the common case.
func fastPolicy() *static.Policy {
	return &static.Policy{Algorithm: static.TokenBucket, Limit: 1 << 30, Window: time.Second, Burst: 1 << 30}
}

func BenchmarkMemoryStore(b *testing.B) {
	ctx := context.Background()
	b.Run("one_rule", func(b *testing.B) {
		s := static.NewMemory(static.MemoryOptions{})
		limits := []static.Limit{{RuleID: "r", Key: "user:42", Policy: fastPolicy(), Cost: 1}}
		b.ReportAllocs()
		for b.Loop() {
			if res, _ := s.Check(ctx, limits, nil); !res.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("three_rules", func(b *testing.B) {
		s := static.NewMemory(static.MemoryOptions{})
		window := &static.Policy{Algorithm: static.SlidingWindow, Limit: 1 << 40, Window: time.Minute}
		fixed := &static.Policy{Algorithm: static.FixedWindow, Limit: 1 << 40, Window: time.Hour}
		limits := []static.Limit{
			{RuleID: "a", Key: "a:user:42", Policy: fastPolicy(), Cost: 1},
			{RuleID: "b", Key: "b:user:42", Policy: window, Cost: 1},
			{RuleID: "c", Key: "c:user:42", Policy: fixed, Cost: 1},
		}
		b.ReportAllocs()
		for b.Loop() {
			if res, _ := s.Check(ctx, limits, nil); !res.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("nine_rules_2000_identities", func(b *testing.B) {
		// A request of nine limits on one identity of 2,000, as a replay
		// of ten rules checks them: the store's per-limit work, each key
		// out of the CPU's nearest caches.
		s := static.NewMemory(static.MemoryOptions{})
		p := fastPolicy()
		const identities, rules = 2000, 9
		keys := make([][rules]string, identities)
		for i := range keys {
			for r := range rules {
				keys[i][r] = "{ip:198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + "}:rule_" + strconv.Itoa(r)
			}
		}
		limits := make([]static.Limit, rules)
		for r := range limits {
			limits[r] = static.Limit{RuleID: "rule_" + strconv.Itoa(r), Policy: p, Cost: 1}
		}
		each := make([]sluice.Decision, rules)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i = (i + 7919) % identities
			for r := range limits {
				limits[r].Key = keys[i][r]
			}
			if res, _ := s.Check(ctx, limits, each); !res.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("flood_at_cap", func(b *testing.B) {
		// Every check a new key into a full store: an eviction (its
		// usage remembered) and a lookup of the new key's remembered usage.
		s := static.NewMemory(static.MemoryOptions{MaxKeys: 10_000})
		p := &static.Policy{Algorithm: static.SlidingWindow, Limit: 5, Window: time.Hour}
		limits := []static.Limit{{RuleID: "r", Policy: p, Cost: 1}}
		keys := make([]string, 1<<16)
		for i := range keys {
			keys[i] = "flood:" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			limits[0].Key = keys[i&(len(keys)-1)]
			_, _ = s.Check(ctx, limits, nil)
		}
	})
	b.Run("10k_keys_parallel", func(b *testing.B) {
		s := static.NewMemory(static.MemoryOptions{})
		p := fastPolicy()
		keys := make([]string, 10_000)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(i)
		}
		var seed atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919))
			limits := []static.Limit{{RuleID: "r", Policy: p, Cost: 1}}
			for pb.Next() {
				i++
				limits[0].Key = keys[i%len(keys)]
				if res, _ := s.Check(ctx, limits, nil); !res.Allowed {
					b.Error("denied")
					return
				}
			}
		})
	})
}

// BenchmarkBaseline is the peer the memory store is compared with, in the
// same run: golang.org/x/time/rate's Limiter.Allow on one key.
func BenchmarkBaseline(b *testing.B) {
	b.Run("xtimerate_allow", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1<<30), 1<<30)
		b.ReportAllocs()
		for b.Loop() {
			if !l.Allow() {
				b.Fatal("denied")
			}
		}
	})
}
