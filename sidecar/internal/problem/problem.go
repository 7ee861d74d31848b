// Package problem is the RFC 9457 problem details body of a refused
// verdict, the same for both of the sidecar's proxy engines.
package problem

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// Base prefixes the type URIs of sluice's problem+json bodies.
const Base = "https://sluice.dev/problems"

// Body is an RFC 9457 problem details body.
type Body struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies,omitempty"`
	Reason   string   `json:"reason"`
	// Class is the priority class a shed request was in.
	Class string `json:"class,omitempty"`
}

// Of is a refused verdict's problem+json body.
func Of(v *engine.Verdict) Body {
	p := Body{Status: v.Status, Violated: v.Violated, Reason: v.Reason.String()}
	switch {
	case v.Status == engine.StatusQuota:
		p.Type, p.Title = Base+"#quota-exceeded", "Too Many Requests"
		p.Detail = "A rate limit was exceeded; retry after the time in Retry-After."
		if v.Decision.RetryAfter == sluice.Never {
			p.Detail = "The request costs more than the rate limit allows at once; it cannot succeed as sent."
		}
	default:
		p.Type, p.Title = Base+"#temporary-reduced-capacity", "Service Unavailable"
		p.Detail = "The service is at capacity; the request was shed. Retry after the time in Retry-After."
		p.Class = v.Class
		switch v.Reason {
		case sluice.ReasonStoreDown:
			p.Detail = "The rate limit store is unavailable and the rule fails closed."
		case sluice.ReasonDeadline:
			p.Detail = "The request's deadline would pass before it could be served; it was not sent to the service."
		}
	}
	return p
}
