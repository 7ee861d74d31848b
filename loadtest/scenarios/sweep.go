package scenarios

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/loadtest/backend"
	"github.com/sluicehq/sluice/loadtest/report"
)

// sweepShape is one service of the robustness sweep: shapes that no named
// scenario is tuned for, from 1 slot to 200 and 1 ms to 500 ms of
// service time, constant to heavy-tailed, bimodal, with and without
// contention, waiting without bound or failing fast past a queue depth.
type sweepShape struct {
	name string
	m    backend.Model
}

func sweepShapes() []sweepShape {
	ms := time.Millisecond
	return []sweepShape{
		{"2x200ms", backend.Model{Slots: 2, ServiceTime: 200 * ms, Sigma: 0.25, Degrade: 0.1}},               // 10/s
		{"5x50ms-constant", backend.Model{Slots: 5, ServiceTime: 50 * ms}},                                   // 100/s
		{"20x40ms-contention5%", backend.Model{Slots: 20, ServiceTime: 40 * ms, Sigma: 0.25, Degrade: 0.05}}, // 500/s
		{"50x100ms-sigma1", backend.Model{Slots: 50, ServiceTime: 100 * ms, Sigma: 1, Degrade: 0.1}},         // 500/s
		{"200x500ms", backend.Model{Slots: 200, ServiceTime: 500 * ms, Sigma: 0.25}},                         // 400/s
		{"4x4ms-sigma1.5", backend.Model{Slots: 4, ServiceTime: 4 * ms, Sigma: 1.5, Degrade: 0.1}},           // 1,000/s
		{"10x20ms-contention50%", backend.Model{Slots: 10, ServiceTime: 20 * ms, Sigma: 0.5, Degrade: 0.5}},  // 500/s
		// A tenth of the requests ten times slower (a cache miss, a cold
		// path): 38 ms on average.
		{"10x20ms-bimodal10%", backend.Model{Slots: 10, ServiceTime: 20 * ms, Sigma: 0.25, Degrade: 0.1, SlowShare: 0.1, SlowFactor: 10}}, // 263/s
		// A bounded worker pool: 503 at once while 16 wait.
		{"8x30ms-failfast16", backend.Model{Slots: 8, ServiceTime: 30 * ms, Sigma: 0.25, MaxQueue: 16}}, // 267/s
		// One worker (an event loop, a single-threaded server).
		{"1x1ms-sigma0.5", backend.Model{Slots: 1, ServiceTime: ms, Sigma: 0.5}}, // 1,000/s
	}
}

// closedShapes are the services of the sweep's closed loops only: no
// concurrency limit of their own (their capacity is whatever the machine
// gives), answering at once, waiting on I/O, or burning CPU on the cores
// the sidecar and the clients run on. A closed loop in front of them is
// the first benchmark most users run.
func closedShapes() []sweepShape {
	ms := time.Millisecond
	return []sweepShape{
		{"instant", backend.Model{Slots: 1_000_000}},
		{"5ms-io", backend.Model{Slots: 1_000_000, ServiceTime: 5 * ms}},
		{"200us-cpu", backend.Model{Slots: 1_000_000, ServiceTime: ms / 5, CPU: true}},
	}
}

// sweepLoads are the open-loop loads of the sweep, x capacity.
var sweepLoads = []float64{0.5, 2, 5}

// sweepClients are the closed loops of the sweep, in connections.
var sweepClients = []int{16, 256, 1024}

// SweepPrefix starts the name of every cell of the sweep.
const SweepPrefix = "sweep/"

// Sweep returns the robustness sweep: every shape of sweepShapes at every
// load of sweepLoads, 6 s each, scored against the goals of the named
// scenarios: below capacity, <= 0.5% refused; above it, goodput >= 90%
// of capacity from the second second on and p99 <= 2x the service's own
// (its lognormal p99 x 1.5 for the queueing of a busy service, + 2 ms for
// the network; the named scenarios measure theirs). Then every shape of
// sweepShapes and closedShapes before every closed loop of sweepClients,
// 5 s each, scored against the same proxy without an adaptive limit (see
// closedCell).
func Sweep() []Scenario {
	var out []Scenario
	for _, sh := range sweepShapes() {
		for _, x := range sweepLoads {
			out = append(out, sweepCell(sh, x))
		}
	}
	for _, sh := range append(sweepShapes(), closedShapes()...) {
		for _, n := range sweepClients {
			out = append(out, closedCell(sh, n))
		}
	}
	return out
}

// closedCell is shape sh before a closed loop of n connections. A closed
// loop's clients wait as long wherever they wait, so a limit buys them
// nothing unless the service serves less as work queues in it: the goal
// is goodput (seconds 1-5) >= 95% of what the same proxy serves without
// an adaptive limit (Run.Reference; the better of closedRounds runs of
// each, interleaved), 90% when the service burns CPU
// beside the sidecar (every refusal costs that CPU too). When the loop
// outnumbers the service's slots, the figure also gives goodput as a share
// of the service's capacity: where the unlimited proxy's clients time out
// in the service's queue, meeting the goal says little.
func closedCell(sh sweepShape, n int) Scenario {
	want := 0.95
	if sh.m.CPU {
		want = 0.9
	}
	return Scenario{Name: fmt.Sprintf("%s%s@c%d", SweepPrefix, sh.name, n), Duration: 5 * sec, Model: sh.m, Clients: n,
		Goal: fmt.Sprintf("closed loop: goodput >= %.0f%% of the proxy's without a limit", 100*want),
		Score: func(r *Run) Verdict {
			good := r.Goodput(1, len(r.Summary.Seconds))
			ratio := 1.0
			if r.Reference > 0 {
				ratio = good / r.Reference
			}
			fig := fmt.Sprintf("%.2f of off (%.0f/s against %.0f/s), refused %.1f%%",
				ratio, good, r.Reference, 100*r.RefusedShare(1, len(r.Summary.Seconds)))
			if c := capacity(sh.m); sh.m.Slots < n && c > 0 {
				// All its slots busy: what the service could serve.
				fig += fmt.Sprintf(", %.0f%% of the service's capacity", 100*good/c)
			}
			return Verdict{Met: ratio >= want, Figure: fig}
		}}
}

