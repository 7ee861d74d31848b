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
