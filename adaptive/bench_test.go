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
