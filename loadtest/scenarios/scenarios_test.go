package scenarios

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/loadtest"
)

func runOf(capacity []float64, ok []int) *Run {
	s := &loadtest.Summary{}
	for i, n := range ok {
		s.Seconds = append(s.Seconds, loadtest.Second{T: i, Offered: 2 * n, OK: n, Shed: n})
	}
	return &Run{Capacity: capacity, Summary: s}
}

func TestShareAndRecovered(t *testing.T) {
	r := runOf([]float64{100, 100, 50, 50, 50, 50}, []int{100, 90, 10, 20, 48, 50})
	if got := r.Share(0, 2); got != 0.95 {
		t.Errorf("share %v, want 0.95", got)
	}
	if got := r.Recovered(2); got != 2 {
		t.Errorf("recovered after %d s, want 2 (90%% over every two seconds from second 4)", got)
	}
	if got := runOf([]float64{100, 100}, []int{10, 10}).Recovered(0); got != -1 {
		t.Errorf("never recovered: %d", got)
	}
	if got := r.Refused(0, 2); got != 190 {
		t.Errorf("refused %d", got)
	}
}

func TestScenariosAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range All() {
		if seen[s.Name] || s.Goal == "" || s.Score == nil || (s.Load == nil) == (len(s.Streams) == 0) || s.Duration < 5*time.Second {
			t.Errorf("scenario %q is incomplete or repeated", s.Name)
		}
		seen[s.Name] = true
		for _, st := range s.Streams {
			if st.Name == "" || st.Load == nil {
				t.Errorf("%s: a stream without a name or a load", s.Name)
			}
		}
		if s.Config != "" {
			for _, c := range Contenders() {
				if c.Config == "" {
					continue
				}
				merged, err := mergeConfig(c.Config, s.Config)
				if err == nil {
					_, err = config.Parse("merged.yaml", []byte(merged))
				}
				if err != nil {
					t.Errorf("%s with %s: the merged configuration does not load: %v", s.Name, c.Name, err)
				}
			}
		}
		if err := s.Model.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		// Every second has a capacity (0 only while hung).
		for i := 0; i < int(s.Duration/time.Second); i++ {
			m := modelAt(s, time.Duration(i)*time.Second+time.Second/2)
			if capacity(m) <= 0 && !m.Hung {
				t.Errorf("%s: no capacity in second %d", s.Name, i)
			}
		}
	}
	if _, err := Named([]string{"overload_2x", "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown scenario: %v", err)
	}
	hang, _ := Named([]string{"hang_5s"})
	if m := modelAt(hang[0], 6*time.Second); !m.Hung {
		t.Error("hang_5s is not hung at 6 s")
	}
	if m := modelAt(hang[0], 10*time.Second); m.Hung {
		t.Error("hang_5s still hung at 10 s")
	}
}

// TestMergeConfig: a scenario's configuration is merged into a
// contender's key by key, not appended (a second "adaptive:" would be a
// duplicate key).
func TestMergeConfig(t *testing.T) {
	got, err := mergeConfig("adaptive: {algorithm: gradient2}\n", "adaptive: {classes: [{name: a, share: 1}]}\nqueue: {fairness: user_id}\n")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("m.yaml", []byte(got))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Adaptive.Algorithm != "gradient2" || len(cfg.Adaptive.Classes) != 1 || cfg.Queue.Fairness != "user_id" {
		t.Errorf("merged: %+v %+v from\n%s", cfg.Adaptive, cfg.Queue, got)
	}
}

