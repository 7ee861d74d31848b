package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
)

// commands returns the server's count of commands processed, which counts
// what clients sent (a script call is one, whatever it does inside).
func commands(b *testing.B, srv *redistest.Server) int {
	n, err := strconv.Atoi(srv.InfoField("stats", "total_commands_processed"))
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// serverMicros returns the microseconds the server spent in commands so
// far (INFO commandstats, every command's usec; a script's inner commands
// count in its EVALSHA): Redis CPU, the figure of how many decisions one
// Redis core serves.
func serverMicros(b *testing.B, srv *redistest.Server) float64 {
	return commandMicros(b, srv, func(cmd string) bool { return cmd != "info" })
}

// commandMicros is serverMicros over the commands keep names (lower case,
// as INFO commandstats does).
func commandMicros(b *testing.B, srv *redistest.Server, keep func(cmd string) bool) float64 {
	out, err := srv.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(out, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || !keep(cmd) {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "usec" {
				n, _ := strconv.ParseFloat(v, 64)
				total += n
			}
		}
	}
	return total
}

// measure runs fn against srv and reports the Redis commands each decision
// cost. Parallel: from 8 goroutines per CPU (throughput: ns/op is wall time
// per decision); serial: one at a time (latency: ns/op is a decision's time).
func measure(b *testing.B, srv *redistest.Server, parallel bool, fn func(ctx context.Context, i int) bool) {
	ctx := context.Background()
	b.ReportAllocs()
	before, beforeUS := commands(b, srv), serverMicros(b, srv)
	b.ResetTimer()
	if parallel {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				if !fn(ctx, i) {
					b.Error("denied or failed")
					return
				}
			}
		})
	} else {
		for i := 0; i < b.N; i++ {
			if !fn(ctx, i) {
				b.Fatal("denied or failed")
			}
		}
	}
	b.StopTimer()
	// INFO itself is one command (two, with commandstats).
	b.ReportMetric(float64(commands(b, srv)-before-2)/float64(b.N), "cmds/op")
	b.ReportMetric((serverMicros(b, srv)-beforeUS)/float64(b.N), "server-us/op")
}

type benchCase struct {
	name     string
	rules    int
	parallel bool
}

// benchCases names the throughput (parallel) and latency (serial) variants
// of one and three rules.
func benchCases(one, three string) []benchCase {
	return []benchCase{
		{one, 1, true}, {three, 3, true},
		{one + "_serial", 1, false}, {three + "_serial", 3, false},
	}
}

// Generous limits over 1000 keys, so that every decision is an admission
// and both sides do the same work: read, decide, write. (Rates above one per
// microsecond would make sluice's interval zero, which its arithmetic in
// microseconds sends to the general script.)
var benchPolicies = []*static.Policy{
	{Algorithm: static.GCRA, Limit: 100_000, Window: time.Second, Burst: 1 << 20},
	{Algorithm: static.GCRA, Limit: 50_000, Window: time.Second, Burst: 1 << 20},
	{Algorithm: static.GCRA, Limit: 25_000, Window: time.Second, Burst: 1 << 20},
}

func BenchmarkRedisStore(b *testing.B) {
	srv := redistest.Start(b)
	c, err := redisstore.NewClient(redisstore.Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, PoolSize: 32})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s := redisstore.New(c, redisstore.Options{Timeout: time.Second})
	if err := s.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, bc := range benchCases("one_rule", "three_rules") {
		n := bc.rules
		b.Run(bc.name, func(b *testing.B) {
			measure(b, srv, bc.parallel, func(ctx context.Context, i int) bool {
				id := strconv.Itoa(i % 1000)
				limits := make([]static.Limit, n)
				for r := range limits {
					limits[r] = static.Limit{RuleID: "r", Key: "{user:" + id + "}:r" + strconv.Itoa(r), Policy: benchPolicies[r], Cost: 1}
				}
				res, err := s.Check(ctx, limits, nil)
				return err == nil && res.Allowed
			})
		})
	}
}

