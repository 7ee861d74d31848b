package adaptive_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	gclcore "github.com/platinummonkey/go-concurrency-limits/core"
	gcllimit "github.com/platinummonkey/go-concurrency-limits/limit"
	gcllimiter "github.com/platinummonkey/go-concurrency-limits/limiter"
	gclstrategy "github.com/platinummonkey/go-concurrency-limits/strategy"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/sim"
)

// The simulated service: C slots, mean service time L, so capacity mu = C/L.
const (
	slotsC = 40
	svcL   = 20 * time.Millisecond
	mu     = float64(slotsC) / 0.020 // 2000 requests per second
)

var algorithms = []string{"gradient2", "vegas", "aimd"}

// optimum is the limit at which the backend is fully used and the p99 SLO
// (2L) is just met: C plus the queue whose wait fits between the service
// time's own p99 and 2L. For the simulated lognormal (sigma 0.25) the
// service p99 is 1.73L, so the optimum is about 1.27C.
func optimum(c int) float64 {
	p99 := math.Exp(-0.25*0.25/2 + 2.326*0.25)
	return float64(c) * (1 + (2 - p99))
}

type scenario struct {
	name string
	sc   sim.Scenario
}

func constant(v float64) func(time.Duration) float64 { return func(time.Duration) float64 { return v } }
func slots(c int) func(time.Duration) int            { return func(time.Duration) int { return c } }
func step[T any](at time.Duration, before, after T) func(time.Duration) T {
	return func(t time.Duration) T {
		if t < at {
			return before
		}
		return after
	}
}

func scenarios() []scenario {
	base := func(d time.Duration, rate func(time.Duration) float64, s func(time.Duration) int) sim.Scenario {
		return sim.Scenario{Duration: d, Rate: rate, Slots: s, ServiceTime: svcL, Seed: 7}
	}
	return []scenario{
		{"2x", base(15*time.Second, constant(2*mu), slots(slotsC))},
		{"5x", base(15*time.Second, constant(5*mu), slots(slotsC))},
		{"10x", base(15*time.Second, constant(10*mu), slots(slotsC))},
		{"capacity_halves", base(30*time.Second, constant(2*mu), step(15*time.Second, slotsC, slotsC/2))},
		{"capacity_doubles", base(30*time.Second, constant(3*mu), step(15*time.Second, slotsC, 2*slotsC))},
		{"overload_ends", base(30*time.Second, step(15*time.Second, 5*mu, 0.7*mu), slots(slotsC))},
	}
}

func runSluice(sc sim.Scenario, alg string) *sim.Report {
	return runSluiceAs(sc, alg, func(l *adaptive.Limiter) sim.Limiter { return limAdapter{l} })
}

// runSluiceAs is runSluice with the limiter seen through as (a wrapper
// that watches it).
func runSluiceAs(sc sim.Scenario, alg string, as func(*adaptive.Limiter) sim.Limiter) *sim.Report {
	var l *adaptive.Limiter
	return sim.Run(sc, func(c sluice.Clock) sim.Limiter {
		a, _ := adaptive.NewAlgorithm(alg)
		l, _ = adaptive.New(adaptive.Config{Algorithm: a, Clock: c, InitialLimit: 20})
		return as(l)
	}, func() int { return l.Limit() })
}

type limAdapter struct{ l *adaptive.Limiter }

func (a limAdapter) TryAcquire() (sluice.Permit, bool) { return a.l.TryAcquire() }

func perSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// meanLimit averages the per-second limit over [from, to).
func meanLimit(r *sim.Report, from, to int) float64 {
	sum := 0
	for i := from; i < to; i++ {
		sum += r.Seconds[i].Limit
	}
	return float64(sum) / float64(to-from)
}

