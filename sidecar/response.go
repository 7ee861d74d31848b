package sidecar

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// ProblemBase prefixes the type URIs of sluice's problem+json bodies.
const ProblemBase = "https://sluice.dev/problems"

// seconds rounds d up to whole seconds, at least 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// WriteHeaders sets the quota headers of the verdict's rule: the IETF
// RateLimit-Policy and RateLimit fields and the legacy X-RateLimit-*, and on
// a refusal Retry-After (omitted when no retry can succeed). A request that
// matched no rule gets none.
func (v *Verdict) WriteHeaders(h http.Header) {
	d := &v.Decision
	if !v.Allowed && (d.RetryAfter > 0 || v.Status == StatusShed) {
		h.Set("Retry-After", strconv.FormatInt(max(1, seconds(d.RetryAfter)), 10))
	}
	if d.RuleID == "" || d.RuleID == "adaptive_concurrency" {
		return
	}
	policy := `"` + d.RuleID + `";q=` + strconv.FormatInt(d.Limit, 10)
	if v.Window > 0 {
		policy += ";w=" + strconv.FormatInt(seconds(v.Window), 10)
	}
	h.Set("RateLimit-Policy", policy)
	reset := strconv.FormatInt(seconds(d.ResetAfter), 10)
	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Reset", reset)
	if d.Remaining >= 0 {
		rem := strconv.FormatInt(d.Remaining, 10)
		h.Set("RateLimit", `"`+d.RuleID+`";r=`+rem+`;t=`+reset)
		h.Set("X-RateLimit-Remaining", rem)
	}
}

// problem is an RFC 9457 problem details body.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies,omitempty"`
	Reason   string   `json:"reason"`
}

// WriteResponse writes a refused verdict's response: 429 or 503, the quota
// headers and an application/problem+json body.
func (v *Verdict) WriteResponse(w http.ResponseWriter) {
	h := w.Header()
	v.WriteHeaders(h)
	p := problem{Status: v.Status, Violated: v.Violated, Reason: v.Reason.String()}
	switch {
	case v.Status == StatusQuota:
		p.Type, p.Title = ProblemBase+"#quota-exceeded", "Too Many Requests"
		p.Detail = "A rate limit was exceeded; retry after the time in Retry-After."
		if v.Decision.RetryAfter == sluice.Never {
			p.Detail = "The request costs more than the rate limit allows at once; it cannot succeed as sent."
		}
	default:
		p.Type, p.Title = ProblemBase+"#temporary-reduced-capacity", "Service Unavailable"
		p.Detail = "The service is at capacity; the request was shed. Retry after the time in Retry-After."
		if v.Reason == sluice.ReasonStoreDown {
			p.Detail = "The rate limit store is unavailable and the rule fails closed."
		}
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(v.Status)
	_ = json.NewEncoder(w).Encode(p)
}
