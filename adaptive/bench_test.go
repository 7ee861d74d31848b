package adaptive_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// Both sides get a limit high enough that every acquisition succeeds: the
// benchmarks measure the admission and release path, the per-request cost.

func BenchmarkAdaptive(b *testing.B) {
	for _, name := range []string{"fixed", "aimd", "vegas", "gradient2"} {
		b.Run("acquire_release/"+name, func(b *testing.B) {
			alg, _ := adaptive.NewAlgorithm(name)
			l, err := adaptive.New(adaptive.Config{Algorithm: alg, InitialLimit: 1000, MinLimit: 1000, MaxLimit: 1000})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, ok := l.TryAcquire()
					if !ok {
						b.Error("refused")
						return
					}
					p.Release(sluice.Success)
				}
			})
		})
	}
}

// BenchmarkBaseline is the same operation on go-concurrency-limits'
// DefaultLimiter with the same algorithm, in the same run.
func BenchmarkBaseline(b *testing.B) {
	for _, name := range []string{"aimd", "vegas", "gradient2"} {
		b.Run("gcl_default_"+name, func(b *testing.B) {
			l := newGCL(name).(gclLimiter).l
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ls, ok := l.Acquire(ctx)
					if !ok {
						continue // its limit moved below the parallelism: not our concern here
					}
					ls.OnSuccess()
				}
			})
		})
	}
}

// BenchmarkGate compares the gate without classes and with four classes
// (the class's guarantee checked, borrowing computed when over it): the
// cost classes add to an admission and its release.
func BenchmarkGate(b *testing.B) {
	newL := func(b *testing.B) *adaptive.Limiter {
		l, err := adaptive.New(adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 1000, MinLimit: 1000, MaxLimit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	b.Run("one_class", func(b *testing.B) {
		l := newL(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, _ := l.TryAcquire()
				p.Release(sluice.Success)
			}
		})
	})
	b.Run("four_classes", func(b *testing.B) {
		p, err := newL(b).Partition([]adaptive.Class{{Name: "critical", Share: 0.4}, {Name: "degraded", Share: 0.3},
			{Name: "best_effort", Share: 0.2}, {Name: "bulk", Share: 0.1}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			c := 0
			for pb.Next() {
				perm, _ := p.TryAcquire(c & 3)
				perm.Release(sluice.Success)
				c++
			}
		})
	})
}