// BenchmarkBaseline is the peer the Redis store is compared with, in the
// same run: github.com/go-redis/redis_rate/v10, one Allow per rule; and
// the floor of one round trip that any store deciding in Redis pays.
func BenchmarkBaseline(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	defer c.Close()
	lim := redis_rate.NewLimiter(c)
	rates := []redis_rate.Limit{
		{Rate: 100_000, Burst: 1 << 20, Period: time.Second},
		{Rate: 50_000, Burst: 1 << 20, Period: time.Second},
		{Rate: 25_000, Burst: 1 << 20, Period: time.Second},
	}
	// The floor under any store that keeps its state in Redis: one round
	// trip (PING), and one script that reads the server's time and a
	// key and writes the key back (TIME, GET, SET: the least a limit
	// decided in Redis does), one at a time.
	minimal, err := c.ScriptLoad(context.Background(),
		"local t = redis.call('TIME') redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], t[1], 'EX', 60) return 1").Result()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("floor_ping_serial", func(b *testing.B) {
		measure(b, srv, false, func(ctx context.Context, i int) bool { return c.Ping(ctx).Err() == nil })
	})
	b.Run("floor_script_serial", func(b *testing.B) {
		measure(b, srv, false, func(ctx context.Context, i int) bool {
			return c.EvalSha(ctx, minimal, []string{"user:" + strconv.Itoa(i%1000)}).Err() == nil
		})
	})
	for _, bc := range benchCases("redis_rate_one", "redis_rate_three") {
		n := bc.rules
		b.Run(bc.name, func(b *testing.B) {
			measure(b, srv, bc.parallel, func(ctx context.Context, i int) bool {
				id := strconv.Itoa(i % 1000)
				for r := 0; r < n; r++ {
					res, err := lim.Allow(ctx, "user:"+id+":r"+strconv.Itoa(r), rates[r])
					if err != nil || res.Allowed == 0 {
						return false
					}
				}
				return true
			})
		})
	}
}

// BenchmarkRedisCPUAgainstPeer is one rule's Redis CPU per decision beside
// redis_rate's, measured so that the machine's drift cannot tell them
// apart: each on a server of its own, their calls alternating one by one.
// It reports each server's CPU per decision (INFO commandstats, the
// EVALSHA calls' own microseconds) and their ratio (cpu-ratio: sluice
// over redis_rate), the figure of issue 29's Redis goal (<= 0.9).
func BenchmarkRedisCPUAgainstPeer(b *testing.B) {
	ours, peer := redistest.Start(b), redistest.Start(b)
	c, err := redisstore.NewClient(redisstore.Config{Addrs: []string{ours.Addr()}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s := redisstore.New(c, redisstore.Options{Timeout: time.Second})
	pc := redis.NewClient(&redis.Options{Addr: peer.Addr()})
	defer pc.Close()
	lim := redis_rate.NewLimiter(pc)
	rate := redis_rate.Limit{Rate: 100_000, Burst: 1 << 20, Period: time.Second}
	evalsha := func(srv *redistest.Server) float64 {
		return commandMicros(b, srv, func(cmd string) bool { return cmd == "evalsha" })
	}
	ctx := context.Background()
	o0, p0 := evalsha(ours), evalsha(peer)
	for i := 0; b.Loop(); i++ {
		id := strconv.Itoa(i % 1000)
		res, err := s.Check(ctx, []static.Limit{{RuleID: "r", Key: "{user:" + id + "}:r0", Policy: benchPolicies[0], Cost: 1}}, nil)
		if err != nil || !res.Allowed {
			b.Fatal("sluice: denied or failed: ", err)
		}
		r, err := lim.Allow(ctx, "user:"+id+":r0", rate)
		if err != nil || r.Allowed == 0 {
			b.Fatal("redis_rate: denied or failed: ", err)
		}
	}
	o, p := evalsha(ours)-o0, evalsha(peer)-p0
	b.ReportMetric(o/float64(b.N), "sluice-server-us/op")
	b.ReportMetric(p/float64(b.N), "redis_rate-server-us/op")
	if p > 0 {
		b.ReportMetric(o/p, "cpu-ratio")
	}
}
