package tune_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/loadtest/backend"
	"github.com/sluicehq/sluice/loadtest/tune"
)

// TestTuneSimulatedBackend: against the simulated backend with C = 4 slots
// of 50 ms (80 requests/s at most), a session recommends a concurrency
// within a factor 2 of C, and sluice with the recommended configuration
// keeps p99 near the objective at three times the knee while the service
// time doubles, and keeps a closed loop's goodput.
func TestTuneSimulatedBackend(t *testing.T) {
	const slots = 4
	b, err := backend.New(backend.Model{Slots: slots, ServiceTime: 50 * time.Millisecond, Sigma: 0.25, Degrade: 0.1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b)
	defer srv.Close()
	var progress strings.Builder
	res, err := tune.Run(context.Background(), tune.Options{
		Target: srv.URL + "/work", SLOP99: 250 * time.Millisecond,
		StartRate: 10, Step: 1500 * time.Millisecond, Verify: 4 * time.Second, Budget: 60 * time.Second,
		Progress: &progress,
	})
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	// Bounds are generous: this runs in real time beside other tests on a
	// 2-core machine, where latency inflation moves the estimate.
	if c := res.Concurrency; c < slots/2 || c > slots*2 {
		t.Fatalf("recommended concurrency %d, want within a factor 2 of %d (peak goodput %.1f/s x no-load %.1fms)", c, slots, res.PeakGoodput, res.NoLoadMS)
	}
	if res.Knee.Rate > 80 || res.Knee.Rate < 15 || !res.Knee.Within {
		t.Fatalf("knee %+v: want a rate within the SLO below the capacity of 80/s", res.Knee)
	}
	if res.NoLoadMS < 45 || res.NoLoadMS > 150 {
		t.Fatalf("no-load latency %.1fms, want about 50ms", res.NoLoadMS)
	}
	v := res.Verification
	if v == nil || v.Goodput <= 0 {
		t.Fatalf("verification %+v: nothing succeeded through sluice at 3x the knee", v)
	}
	// The recommendation must hold p99 near the objective at 3x the knee
	// while the service time doubles. Without sluice this load answers at
	// the client's timeout (step 7, at 1.5x the knee, is already near
	// 3x the objective); the bound leaves room for a CPU-starved sluice
	// under the race detector beside other packages' tests, where one CI
	// run measured 355ms.
	if v.P99MS > 2*res.SLOMS {
		t.Fatalf("verification %+v: p99 %.1fms, want within 2x the objective %.1fms at 3x the knee", v, v.P99MS, res.SLOMS)
	}
	if v.Rejected == 0 {
		t.Fatalf("verification rejected nothing at %.1f/s: sluice was not in the path", v.Rate)
	}
	// The session itself asks 80% of a closed loop's direct goodput. The
	// test asks 30%: this phase follows the overload at once, and a probe
	// the limiter starts in it (the limit at 1-2 for a few hundred ms while
	// the queue, standing anew, drops) cost it up to 58% on this machine
	// (42-101% of direct in 14 runs, before and after session 11's changes;
	// BENCHMARKS.md). A sidecar that refused the closed loop gets 0%.
	if cl := v.ClosedLoop; cl == nil || cl.Clients < 2 || cl.Direct <= 0 || cl.Through < 0.3*cl.Direct {
		t.Fatalf("verification %+v, closed loop %+v: want a closed-loop phase that keeps >= 30%% of the direct goodput", v, v.ClosedLoop)
	}
	if v.Quota != 0 {
		t.Errorf("verification answered %d of %d rejections with 429: the fallback rule (limit %d) refused before the queue (max_limit %d + max_size %d)",
			v.Quota, v.Rejected, res.Recommendation.StaticCap, res.Recommendation.MaxLimit, res.Recommendation.QueueSize)
	}
	cfg, err := config.Parse("sluice.recommended.yaml", []byte(res.Recommendation.YAML))
	if err != nil {
		t.Fatalf("recommended configuration: %v\n%s", err, res.Recommendation.YAML)
	}
	if cfg.Adaptive.InitialLimit != res.Concurrency || cfg.Upstream != srv.URL || len(cfg.Rules) != 1 {
		t.Fatalf("configuration does not carry the recommendation: %+v", cfg)
	}
	if !strings.Contains(res.Recommendation.YAML, "Little's law") {
		t.Fatal("the configuration does not say where its values came from")
	}
	dir := t.TempDir()
	if err := tune.WriteReport(dir, res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tune.json", "report.html", "curve.png", "latency-curve.png", "verify/report.html", "verify/sluice.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("report: %v", err)
		}
	}
}

// TestTuneTargetDown fails at once with a message naming the target.
func TestTuneTargetDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	start := time.Now()
	_, err = tune.Run(context.Background(), tune.Options{Target: "http://" + addr + "/", SLOP99: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "not reachable") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %v, want one saying %s is not reachable", err, addr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v to notice", d)
	}
}

// TestTuneTargetErrors: a target that answers 500 fails the session.
func TestTuneTargetErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	defer srv.Close()
	_, err := tune.Run(context.Background(), tune.Options{Target: srv.URL, SLOP99: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("error %v, want one naming the 500", err)
	}
}

// TestTuneTargetFailsUnderLoad: a target that answers the probe and then
// fails stops the session with the failure.
func TestTuneTargetFailsUnderLoad(t *testing.T) {
	first := make(chan struct{}, 1)
	first <- struct{}{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-first:
		default:
			http.Error(w, "down", http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	_, err := tune.Run(context.Background(), tune.Options{Target: srv.URL, SLOP99: 100 * time.Millisecond, Step: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "failed") || !strings.Contains(err.Error(), "502") {
		t.Fatalf("error %v, want the failure rate and the 502", err)
	}
}

// TestTuneOptions rejects what cannot run.
func TestTuneOptions(t *testing.T) {
	for _, o := range []tune.Options{
		{Target: "http://127.0.0.1:1/"},
		{Target: "ftp://x/", SLOP99: time.Second},
		{Target: "http://127.0.0.1:1/", SLOP99: time.Second, Growth: 1},
		{Target: "http://127.0.0.1:1/", SLOP99: time.Second, StartRate: -1},
	} {
		if _, err := tune.Run(context.Background(), o); err == nil || strings.Contains(err.Error(), "reachable") {
			t.Errorf("%+v: error %v, want a complaint about the options", o, err)
		}
	}
}
