package engine

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
)

// This file is the cost a response states (a rule's cost_from): what
// admission reserves, what a face reports of the response (ResponseCost),
// and the charge that corrects the reservation when the request ends.

// MaxCostBody bounds what is kept of a response body to read a JSON cost:
// a body longer than this (for a text/event-stream, one line) is charged
// its rule's cost_default. It is read as it streams; the client gets each
// byte as the upstream sends it.
const MaxCostBody = 1 << 20

// keptCostBody is the largest body buffer a pooled scratch keeps for the
// next request; a larger one goes to the garbage collector.
const keptCostBody = 256 << 10

// maxCost bounds a cost read from a response: more than any quota holds.
const maxCost = 1 << 40

// costRule is a rule's cost_from, compiled.
type costRule struct {
	from     config.CostFrom
	def      int64
	estimate config.CostEstimate
	// mean is the recent mean cost (float64 bits), for cost_estimate mean:
	// an exponentially weighted mean over about the last 16 answers.
	mean atomic.Uint64
}

func compileCost(cr *config.Rule) *costRule {
	if cr.CostFrom == nil {
		return nil
	}
	c := &costRule{from: *cr.CostFrom, def: 1, estimate: cr.CostEstimate}
	if cr.CostDefault != nil {
		c.def = *cr.CostDefault
	}
	return c
}

// reserve is what admission takes: the estimate, at least 1 (admission
// needs some quota left), at most the rule's capacity (a larger one could
// never be admitted).
func (c *costRule) reserve(capacity int64) int64 {
	n := c.estimate.N
	if c.estimate.Mean {
		n = int64(math.Ceil(math.Float64frombits(c.mean.Load())))
	}
	n = max(n, 1)
	if capacity > 0 {
		n = min(n, capacity)
	}
	return n
}

// observe folds an actual cost into the mean.
func (c *costRule) observe(x int64) {
	for {
		old := c.mean.Load()
		m := math.Float64frombits(old)
		if old == 0 {
			m = float64(x)
		} else {
			m += (float64(x) - m) / 16
		}
		if c.mean.CompareAndSwap(old, math.Float64bits(m)) {
			return
		}
	}
}

// admissionCost is what a request's check under r takes: its reservation
// when r reads the cost from the response, else 1.
func (r *rule) admissionCost() int64 {
	if r.cost == nil {
		return 1
	}
	return r.cost.reserve(r.nominalCap)
}

// costReason is why a response's cost could not be read.
type costReason uint8

const (
	costRead     costReason = iota // read
	costMissing                    // no header, no number at the path
	costInvalid                    // not a whole non-negative number, or bad JSON
	costTooLarge                   // a body (or an event line) over MaxCostBody
	costCut                        // the body did not end whole: a client gone, an upstream failed
	numCostReasons
)

var costReasonNames = [numCostReasons]string{"read", "missing", "invalid", "too_large", "cut"}

// costValue is what one matched rule read of the response.
type costValue struct {
	n      int64
	reason costReason
	set    bool
}

// ResponseCost is what a face tells the engine of an admitted request's
// response, for the rules that read their cost from it (cost_from): the
// headers (ReadHeaders), the body as it streams (Write), and whether it
// ended whole (Cut). The Verdict's Done charges the costs. A ResponseCost
// is the request's, valid until Done; its methods are not safe for
// concurrent use.
type ResponseCost struct {
	sc       *scratch
	start    time.Time // admission, for upstream_ms
	at       time.Time // when the store decided, for giving back
	fallback bool      // the store's failover decided
	wantBody bool      // a rule reads the body (JSON) or counts its bytes
	wantJSON bool
	sse      bool
	over     bool // the body passed MaxCostBody
	lineOver bool // the current event line passed MaxCostBody
	cut      bool
	bytes    int64
	body     []byte // the JSON body so far, or the current event line
}

// reset empties c for the next request, keeping a small buffer.
func (c *ResponseCost) reset() {
	body := c.body[:0]
	if cap(body) > keptCostBody {
		body = nil
	}
	*c = ResponseCost{body: body}
}

// ReadHeaders reads the cost of the rules that take it from a response
// header; get returns a header's value ("" when absent). Call it once the
// headers are known (a net/http handler's trailers are in its header map
// once it returns).
func (c *ResponseCost) ReadHeaders(get func(name string) string) {
	for i, r := range c.sc.matched {
		if r.cost == nil || r.cost.from.Kind != config.CostHeader {
			continue
		}
		v := get(r.cost.from.Name)
		if v == "" {
			c.sc.costs[i] = costValue{reason: costMissing, set: true}
			continue
		}
		n, ok := ParseCost(v)
		if !ok {
			c.sc.costs[i] = costValue{reason: costInvalid, set: true}
			continue
		}
		c.sc.costs[i] = costValue{n: n, set: true}
	}
}

