package sidecar_test

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/sidecar"
)

// The middleware with BenchmarkMiddleware's ten rules allocates once per
// admitted request: the block of its quota headers (issue 29: 0-1).
func TestMiddlewareAllocatesOnce(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector makes sync.Pool drop items: make test runs this without it")
	}
	e := newEngine(t, tenRules, nil)
	h := sidecar.Middleware(e, okHandler)
	r := benchRequest(7)
	w := &headerOnly{h: http.Header{}}
	h.ServeHTTP(w, r)
	if n := testing.AllocsPerRun(500, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}); n > 1 {
		t.Errorf("%v allocations per request, want at most 1", n)
	}
}