// serviceP99 is the reference p99 of a shape, ms: see Sweep. A bimodal
// shape's p99 is among its slow requests when they are more than 1%.
func serviceP99(m backend.Model) float64 {
	mean, z := float64(m.ServiceTime)/float64(time.Millisecond), 2.326
	if m.SlowShare > 0.01 {
		// The slow requests' (1 - 0.01/share) quantile: the tenth of
		// them slowest when a tenth are slow.
		mean *= max(1, m.SlowFactor)
		z = math.Sqrt2 * math.Erfinv(1-2*0.01/m.SlowShare)
	}
	return 1.5*mean*math.Exp(z*m.Sigma) + 2
}

func sweepCell(sh sweepShape, x float64) Scenario {
	s := Scenario{Name: fmt.Sprintf("%s%s@%gx", SweepPrefix, sh.name, x), Duration: 6 * sec, Model: sh.m, Load: constant(x)}
	if x < 1 {
		s.Goal = "<= 0.5% refused below capacity"
		s.Score = func(r *Run) Verdict {
			share := r.RefusedShare(1, len(r.Summary.Seconds))
			return Verdict{Met: share <= 0.005, Figure: fmt.Sprintf("refused %.2f%%", 100*share)}
		}
		return s
	}
	ref := serviceP99(sh.m)
	s.Goal = "goodput >= 90% of capacity; p99 <= 2x the service's own"
	s.Score = func(r *Run) Verdict {
		share, p99 := r.Share(1, len(r.Capacity)), r.Summary.OKLatency.P99
		return Verdict{Met: share >= 0.9 && p99 <= 2*ref,
			Figure: fmt.Sprintf("goodput %.0f%%, p99 %.0f ms (2x reference %.0f ms)", 100*share, p99, 2*ref)}
	}
	return s
}

// SweepSummary says, for a sweep's runs, how many cells met their goal per
// goal and per contender, and lists the cells missed with their figures.
func SweepSummary(runs []*Run) string {
	type key struct{ contender, goal string }
	met, all := map[key]int{}, map[key]int{}
	var keys []key
	var missed []string
	for _, r := range runs {
		if !strings.HasPrefix(r.Scenario, SweepPrefix) {
			continue
		}
		k := key{r.Contender, r.Goal}
		if all[k] == 0 {
			keys = append(keys, k)
		}
		all[k]++
		if r.Verdict.Met {
			met[k]++
		} else {
			missed = append(missed, fmt.Sprintf("- %s, %s: %s", r.Scenario, r.Contender, r.Verdict.Figure))
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].contender != keys[j].contender {
			return keys[i].contender < keys[j].contender
		}
		return keys[i].goal < keys[j].goal
	})
	var b strings.Builder
	fmt.Fprintf(&b, "| contender | goal | cells met |\n|---|---|---|\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "| %s | %s | %d of %d (%.0f%%) |\n", k.contender, k.goal, met[k], all[k], 100*float64(met[k])/float64(all[k]))
	}
	if len(missed) > 0 {
		fmt.Fprintf(&b, "\nMissed:\n%s\n", strings.Join(missed, "\n"))
	}
	return b.String()
}

// SweepGrids returns a sweep's runs as heat maps, one per contender: a row
// per service shape, a column per open-loop load and per closed loop.
func SweepGrids(runs []*Run) []report.Grid {
	var cols []string
	for _, x := range sweepLoads {
		cols = append(cols, fmt.Sprintf("%gx", x))
	}
	for _, n := range sweepClients {
		cols = append(cols, fmt.Sprintf("c%d", n))
	}
	shapes := append(sweepShapes(), closedShapes()...)
	var grids []report.Grid
	index := map[string]int{}
	for _, r := range runs {
		shape, load, ok := strings.Cut(strings.TrimPrefix(r.Scenario, SweepPrefix), "@")
		if !ok || !strings.HasPrefix(r.Scenario, SweepPrefix) {
			continue
		}
		gi, seen := index[r.Contender]
		if !seen {
			gi = len(grids)
			index[r.Contender] = gi
			g := report.Grid{Title: "Robustness sweep: " + r.Contender, Cols: cols}
			for _, sh := range shapes {
				g.Rows = append(g.Rows, sh.name)
				g.Cells = append(g.Cells, make([]report.GridCell, len(cols)))
			}
			grids = append(grids, g)
		}
		row, col := -1, -1
		for i, sh := range shapes {
			if sh.name == shape {
				row = i
			}
		}
		for i, c := range cols {
			if c == load {
				col = i
			}
		}
		if row >= 0 && col >= 0 {
			grids[gi].Cells[row][col] = report.GridCell{Met: r.Verdict.Met, Text: r.Verdict.Figure}
		}
	}
	return grids
}