// TestScenarios runs every algorithm through the overload scenarios on the
// simulated service and checks the targets: goodput near capacity, admitted
// p99 within twice the no-load latency, bounded memory, and fast adaptation
// when capacity or load change.
func TestScenarios(t *testing.T) {
	sec := time.Second
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			for _, s := range scenarios() {
				t.Run(s.name, func(t *testing.T) {
					r := runSluice(s.sc, alg)
					switch s.name {
					case "2x", "5x", "10x":
						w := r.Window(5*sec, 15*sec)
						good := perSecond(w.Good, 10*sec)
						want := 0.90
						if s.name == "2x" && alg != "vegas" {
							want = 0.95 // vegas: a known gap, about 92% (BENCHMARKS.md)
						}
						if good < want*mu {
							t.Errorf("goodput %.0f/s, want >= %.0f%% of %.0f", good, want*100, mu)
						}
						// The goal is 2x the service's own p99 (1.73 L):
						// 3.46 L. The guard is tighter, 2.25 L, so that a
						// regression shows long before the goal is missed.
						if p99 := r.Percentile(0.99, 5*sec, 15*sec); p99 > 9*svcL/4 {
							t.Errorf("admitted p99 %v, want <= 2.25 L (%v)", p99, 9*svcL/4)
						}
						// Memory flat: the backend never holds more than a
						// bounded number, whatever the offered load.
						if w.InSystem > 3*slotsC {
							t.Errorf("backend held %d requests, want a bounded queue (<= %d)", w.InSystem, 3*slotsC)
						}
					case "capacity_halves":
						newC := slotsC / 2
						if lim := meanLimit(r, 20, 25); lim > 1.3*optimum(newC) || lim < 0.9*float64(newC) {
							t.Errorf("5 s after capacity halved: mean limit %.1f, want within 1.3x of the optimum %.1f", lim, optimum(newC))
						}
						if p50 := r.Percentile(0.5, 20*sec, 25*sec); p50 > 3*svcL/2 {
							t.Errorf("p50 after the change %v, want <= 1.5L", p50)
						}
						for i := 15; i < 30; i++ {
							if g := r.Seconds[i].Good; float64(g) < 0.8*float64(newC)/0.020 {
								t.Errorf("second %d: goodput %d/s, below 80%% of the new capacity %d/s", i, g, newC*50)
							}
						}
					case "capacity_doubles":
						newMu := mu * 2
						reached := -1
						for i := 15; i < 30; i++ {
							if float64(r.Seconds[i].Good) >= 0.9*newMu {
								reached = i - 15
								break
							}
						}
						within := 10
						if alg == "vegas" {
							within = 12 // a known gap: Vegas grows by log10(limit) a window
						}
						if reached < 0 || reached > within {
							t.Errorf("goodput reached 90%% of the doubled capacity after %d s, want within 10 s", reached)
						}
					case "overload_ends":
						// gradient2 rejects nothing; aimd and vegas hover near
						// the slots at 0.7x and refuse a burst now and then
						// (a known gap: at most 0.2% here, and the sidecar's
						// wait queue absorbs them).
						allowed := 0
						if alg != "gradient2" {
							allowed = 39 // 0.2% of 14 s at 0.7 x 2000/s
						}
						if w := r.Window(16*sec, 30*sec); w.Rejected > allowed {
							t.Errorf("%d rejections after the overload ended (load at 0.7x), want at most %d", w.Rejected, allowed)
						}
					}
				})
			}
		})
	}
}

// TestNoLimiterCollapses checks the simulation itself: without a limiter the
// same overload leaves almost no goodput, so the targets above are earned.
func TestNoLimiterCollapses(t *testing.T) {
	for _, s := range scenarios()[:3] {
		r := sim.Run(s.sc, nil, nil)
		w := r.Window(5*time.Second, 15*time.Second)
		if good := perSecond(w.Good, 10*time.Second); good > 0.05*mu {
			t.Errorf("%s without a limiter: goodput %.0f/s, want near 0", s.name, good)
		}
	}
}

// gclLimiter adapts go-concurrency-limits' DefaultLimiter (the baseline).
type gclLimiter struct{ l *gcllimiter.DefaultLimiter }

type gclPermit struct{ l gclcore.Listener }

func (p gclPermit) Release(o sluice.Outcome) {
	switch o {
	case sluice.Success:
		p.l.OnSuccess()
	case sluice.Dropped:
		p.l.OnDropped()
	default:
		p.l.OnIgnore()
	}
}

func (g gclLimiter) TryAcquire() (sluice.Permit, bool) {
	l, ok := g.l.Acquire(context.Background())
	if !ok {
		return nil, false
	}
	return gclPermit{l}, true
}

