package main_test

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkFleetBounds measures, through real sluice processes, how far an
// eventually consistent fleet admits past a shared limit, next to the
// bound rate x interval x (N-1), and the Redis commands per decision. It
// runs with SLUICE_FLEET_BENCH=1 (make bench-fleet); each row starts its
// own processes, so b.N is not used.
func BenchmarkFleetBounds(b *testing.B) {
	if os.Getenv("SLUICE_FLEET_BENCH") == "" {
		b.Skip("set SLUICE_FLEET_BENCH=1 (make bench-fleet): starts redis-server and sluice processes")
	}
	type row struct {
		mode     string
		nodes    int
		interval time.Duration
		rate     int // requests per second, all sidecars together
	}
	var rows []row
	for _, mode := range []string{"eventual", "gossip"} {
		for _, n := range []int{2, 4} {
			for _, iv := range []time.Duration{50 * time.Millisecond, 200 * time.Millisecond} {
				for _, rate := range []int{200, 800} {
					rows = append(rows, row{mode, n, iv, rate})
				}
			}
		}
	}
	fmt.Printf("| mode | sidecars | sync interval | rate/s | limit | admitted | over | bound r x I x (N-1) | Redis cmds/decision |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b.Run(fmt.Sprintf("%s/n=%d/i=%v/r=%d", r.mode, r.nodes, r.interval, r.rate), func(b *testing.B) {
			const limit = 200
			srv := redistest.Start(b)
			up := upstreamServer(b)
			var ss []*sluice
			var binds []string
			for range r.nodes {
				binds = append(binds, fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(b, false)))
			}
			for i := range r.nodes {
				store := fmt.Sprintf("store:\n  type: redis\n  redis: {addrs: [%q], consistency: eventual, sync_interval: %v, instances: %d}\n",
					srv.Addr(), r.interval, r.nodes)
				if r.mode == "gossip" {
					store = fmt.Sprintf("store:\n  type: gossip\n  gossip: {bind: %q, join: [%q], sync_interval: %v}\n",
						binds[i], binds[0], r.interval)
				}
				ss = append(ss, start(b, up.URL, store+fmt.Sprintf(`
adaptive: {algorithm: "off"}
rules:
  - {rule_id: shared, identifier_type: global, algorithm: token_bucket, limit: %d, window: 24h}
`, limit)))
			}
			if r.mode == "gossip" {
				waitFor(b, func() bool { return len(state(b, ss[0]).Store.Fleet.Members) == r.nodes })
			}
			before := totalCalls(srv)
			// Open loop: each sidecar gets rate/N requests per second
			// until 3 x limit were sent.
			per := time.Second * time.Duration(r.nodes) / time.Duration(r.rate)
			total := 3 * limit
			var admitted, sent atomic.Int64
			var wg sync.WaitGroup
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			for _, s := range ss {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(per)
					defer tick.Stop()
					var inner sync.WaitGroup
					for range total / r.nodes {
						<-tick.C
						inner.Add(1)
						go func() {
							defer inner.Done()
							resp, err := client.Get("http://" + s.proxy + "/")
							if err != nil {
								return
							}
							resp.Body.Close()
							sent.Add(1)
							if resp.StatusCode == 200 {
								admitted.Add(1)
							}
						}()
					}
					inner.Wait()
				}()
			}
			wg.Wait()
			cmds := float64(totalCalls(srv)-before) / float64(max(1, sent.Load()))
			bound := float64(r.rate) / float64(r.nodes) * r.interval.Seconds() * float64(r.nodes-1)
			over := admitted.Load() - limit
			fmt.Printf("| %s | %d | %v | %d | %d | %d | %d | %.0f | %.3f |\n", r.mode, r.nodes, r.interval, r.rate, limit,
				admitted.Load(), over, bound, cmds)
			b.ReportMetric(float64(over), "over")
			b.ReportMetric(bound, "bound")
		})
	}
}

// totalCalls sums the calls of every command the server has run.
func totalCalls(srv *redistest.Server) int64 {
	out, _ := srv.Do("INFO", "commandstats")
	var n int64
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "calls="); i >= 0 {
			v := line[i+len("calls="):]
			if j := strings.IndexByte(v, ','); j >= 0 {
				v = v[:j]
			}
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
	}
	return n
}

// BenchmarkFleetConvergence: two sidecars on one Redis in eventual mode;
// Redis dies while one spends the whole quota and comes back; the figure is
// how long until the other has heard of it (its first 429).
func BenchmarkFleetConvergence(b *testing.B) {
	if os.Getenv("SLUICE_FLEET_BENCH") == "" {
		b.Skip("set SLUICE_FLEET_BENCH=1 (make bench-fleet)")
	}
	srv := redistest.Start(b)
	up := upstreamServer(b)
	cfg := fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%q], consistency: eventual, sync_interval: 100ms, timeout: 100ms}
adaptive: {algorithm: "off"}
rules:
  - {rule_id: shared, identifier_type: global, algorithm: token_bucket, limit: 50, window: 24h}
`, srv.Addr())
	a, c := start(b, up.URL, cfg), start(b, up.URL, cfg)
	srv.Stop()
	for range 50 {
		if resp, _ := get(b, "http://"+a.proxy+"/"); resp.StatusCode != 200 {
			b.Fatalf("a refused during the partition: %d", resp.StatusCode)
		}
	}
	srv.Restart()
	healed := time.Now()
	for {
		resp, _ := get(b, "http://"+c.proxy+"/")
		if resp.StatusCode == 429 {
			break
		}
		if time.Since(healed) > 30*time.Second {
			b.Fatal("no convergence within 30s")
		}
		time.Sleep(10 * time.Millisecond) // probing for convergence
	}
	conv := time.Since(healed)
	fmt.Printf("convergence after Redis came back (sync 100ms): %v\n", conv.Round(time.Millisecond))
	b.ReportMetric(conv.Seconds()*1000, "ms-to-converge")
}