// WantsBody reports whether a rule reads the response body (a JSON cost)
// or counts its bytes: the face then passes the body through Write.
func (c *ResponseCost) WantsBody() bool { return c.wantBody }

// SetContentType tells the body's media type, before the first Write: a
// text/event-stream is read event by event (the cost is the last event
// that has the path), any other as one JSON document.
func (c *ResponseCost) SetContentType(ct string) {
	mt, _, _ := strings.Cut(ct, ";")
	c.sse = strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// Write passes a piece of the response body, as it goes to the client. It
// keeps at most MaxCostBody bytes and never fails.
func (c *ResponseCost) Write(p []byte) (int, error) {
	c.bytes += int64(len(p))
	if !c.wantJSON {
		return len(p), nil
	}
	if !c.sse {
		if !c.over {
			if len(c.body)+len(p) > MaxCostBody {
				c.over, c.body = true, c.body[:0]
			} else {
				c.body = append(c.body, p...)
			}
		}
		return len(p), nil
	}
	for rest := p; len(rest) > 0; {
		i := strings.IndexByte(unsafeString(rest), '\n')
		if i < 0 {
			c.appendLine(rest)
			break
		}
		c.appendLine(rest[:i])
		c.endLine()
		rest = rest[i+1:]
	}
	return len(p), nil
}

func (c *ResponseCost) appendLine(p []byte) {
	if c.lineOver {
		return
	}
	if len(c.body)+len(p) > MaxCostBody {
		c.lineOver, c.body = true, c.body[:0]
		return
	}
	c.body = append(c.body, p...)
}

// endLine reads an event line: "data: {...}" that holds a rule's path sets
// its cost (the last such event wins).
func (c *ResponseCost) endLine() {
	line, over := c.body, c.lineOver
	c.body, c.lineOver = c.body[:0], false
	if over {
		for i, r := range c.sc.matched {
			if r.cost != nil && r.cost.from.Kind == config.CostJSON && !c.sc.costs[i].set {
				c.sc.costs[i] = costValue{reason: costTooLarge}
			}
		}
		return
	}
	data, ok := strings.CutPrefix(unsafeString(line), "data:")
	if !ok {
		return
	}
	data = strings.TrimSpace(data)
	if data == "" || data[0] != '{' || !shallowJSON(data) || !gjson.Valid(data) {
		return // [DONE], or not an object
	}
	for i, r := range c.sc.matched {
		if r.cost == nil || r.cost.from.Kind != config.CostJSON {
			continue
		}
		if v := gjson.Get(data, r.cost.from.Name); v.Exists() {
			n, ok := costOfJSON(v)
			if !ok {
				c.sc.costs[i] = costValue{reason: costInvalid, set: true}
				continue
			}
			c.sc.costs[i] = costValue{n: n, set: true}
		}
	}
}

// Cut says the body did not end whole (the client left, the upstream
// failed mid-body): a JSON cost not read by then is the rule's default.
func (c *ResponseCost) Cut() { c.cut = true }

// readBody reads the JSON costs once the body has ended.
func (c *ResponseCost) readBody() {
	if c.sse {
		if len(c.body) > 0 || c.lineOver {
			c.endLine() // a last line without its newline
		}
	}
	var doc string
	var valid bool
	for i, r := range c.sc.matched {
		if r.cost == nil || r.cost.from.Kind != config.CostJSON || c.sc.costs[i].set {
			continue
		}
		v := &c.sc.costs[i]
		switch {
		case c.sse && v.reason == costTooLarge:
		case c.cut:
			v.reason = costCut
		case c.sse:
			v.reason = costMissing
		case c.over:
			v.reason = costTooLarge
		default:
			if doc == "" {
				doc = unsafeString(c.body)
				valid = shallowJSON(doc) && gjson.Valid(doc)
			}
			res := gjson.Get(doc, r.cost.from.Name)
			switch {
			case !valid:
				v.reason = costInvalid
			case !res.Exists():
				v.reason = costMissing
			default:
				n, ok := costOfJSON(res)
				if !ok {
					v.reason = costInvalid
					continue
				}
				*v = costValue{n: n, set: true}
			}
		}
	}
}

// maxCostDepth bounds the nesting of a JSON body read for a cost: deeper
// documents are refused (invalid) before they are parsed, whose time grows
// with the depth faster than with the size.
const maxCostDepth = 64

// shallowJSON reports whether s nests objects and arrays at most
// maxCostDepth deep, in one pass over its bytes (strings skipped).
func shallowJSON(s string) bool {
	depth, inString := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			if depth++; depth > maxCostDepth {
				return false
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return true
}

// costOfJSON is the cost a JSON value states: a non-negative number (or a
// string holding one), rounded up.
func costOfJSON(v gjson.Result) (int64, bool) {
	var f float64
	switch v.Type {
	case gjson.Number:
		f = v.Num
	case gjson.String:
		n, ok := ParseCost(v.Str)
		return n, ok
	default:
		return 0, false
	}
	if !(f >= 0 && f <= maxCost) {
		return 0, false
	}
	return int64(math.Ceil(f)), true
}

// ParseCost reads a cost: a whole or decimal non-negative number (a
// fraction is rounded up), at most 2^40, with optional spaces around. It
// allocates nothing.
func ParseCost(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && (!dot || frac == "") || len(whole) > 13 || len(frac) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(whole); i++ {
		d := whole[i] - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + int64(d)
	}
	up := false
	for i := 0; i < len(frac); i++ {
		d := frac[i] - '0'
		if d > 9 {
			return 0, false
		}
		up = up || d != 0
	}
	if up {
		n++
	}
	if n > maxCost {
		return 0, false
	}
	return n, true
}

// unsafeString views b as a string, for reading it in place; b must not
// change while the string is in use.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// attachCost gives v the response cost of the matched rules that read it,
// when any does: the scratch then stays with the verdict until Done.
func (v *Verdict) attachCost(sc *scratch, res *static.Result, now time.Time) {
	if !sc.hasCost {
		return
	}
	c := &sc.cost
	c.sc, c.start, c.at, c.fallback = sc, now, res.At, res.Fallback != nil
	sc.costs = append(sc.costs[:0], make([]costValue, len(sc.matched))...)
	for _, r := range sc.matched {
		if r.cost == nil {
			continue
		}
		switch r.cost.from.Kind {
		case config.CostJSON:
			c.wantBody, c.wantJSON = true, true
		case config.CostResponseBytes:
			c.wantBody = true
		}
	}
	v.cost = c
}

// Cost is the admitted request's ResponseCost when a matched rule reads
// its cost from the response (cost_from), else nil.
func (v *Verdict) Cost() *ResponseCost {
	if !v.Allowed {
		return nil
	}
	return v.cost
}

// settle charges each cost_from rule the cost the response stated (or its
// default), less what admission reserved, in one store call; then the
// scratch goes back to the pool.
func (e *Engine) settle(c *ResponseCost, now time.Time) {
	sc := c.sc
	if c.wantJSON {
		c.readBody()
	}
	charges := sc.limits[:0] // compacted in place: a charge's index never passes its limit's
	for i, r := range sc.matched {
		l := sc.limits[i]
		if r.cost == nil {
			continue
		}
		actual, reason := c.actual(r.cost, sc.costs[i], now)
		if reason != costRead {
			r.counters.costUnread[reason].Add(1)
			actual = r.cost.def
		}
		r.counters.costCharged.Add(uint64(actual))
		r.cost.observe(actual)
		took := l.Cost
		if !sc.decisions[i].Allowed {
			took = 0 // a shadow limit that denied took nothing
		}
		delta := actual - took
		if delta < 0 && c.fallback {
			continue // taken from the local fallback: nothing to give back to the primary
		}
		if delta != 0 {
			l.Cost = delta
			charges = append(charges, l)
		}
	}
	if len(charges) > 0 {
		if err := e.store.Charge(context.Background(), charges, c.at); err != nil {
			e.chargeFailed(now, err)
		}
	}
	sc.reset()
	e.scratch.Put(sc)
}

// chargeFailed counts a charge the store could not record and logs it, at
// most once every chargeLogEvery with the count since (a store that is
// down fails every request's charge).
func (e *Engine) chargeFailed(now time.Time, err error) {
	e.metrics.storeErrors.Inc()
	n := e.chargeFails.Add(1)
	last := e.chargeLogged.Load()
	if now.UnixNano()-last < int64(chargeLogEvery) || !e.chargeLogged.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	e.chargeFails.Add(-n)
	e.log.Warn("charging costs learned from responses failed (the usage is not counted in the shared store)",
		"failures", n, "error", err.Error())
}

// chargeLogEvery spaces the log lines of failed charges.
const chargeLogEvery = 10 * time.Second

// actual is the cost of one rule as the response stated it.
func (c *ResponseCost) actual(r *costRule, v costValue, now time.Time) (int64, costReason) {
	switch r.from.Kind {
	case config.CostUpstreamMS:
		return int64(math.Ceil(float64(now.Sub(c.start)) / float64(time.Millisecond))), costRead
	case config.CostResponseBytes:
		return c.bytes, costRead // what was sent, whole or not
	}
	if !v.set {
		if v.reason == costRead {
			return 0, costMissing
		}
		return 0, v.reason
	}
	return v.n, v.reason
}
