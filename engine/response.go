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

// headerBlock is one request's quota headers in one allocation: the
// one-element values handed to an http.Header (capped, so that an append by
// a later handler copies instead of writing into a neighbour) and the
// bytes of their numbers.
type headerBlock struct {
	vals [6]string
	n    int
	buf  [112]byte
}

func (b *headerBlock) set(h http.Header, canonicalKey, value string) {
	if b.n == len(b.vals) {
		h[canonicalKey] = []string{value}
		return
	}
	b.vals[b.n] = value
	h[canonicalKey] = b.vals[b.n : b.n+1 : b.n+1]
	b.n++
}

// WriteHeaders sets the quota headers of the verdict's rule: the IETF
// RateLimit-Policy and RateLimit fields and the legacy X-RateLimit-*, and on
// a refusal Retry-After (omitted when no retry can succeed). A request that
// matched no rule gets none. It allocates once: the values and the bytes of
// their numbers share one block (twice for a rule id too long for it).
func (v *Verdict) WriteHeaders(h http.Header) {
	if !v.hasHeaders() {
		return
	}
	b := new(headerBlock)
	v.eachHeader(b.buf[:0], func(canonicalKey, value string) { b.set(h, canonicalKey, value) })
}

// EachHeader calls set with each quota header WriteHeaders would write
// (canonical name, value), for HTTP engines without http.Header. The
// values share one buffer that is never written again; set may keep them.
func (v *Verdict) EachHeader(set func(canonicalKey, value string)) {
	v.EachHeaderIn(nil, set)
}

// EachHeaderIn is EachHeader with the values written into buf's spare
// capacity (a new buffer when it is too short for them): they are valid
// only until buf is written again, for HTTP engines that copy a header's
// value as they set it (fasthttp does), which then allocate nothing.
func (v *Verdict) EachHeaderIn(buf []byte, set func(canonicalKey, value string)) {
	if v.hasHeaders() {
		v.eachHeader(buf, set)
	}
}

// hasHeaders reports whether the verdict has quota headers to write.
func (v *Verdict) hasHeaders() bool {
	d := &v.Decision
	return !v.Allowed && (d.RetryAfter > 0 || v.Status == StatusShed) || d.RuleID != "" && d.RuleID != config.ReservedRuleID
}

// eachHeader is EachHeader, the numbers written into buf's spare capacity
// (a new buffer when it is too short). buf must not be written again.
func (v *Verdict) eachHeader(buf []byte, set func(canonicalKey, value string)) {
	d := &v.Decision
	retry := !v.Allowed && (d.RetryAfter > 0 || v.Status == StatusShed)
	quota := d.RuleID != "" && d.RuleID != config.ReservedRuleID
	own := v.rule != nil && v.rule.id == d.RuleID // its headers are precomputed
	var prefix string
	if own {
		prefix = v.rule.rateLimitPrefix
	} else {
		prefix = `"` + d.RuleID + `";r=`
	}
	if cap(buf) < len(prefix)+64 {
		buf = make([]byte, 0, len(prefix)+64)
	}
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
