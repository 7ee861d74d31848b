package tune

import (
	"testing"

	"github.com/sluicehq/sluice/config"
)

// TestRecommendedFallbackLeavesHeadroom: the recommended static cap holds
// the adaptive limit at its most and a full queue, and room beyond them for
// the requests that still hold their static slot for a moment after the
// queue refused them or their answer handed its slot on; a cap of exactly
// max_limit + max_size answered some arrivals at a full queue with 429 in
// CI (12 of 714 refusals) where the queue answers 503.
func TestRecommendedFallbackLeavesHeadroom(t *testing.T) {
	for _, c := range []struct {
		concurrency int
		peak        float64
	}{{4, 80}, {1, 5}, {50, 2000}, {400, 20000}} {
		res := &Result{Target: "http://127.0.0.1:9/x", SLOMS: 250, Knee: Step{P99MS: 120}, PeakGoodput: c.peak, NoLoadMS: 50, Concurrency: c.concurrency}
		r := recommend(res, Options{Target: res.Target})
		cfg, err := config.Parse("sluice.recommended.yaml", []byte(r.YAML))
		if err != nil {
			t.Fatalf("recommended configuration: %v\n%s", err, r.YAML)
		}
		if len(cfg.Rules) != 1 {
			t.Fatalf("rules %+v, want the fallback only", cfg.Rules)
		}
		queued := cfg.Adaptive.MaxLimit + *cfg.Queue.MaxSize
		limit := int(*cfg.Rules[0].Limit)
		if limit < queued+2 || limit < queued+queued/10 {
			t.Errorf("concurrency %d: fallback cap %d over max_limit %d + max_size %d: want a tenth more, at least 2", c.concurrency, limit, cfg.Adaptive.MaxLimit, *cfg.Queue.MaxSize)
		}
		if limit > 2*queued {
			t.Errorf("concurrency %d: fallback cap %d, more than twice max_limit + max_size %d: no longer a cap", c.concurrency, limit, queued)
		}
		// The SLO bounds a held closed loop's wait too.
		if w := *cfg.Queue.ClosedLoopMaxWait; w != cfg.Queue.MaxWait {
			t.Errorf("closed_loop_max_wait %v, want max_wait %v", w.D(), cfg.Queue.MaxWait.D())
		}
	}
}
