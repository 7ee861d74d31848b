package sidecar

import (
	"net/http"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar/internal/problem"
)

// ProblemBase prefixes the type URIs of sluice's problem+json bodies.
const ProblemBase = problem.Base

// WriteResponse writes a refused verdict's response: 429 or 503, the quota
// headers and an application/problem+json body.
func WriteResponse(w http.ResponseWriter, v *engine.Verdict) {
	h := w.Header()
	v.WriteHeaders(h)
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(v.Status)
	_, _ = w.Write(problem.Append(make([]byte, 0, 320), v))
}
