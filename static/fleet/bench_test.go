package fleet_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/fleet"
	"github.com/sluicehq/sluice/static/fleet/redisbus"
	"github.com/sluicehq/sluice/static/redisstore"
)

// BenchmarkCheck compares one rule's decision in the three places it can
// be made: the memory store (the reference), the fleet store (eventual:
// the same decision plus the usage kept for the next sync) and Redis in
// exact mode (a round trip per decision). Keys rotate over 1000 users.
func BenchmarkCheck(b *testing.B) {
	p := &static.Policy{Algorithm: static.TokenBucket, Limit: 1 << 30, Window: time.Second}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "{u" + strconv.Itoa(i) + "}:r"
	}
	run := func(b *testing.B, s static.Store) {
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			l := []static.Limit{{RuleID: "r", Policy: p, Cost: 1}}
			i := 0
			for pb.Next() {
				l[0].Key = keys[i%len(keys)]
				i++
				if res, err := s.Check(ctx, l, nil); err != nil || !res.Allowed {
					b.Fatalf("%+v %v", res.Decision, err)
				}
			}
		})
	}
	b.Run("memory", func(b *testing.B) { run(b, static.NewMemory(static.MemoryOptions{})) })
	srv := redistest.Start(b)
	b.Run("fleet", func(b *testing.B) {
		c := client(b, srv)
		s, err := fleet.New(fleet.Config{Node: "bench", Transport: redisbus.New(c, "bench", time.Second)})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx) // the syncs run alongside, as in the sidecar
		run(b, s)
	})
	b.Run("redis-exact", func(b *testing.B) {
		run(b, redisstore.New(client(b, srv), redisstore.Options{Prefix: "bench"}))
	})
}
