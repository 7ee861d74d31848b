package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `sluice loadtest scenarios` runs a scenario through the real binary
// (each sluice contender its own process) against the simulated backend,
// prints the table and writes the report; sluice's adaptive limit keeps the
// overloaded backend's goodput where no limiter loses it.
func TestE2EScenarios(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command(binary, "loadtest", "scenarios", "-scenario", "overload_5x", "-contenders", "none,gradient2", "-out", out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !strings.Contains(string(b), "| overload_5x | gradient2 |") || !strings.Contains(string(b), "| overload_5x | none |") {
		t.Fatalf("no table rows:\n%s", b)
	}
	for _, f := range []string{"table.md", "runs.json", "report.html", "overload_5x-goodput.png", "overload_5x-limit.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("report: %v", err)
		}
	}
	data, err := os.ReadFile(filepath.Join(out, "runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var runs []struct {
		Contender string
		Capacity  []float64
		Summary   struct {
			Seconds []struct {
				OK int `json:"ok"`
			} `json:"seconds"`
		}
	}
	if err := json.Unmarshal(data, &runs); err != nil {
		t.Fatal(err)
	}
	share := map[string]float64{}
	for _, r := range runs {
		good, capSum := 0.0, 0.0
		for i := 2; i < len(r.Capacity) && i < len(r.Summary.Seconds); i++ {
			good += float64(r.Summary.Seconds[i].OK)
			capSum += r.Capacity[i]
		}
		share[r.Contender] = good / capSum
	}
	// Generous bounds for a busy machine; the figures go to BENCHMARKS.md.
	if share["gradient2"] < 0.7 || share["none"] > 0.3 {
		t.Errorf("goodput share at 5x: gradient2 %.0f%%, none %.0f%%; want sluice to keep the service up", 100*share["gradient2"], 100*share["none"])
	}
}

// The scenarios about whom an overloaded service serves, through the real
// binary: priority classes under a bulk surge, a tenant flooding a fair
// queue, and a burst waiting for its quota.
func TestE2EWhomScenarios(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command(binary, "loadtest", "scenarios", "-scenario", "priority_classes,tenant_flood,quota_wait", "-contenders", "gradient2", "-out", out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	data, err := os.ReadFile(filepath.Join(out, "runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		Requests int `json:"requests"`
		OK       int `json:"ok"`
		Status   map[string]int
		Seconds  []struct {
			OK      int `json:"ok"`
			Offered int `json:"offered"`
		} `json:"seconds"`
	}
	var runs []struct {
		Scenario string
		Summary  summary
		Streams  []struct {
			Name    string
			Summary summary
		}
	}
	if err := json.Unmarshal(data, &runs); err != nil {
		t.Fatal(err)
	}
	served := func(s summary) float64 { return float64(s.OK) / float64(max(1, s.Requests)) }
	servedFrom := func(s summary, from int) float64 {
		ok, offered := 0, 0
		for i := from; i < len(s.Seconds); i++ {
			ok, offered = ok+s.Seconds[i].OK, offered+s.Seconds[i].Offered
		}
		return float64(ok) / float64(max(1, offered))
	}
	// Generous bounds for a busy machine; the goals' figures go to
	// BENCHMARKS.md.
	for _, r := range runs {
		switch r.Scenario {
		case "priority_classes":
			byName := map[string]float64{}
			for _, s := range r.Streams {
				byName[s.Name] = served(s.Summary)
			}
			if byName["critical"] < 0.97 || byName["bulk"] >= byName["critical"] {
				t.Errorf("priority classes: served %v; want critical nearly all and bulk shed first", byName)
			}
		case "tenant_flood":
			// Bounds for a machine also running the race-enabled tests of
			// every other package, counted from second 2 on as the
			// scenario's score is: fairness shows as the quiet tenants
			// served far better than the flood and most of them nearly
			// whole. One quiet tenant may fare worse (never worse than the
			// flood): shuffle sharding with a per-process seed lets a
			// tenant share a bucket with the flood, and a starved CI
			// machine once served one at 42% while the flood got 29%.
			flood, sum, poor := servedFrom(r.Streams[0].Summary, 2), 0.0, 0
			for _, s := range r.Streams[1:] {
				q := servedFrom(s.Summary, 2)
				sum += q
				if q < flood {
					t.Errorf("tenant flood: %s served %.0f%%, less than the flood's %.0f%%", s.Name, 100*q, 100*flood)
				}
				if q < 0.6 || q < 2*flood {
					poor++
				}
			}
			if poor > 1 {
				t.Errorf("tenant flood: %d quiet tenants served under 60%% or under twice the flood's %.0f%%, want at most one", poor, 100*flood)
			}
			if mean := sum / float64(len(r.Streams)-1); mean < 0.85 {
				t.Errorf("tenant flood: quiet tenants served %.0f%% on average, want most of their requests", 100*mean)
			}
		case "quota_wait":
			if n := r.Summary.Status["429"]; n > 0 {
				t.Errorf("quota wait: %d answered 429, want the burst to wait for the quota", n)
			}
		}
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3:\n%s", len(runs), b)
	}
}