func newGCL(alg string) sim.Limiter {
	reg := gclcore.EmptyMetricRegistryInstance
	var lim gclcore.Limit
	switch alg {
	case "vegas":
		lim = gcllimit.NewDefaultVegasLimitWithLimit("vegas", 20, gcllimit.NoopLimitLogger{}, reg)
	case "gradient2":
		lim, _ = gcllimit.NewGradient2Limit("gradient2", 20, 1000, 1, nil, 0.2, 600, gcllimit.NoopLimitLogger{}, reg)
	case "aimd":
		lim = gcllimit.NewDefaultAIMDLimit("aimd", reg)
	}
	l, err := gcllimiter.NewDefaultLimiter(lim, int64(100*time.Millisecond), int64(time.Second), int64(100*time.Microsecond),
		10, gclstrategy.NewSimpleStrategy(20), gcllimit.NoopLimitLogger{}, reg)
	if err != nil {
		panic(err)
	}
	return gclLimiter{l}
}

// TestScenarioTable prints the scenario table of BENCHMARKS.md: every
// scenario for sluice's algorithms, go-concurrency-limits' DefaultLimiter
// with the same algorithm (run on the same virtual time through
// testing/synctest, since it reads time.Now), and no limiter. Run it with
// SLUICE_SCENARIO_TABLE=1 go test -run TestScenarioTable -v ./adaptive/
func TestScenarioTable(t *testing.T) {
	if os.Getenv("SLUICE_SCENARIO_TABLE") == "" {
		t.Skip("set SLUICE_SCENARIO_TABLE=1 to print the table")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | limiter | goodput (of capacity) | admitted p99 / L | converged after | limit at end | rejected |\n|---|---|---|---|---|---|---|\n")
	for _, s := range scenarios() {
		from, to := 5*time.Second, s.sc.Duration
		capAt := mu
		switch s.name {
		case "capacity_halves":
			from, capAt = 20*time.Second, mu/2
		case "capacity_doubles":
			from, capAt = 25*time.Second, 2*mu
		case "overload_ends":
			from, capAt = 16*time.Second, 0.7*mu
		}
		row := func(name string, r *sim.Report) float64 {
			w := r.Window(from, to)
			good := perSecond(w.Good, to-from) / capAt
			limit := "n/a"
			if l := r.Seconds[int(to/time.Second)-1].Limit; l > 0 {
				limit = fmt.Sprint(l)
			}
			p99 := "n/a"
			if v := r.Percentile(0.99, from, to); v > 0 {
				p99 = fmt.Sprintf("%.2f", float64(v)/float64(svcL))
			}
			// Converged: the first second, from the scenario's event, from
			// which goodput stays at 90% of the capacity or more (for
			// overload_ends: after which nothing more is rejected).
			event := 0
			if s.sc.Duration > 15*time.Second {
				event = 15
			}
			conv := "never"
			for i := event; i < len(r.Seconds)-1; i++ {
				ok := true
				for j := i; j < len(r.Seconds)-1; j++ {
					ok = ok && float64(r.Seconds[j].Good) >= 0.9*capAt
				}
				if s.name == "overload_ends" {
					ok = r.Window(time.Duration(i)*time.Second, to).Rejected == 0
				}
				if ok {
					conv = fmt.Sprintf("%d s", i-event)
					break
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %.1f%% | %s | %s | %s | %d |\n", s.name, name, 100*good, p99, conv, limit, w.Rejected)
			return good
		}
		for _, alg := range algorithms {
			if good := row("sluice "+alg, runSluice(s.sc, alg)); good < 0.85 {
				t.Errorf("%s %s: goodput %.0f%% of capacity", s.name, alg, 100*good)
			}
			synctest.Test(t, func(t *testing.T) {
				sc := s.sc
				sc.SleepClock = true
				row("go-concurrency-limits "+alg, sim.Run(sc, func(sluice.Clock) sim.Limiter { return newGCL(alg) }, nil))
			})
		}
		row("none", sim.Run(s.sc, nil, nil))
	}
	t.Log("\n" + b.String())
}
