package sidecar_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/static/statictest"
)

func charged(e *engine.Engine, rule string) uint64 {
	for _, r := range e.State().Rules {
		if r.RuleID == rule {
			return r.CostCharged
		}
	}
	return 0
}

// The middleware reads a cost a handler states in a trailer (set after
// the body, with http.TrailerPrefix), counts the bytes it writes, and
// charges them when the handler returns.
func TestMiddlewareCostFromTrailerAndBytes(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: tokens, identifier_type: global, algorithm: fixed_window, limit: 100, window: 1h, cost_from: {header: X-Tokens-Used}}
  - {rule_id: bytes, identifier_type: ip_address, algorithm: fixed_window, limit: 100000, window: 1h, cost_from: response_bytes}
`, sluice.NewFakeClock(statictest.Start))
	h := sidecar.Middleware(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 700))
		w.Header().Set(http.TrailerPrefix+"X-Tokens-Used", "45")
	}))
	served := 0
	for range 4 {
		if w := do(h, "GET", "/"); w.Code == 200 {
			served++
		}
	}
	if served != 3 || charged(e, "tokens") != 135 || charged(e, "bytes") != 2100 {
		t.Errorf("served %d, charged tokens %d, bytes %d; want 3, 135, 2100", served, charged(e, "tokens"), charged(e, "bytes"))
	}
}

// Reading a cost from a response header and charging it adds no
// allocation to a request: the middleware with a cost_from rule allocates
// what it does without.
func TestCostFromHeaderAddsNoAllocation(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector makes sync.Pool drop items: make test runs this without it")
	}
	const plain = "adaptive: {algorithm: off}\nrules: [{rule_id: r, identifier_type: ip_address, algorithm: token_bucket, limit: 1000000000, window: 1h}]\n"
	const costed = "adaptive: {algorithm: off}\nrules: [{rule_id: r, identifier_type: ip_address, algorithm: token_bucket, limit: 1000000000, window: 1h, cost_from: {header: X-Tokens-Used}}]\n"
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Tokens-Used"] = []string{"3"}
		w.WriteHeader(200)
	})
	allocs := func(yaml string) float64 {
		e := newEngine(t, yaml, nil)
		h := sidecar.Middleware(e, next)
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		w := &headerOnly{h: http.Header{}}
		return testing.AllocsPerRun(200, func() {
			h.ServeHTTP(w, r)
			clear(w.h)
		})
	}
	base, cost := allocs(plain), allocs(costed)
	t.Logf("allocations per request: %v without cost_from, %v with", base, cost)
	if cost > base {
		t.Errorf("%v allocations per request with cost_from, %v without", cost, base)
	}
}

// headerOnly is a ResponseWriter that keeps nothing but its header map.
type headerOnly struct{ h http.Header }

func (w *headerOnly) Header() http.Header         { return w.h }
func (w *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerOnly) WriteHeader(int)             {}
