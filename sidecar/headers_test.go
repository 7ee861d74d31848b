package sidecar_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/static/statictest"
)

var (
	policyRE = regexp.MustCompile(`^"r";q=(\d+)(;w=(\d+))?$`)
	quotaRE  = regexp.MustCompile(`^"r";r=(\d+);t=(\d+)$`)
)

// Every algorithm in every mode sends headers that agree with each other
// and with themselves: 0 <= remaining <= limit, the IETF and legacy fields
// say the same, Retry-After on refusals only.
func TestHeadersEveryAlgorithmAndMode(t *testing.T) {
	algs := map[string]string{
		"fixed_window":   "window: 10s",
		"sliding_window": "window: 10s",
		"sliding_log":    "window: 10s",
		"token_bucket":   "window: 10s, burst: 20",
		"leaky_bucket":   "window: 10s, burst: 20, nodelay: true",
		"gcra":           "window: 10s, burst: 20",
		"semaphore":      "window: 10s",
		"concurrency":    "timeout: 0s",
	}
	for alg, extra := range algs {
		for _, mode := range []string{"hard", "soft", "elastic", "shadow"} {
			t.Run(alg+"/"+mode, func(t *testing.T) {
				clock := sluice.NewFakeClock(statictest.Start)
				e := newEngine(t, fmt.Sprintf(`
adaptive: {algorithm: fixed, initial_limit: 1000, max_limit: 1000}
rules:
  - {rule_id: r, identifier_type: global, algorithm: %s, limit: 10, %s, mode: %s, soft_percent: 50}
`, alg, extra, mode), clock)
				h := sidecar.Middleware(e, ok)
				for i := range 40 {
					w := do(h, "GET", "/")
					hd := w.Header()
					pm := policyRE.FindStringSubmatch(hd.Get("RateLimit-Policy"))
					qm := quotaRE.FindStringSubmatch(hd.Get("RateLimit"))
					if pm == nil || qm == nil {
						t.Fatalf("request %d (%d): RateLimit-Policy %q RateLimit %q", i, w.Code, hd.Get("RateLimit-Policy"), hd.Get("RateLimit"))
					}
					limit, _ := strconv.Atoi(pm[1])
					rem, _ := strconv.Atoi(qm[1])
					if rem < 0 || rem > limit {
						t.Errorf("request %d: remaining %d outside [0, limit %d]", i, rem, limit)
					}
					if hd.Get("X-RateLimit-Limit") != pm[1] || hd.Get("X-RateLimit-Remaining") != qm[1] || hd.Get("X-RateLimit-Reset") != qm[2] {
						t.Errorf("request %d: legacy headers %v disagree with %v %v", i, hd, pm, qm)
					}
					switch w.Code {
					case 200:
						if hd.Get("Retry-After") != "" {
							t.Errorf("request %d: Retry-After on an admitted response", i)
						}
					case 429:
						if mode == "shadow" {
							t.Errorf("request %d: a shadow rule denied", i)
						}
						if ra, err := strconv.Atoi(hd.Get("Retry-After")); err != nil || ra < 1 {
							if alg != "concurrency" || hd.Get("Retry-After") == "" {
								t.Errorf("request %d: 429 with Retry-After %q", i, hd.Get("Retry-After"))
							}
						}
					default:
						t.Errorf("request %d: status %d", i, w.Code)
					}
					clock.Advance(100 * time.Millisecond)
				}
			})
		}
	}
}
