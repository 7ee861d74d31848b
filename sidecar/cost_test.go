package sidecar_test

import (
	"net/http"
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