// TestSweep: the sweep's cells are well formed and unique, every shape
// validates, each load is scored by its goal (refusals below capacity,
// goodput and p99 above it, goodput against the unlimited proxy's in a
// closed loop), and the summary and the heat map place each run in its
// row and column.
func TestSweep(t *testing.T) {
	cells := Sweep()
	open := len(sweepShapes()) * len(sweepLoads)
	if want := open + (len(sweepShapes())+len(closedShapes()))*len(sweepClients); len(cells) != want {
		t.Fatalf("%d cells, want %d", len(cells), want)
	}
	seen := map[string]bool{}
	for i, s := range cells {
		loop := s.Load != nil
		if i >= open {
			loop = s.Clients > 0 && s.Load == nil
		}
		if seen[s.Name] || s.Score == nil || !loop || s.Model.Validate() != nil || !strings.HasPrefix(s.Name, SweepPrefix) {
			t.Errorf("cell %q is incomplete, repeated or its service does not validate", s.Name)
		}
		seen[s.Name] = true
	}
	if _, err := Named([]string{cells[0].Name}); err != nil {
		t.Errorf("a cell cannot be named: %v", err)
	}
	// Below capacity (0.5x): 1 refusal in 100 from the second second misses.
	below, above := cells[0], cells[1]
	r := runOf([]float64{10, 10, 10}, []int{5, 5, 5})
	for i := range r.Summary.Seconds {
		r.Summary.Seconds[i].Offered, r.Summary.Seconds[i].Shed = 100, 0
	}
	r.Summary.Seconds[2].Shed = 1
	r.Scenario, r.Contender, r.Goal = below.Name, "gradient2", below.Goal
	if v := below.Score(r); !v.Met {
		t.Errorf("0.5%% refused below capacity: %+v, want met", v)
	}
	r.Summary.Seconds[2].Shed = 2
	if r.Verdict = below.Score(r); r.Verdict.Met {
		t.Errorf("1%% refused below capacity: %+v, want missed", r.Verdict)
	}
	// Above capacity: goodput of 9 of 10 per second, p99 within the bound.
	r2 := runOf([]float64{10, 10, 10}, []int{0, 9, 9})
	r2.Scenario, r2.Contender, r2.Goal = above.Name, "gradient2", above.Goal
	r2.Summary.OKLatency.P99 = 10
	if r2.Verdict = above.Score(r2); !r2.Verdict.Met {
		t.Errorf("90%% goodput above capacity: %+v, want met", r2.Verdict)
	}
	r2.Summary.OKLatency.P99 = 10 * serviceP99(above.Model)
	if v := above.Score(r2); v.Met {
		t.Errorf("p99 10x the service's: %+v, want missed", v)
	}
	sum := SweepSummary([]*Run{r, r2})
	if !strings.Contains(sum, "0 of 1") || !strings.Contains(sum, "1 of 1") || !strings.Contains(sum, below.Name) {
		t.Errorf("summary:\n%s\nwant each goal's count and the missed cell", sum)
	}
	// A closed loop: 95% of the unlimited proxy's goodput meets (90% when
	// the service burns CPU beside the sidecar), less misses.
	var closed, cpu Scenario
	for _, s := range cells[open:] {
		if closed.Name == "" && !s.Model.CPU {
			closed = s
		}
		if cpu.Name == "" && s.Model.CPU {
			cpu = s
		}
	}
	r3 := runOf([]float64{0, 0, 0}, []int{0, 95, 95})
	r3.Scenario, r3.Contender, r3.Goal, r3.Reference = closed.Name, "gradient2", closed.Goal, 100
	if r3.Verdict = closed.Score(r3); !r3.Verdict.Met {
		t.Errorf("a closed loop at 0.95 of off: %+v, want met", r3.Verdict)
	}
	r3.Summary.Seconds[2].OK = 85
	if v := closed.Score(r3); v.Met {
		t.Errorf("a closed loop at 0.90 of off: %+v, want missed", v)
	}
	if v := cpu.Score(r3); !v.Met {
		t.Errorf("a closed loop at 0.90 of off before a CPU-bound service: %+v, want met", v)
	}
	grids := SweepGrids([]*Run{r, r2, r3})
	col := len(sweepLoads) // the first closed loop's column
	if len(grids) != 1 || grids[0].Cells[0][0].Text == "" || grids[0].Cells[0][0].Met || !grids[0].Cells[0][1].Met ||
		!grids[0].Cells[0][col].Met || len(grids[0].Rows) != len(sweepShapes())+len(closedShapes()) {
		t.Errorf("heat map %+v: want the first shape's 0.5x missed, 2x met and first closed loop met", grids)
	}
}

// The retry storms' clients: the naive one sends a refused request four
// times in all, at once; clientlimit's retries only within its budget and
// stops sending while the service refuses.
func TestRetryStormClients(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	send := func(rt http.RoundTripper, n int) {
		c := &http.Client{Transport: rt}
		for range n {
			resp, err := c.Get(srv.URL)
			if err == nil {
				resp.Body.Close()
			}
		}
	}
	send(retryAtOnce(http.DefaultTransport), 10)
	if got := hits.Load(); got != 40 {
		t.Errorf("naive retries: %d attempts for 10 requests, want 40", got)
	}
	hits.Store(0)
	send(backingOff(http.DefaultTransport), 200)
	if got := hits.Load(); got >= 100 {
		t.Errorf("clientlimit: %d attempts for 200 requests to a service refusing all, want far fewer than sent", got)
	}
}

// Wasted is the share of what reached the service that was no goodput.
func TestWasted(t *testing.T) {
	r := runOf([]float64{10, 10}, []int{5, 10})
	r.Arrived = []int64{20, 10}
	if got := r.Wasted(0, 2); got != 0.5 {
		t.Errorf("wasted %v, want 0.5 (15 good of 30 arrived)", got)
	}
	if got := r.Wasted(5, 6); got != 0 {
		t.Errorf("wasted with nothing arrived: %v", got)
	}
}
