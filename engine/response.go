package engine

import (
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/config"
)

// seconds rounds d up to whole seconds, at least 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// policyHeader returns a RateLimit-Policy value: "<rule>";q=<limit>;w=<s>.
func policyHeader(rule string, limit int64, window time.Duration) string {
	p := `"` + rule + `";q=` + strconv.FormatInt(limit, 10)
	if window > 0 {
		p += ";w=" + strconv.FormatInt(seconds(window), 10)
	}
	return p
}

// quotaHeader is a RateLimit-Policy value and the limit it states.
type quotaHeader struct {
	limit int64
	value string
}

// policyHeaderFor returns the RateLimit-Policy value of r for the limit a
// decision reports (a bucket reports its capacity, not the configured rate),
// built once per limit seen last.
func (r *rule) policyHeaderFor(limit int64) string {
	if q := r.lastPolicy.Load(); q != nil && q.limit == limit {
		return q.value
	}
	q := &quotaHeader{limit: limit, value: policyHeader(r.id, limit, r.window)}
	r.lastPolicy.Store(q)
	return q.value
}

// headerValues hands out one-element header values from one backing array
// (capped, so that an append by a later handler copies instead of writing
// into a neighbour).
type headerValues []string

func (hv *headerValues) set(h http.Header, canonicalKey, value string) {
	*hv = append(*hv, value)
	n := len(*hv)
	h[canonicalKey] = (*hv)[n-1 : n : n]
}

// WriteHeaders sets the quota headers of the verdict's rule: the IETF
// RateLimit-Policy and RateLimit fields and the legacy X-RateLimit-*, and on
// a refusal Retry-After (omitted when no retry can succeed). A request that
// matched no rule gets none. It allocates twice: the values' backing array
// and one buffer for the numbers.
func (v *Verdict) WriteHeaders(h http.Header) {
	hv := headerValues(nil)
	v.EachHeader(func(canonicalKey, value string) {
		if hv == nil {
			hv = make(headerValues, 0, 6)
		}
		hv.set(h, canonicalKey, value)
	})
}

// EachHeader calls set with each quota header WriteHeaders would write
// (canonical name, value), for HTTP engines without http.Header. The
// values share one buffer that is never written again; set may keep them.
func (v *Verdict) EachHeader(set func(canonicalKey, value string)) {
	d := &v.Decision
	retry := !v.Allowed && (d.RetryAfter > 0 || v.Status == StatusShed)
	quota := d.RuleID != "" && d.RuleID != config.ReservedRuleID
	if !retry && !quota {
		return
	}
	own := v.rule != nil && v.rule.id == d.RuleID // its headers are precomputed
	var prefix string
	if own {
		prefix = v.rule.rateLimitPrefix
	} else {
		prefix = `"` + d.RuleID + `";r=`
	}
	buf := make([]byte, 0, len(prefix)+64)
	if retry {
		buf = strconv.AppendInt(buf, max(1, seconds(d.RetryAfter)), 10)
		set("Retry-After", unsafe.String(&buf[0], len(buf)))
	}
	if !quota {
		return
	}
	if own {
		set("Ratelimit-Policy", v.rule.policyHeaderFor(d.Limit))
	} else {
		set("Ratelimit-Policy", policyHeader(d.RuleID, d.Limit, v.Window))
	}
	// One buffer holds `"<rule>";r=<remaining>;t=<reset>` and the limit;
	// the legacy headers are views of its numbers.
	start := len(buf)
	buf = append(buf, prefix...)
	remStart := len(buf)
	buf = strconv.AppendInt(buf, d.Remaining, 10)
	remEnd := len(buf)
	buf = append(buf, ";t="...)
	resetStart := len(buf)
	buf = strconv.AppendInt(buf, seconds(d.ResetAfter), 10)
	resetEnd := len(buf)
	buf = strconv.AppendInt(buf, d.Limit, 10)
	limitEnd := len(buf)
	view := func(i, j int) string { return unsafe.String(&buf[i], j-i) }
	set("X-Ratelimit-Limit", view(resetEnd, limitEnd))
	set("X-Ratelimit-Reset", view(resetStart, resetEnd))
	if d.Remaining >= 0 {
		set("Ratelimit", view(start, resetEnd))
		set("X-Ratelimit-Remaining", view(remStart, remEnd))
	}
}
