// Package problem is the RFC 9457 problem details body of a refused
// verdict, the same for both of the sidecar's proxy engines.
package problem

import (
	"encoding/json"
	"strconv"

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

// Append appends v's problem+json body to dst as
// json.NewEncoder(w).Encode(Of(v)) writes it, newline and all, without
// reflection or allocation: a refusal is what an overloaded sidecar
// answers most, and the encoder's reflection and buffers were a twentieth
// of its CPU per shed request. A string that needs escaping (rule ids and
// class names are the config's, and may) is quoted by encoding/json itself.
func Append(dst []byte, v *engine.Verdict) []byte {
	p := Of(v)
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, p.Type)
	dst = append(dst, `,"title":`...)
	dst = appendString(dst, p.Title)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(p.Status), 10)
	dst = append(dst, `,"detail":`...)
	dst = appendString(dst, p.Detail)
	if len(p.Violated) > 0 {
		dst = append(dst, `,"violated-policies":[`...)
		for i, s := range p.Violated {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, s)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"reason":`...)
	dst = appendString(dst, p.Reason)
	if p.Class != "" {
		dst = append(dst, `,"class":`...)
		dst = appendString(dst, p.Class)
	}
	return append(dst, "}\n"...)
}

// appendString appends s as a JSON string: as is between quotes when no
// byte of it needs escaping (printable ASCII other than the quote, the
// backslash and the three characters encoding/json escapes for HTML),
// else as encoding/json quotes it.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil { // a string always marshals
				return append(dst, `""`...)
			}
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
