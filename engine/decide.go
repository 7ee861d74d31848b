package engine

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/static"
)

// This file is the request path up to forwarding: identify, match, one
// static check, throttling modes, delay, adaptive gate; and what ends an
// admitted request. It imports no net/http: every face (the proxy, the
// middleware, /v1/check, a faster HTTP engine) reaches it through Request.

// scratch is one request's working memory, pooled: the matching rules,
// their limits and decisions.
type scratch struct {
	// keys holds the limits' keys back to back, keyEnds where each ends;
	// reused from request to request (a store copies a key it keeps past
	// the call: static.Limit.Key). Offsets, not strings, until every key
	// is written: the buffer may move as it grows, and offsets are no
	// pointers for the garbage collector's write barrier.
	keys      []byte
	keyEnds   []int
	limits    []static.Limit
	matched   []*rule
	decisions []sluice.Decision
	// hasCost: a matched rule reads its cost from the response; cost is
	// then the verdict's (the scratch stays with it until Done, and
	// decisions say which limits took quota), costs what each matched
	// rule read.
	hasCost bool
	cost    ResponseCost
	costs   []costValue
}

func newScratch() any {
	return &scratch{limits: make([]static.Limit, 0, maxInlineRules), matched: make([]*rule, 0, maxInlineRules),
		decisions: make([]sluice.Decision, 0, maxInlineRules), keyEnds: make([]int, 0, maxInlineRules), keys: make([]byte, 0, 256)}
}

func (sc *scratch) reset() {
	// Not cleared: the limits' keys point into sc.keys, their policies and
	// the rules are a rule set's, kept at most until the pool drops the
	// scratch (two garbage collections); clearing cost a write barrier a
	// pointer while the collector marks.
	sc.limits, sc.matched, sc.decisions, sc.keyEnds, sc.keys = sc.limits[:0], sc.matched[:0], sc.decisions[:0], sc.keyEnds[:0], sc.keys[:0]
	if sc.hasCost {
		sc.hasCost = false
		sc.cost.reset()
		sc.costs = sc.costs[:0]
	}
}

// appendKey writes the next limit's key, "{<prefix><value|ip>}:<rule id>",
// to the key buffer.
func (sc *scratch) appendKey(prefix, value string, ip []byte, ruleID string) {
	buf := append(sc.keys, '{')
	buf = append(buf, prefix...)
	buf = append(buf, value...)
	buf = append(buf, ip...)
	buf = append(buf, '}', ':')
	buf = append(buf, ruleID...)
	sc.keys = buf
	sc.keyEnds = append(sc.keyEnds, len(buf))
}

// setKeys points every limit's Key at its bytes in the key buffer, once
// all are written: no allocation once the buffer has grown to the
// requests' size. The keys live until the scratch is reused (stores copy a
// key they keep past the call; see static.Limit.Key).
func (sc *scratch) setKeys() {
	start := 0
	for i, end := range sc.keyEnds {
		sc.limits[i].Key = unsafe.String(&sc.keys[start], end-start)
		start = end
	}
}

// Status codes of a Verdict.
const (
	StatusQuota = 429 // a rule's quota is used up
	StatusShed  = 503 // shed for overload, or the store is down and the rule fails closed
)

// Verdict is the engine's answer for one request.
type Verdict struct {
	// Allowed: forward the request (after Delay), then call Done.
	Allowed bool
	// Status is 429 or 503 when not allowed.
	Status int
	// Decision describes the deciding (or tightest) rule, for headers.
	Decision sluice.Decision
	// Window is the deciding rule's window, for the RateLimit-Policy header.
	Window time.Duration
	// Violated lists the rule ids that denied. It may share its array
	// with the engine's rules: read it, append to it, never write into it.
	Violated []string
	// Reason is why a request was refused.
	Reason sluice.Reason
	// Class is the request's priority class when the configuration has
	// classes ("" without): the class that was shed, for a shed 503.
	Class string

	e    *Engine
	rule *rule // the deciding rule, for its precomputed headers
	// deadline is when the client gives up (zero: no deadline), read from
	// the headers rs.deadlines.from whose bits deadlineFrom has.
	deadline     time.Time
	deadlineFrom uint8
	rs           *ruleSet
	static       sluice.Permit
	permit       adaptive.Permit
	started      time.Time
	// cost, when a matched rule reads its cost from the response, is what
	// the face reports of it; Done charges it.
	cost *ResponseCost
}

// ErrAmbiguous is what every error for a request that the rules and the
// service could read apart is (errors.Is): ErrAmbiguousPath, and a header
// the configuration reads sent more than once. The HTTP faces answer 400.
var ErrAmbiguous = errors.New("ambiguous request")

// ambiguousError is an ErrAmbiguous with its own message.
type ambiguousError string

func (e ambiguousError) Error() string        { return string(e) }
func (e ambiguousError) Is(target error) bool { return target == ErrAmbiguous }

// ErrAmbiguousPath is Decide's error for a path that routers disagree on
// (see CanonicalPath): the HTTP face answers 400.
var ErrAmbiguousPath error = ambiguousError("ambiguous request path: backslash, control character or dot segment with parameters")

// ambiguousHeader is Decide's error for a request that sent a header the
// configuration reads (an identifier, the user or API key header, a
// required header) more than once: the rules would read the first, and a
// service may read the last or all of them, so a client could be another
// identity to each (X-Api-Key: junk, then its key).
func ambiguousHeader(name string) error {
	return ambiguousError("ambiguous request: header " + name + " sent more than once")
}

// maxInlineRules is how many matching rules a request handles on the stack;
// more are handled on the heap.
const maxInlineRules = 16

// Decide runs the request path of docs/ARCHITECTURE.md up to forwarding: identify,
// match, one static check for all matching rules, throttling modes, the
// leaky-bucket or semaphore delay, and the adaptive gate with its queue. An
// error means the client went away (ctx ended) while waiting, or the path
// or a header the configuration reads is ambiguous (ErrAmbiguous).
func (e *Engine) Decide(ctx context.Context, req *Request) (Verdict, error) {
	return e.decide(ctx, req, decideFull)
}

// CheckStatic decides the request's static limits only (no adaptive gate,
// no delay held): the admin port's /v1/check. With consume false it is a
// dry run: the answer is what the request would get, and nothing is taken
// or counted. With consume true (for proxies that forward the request
// themselves) an allowed Verdict's quota is taken, Decision.Delay says how
// long to hold the request first, and the caller must call Done.
func (e *Engine) CheckStatic(ctx context.Context, req *Request, consume bool) (Verdict, error) {
	if consume {
		return e.decide(ctx, req, decideStatic)
	}
	return e.decide(ctx, req, decideDry)
}

// DecideStatic decides the request's static limits only, as Decide does
// them: a rule's max_wait waits for its quota and a leaky-bucket or
// reservation delay is held before it returns (given back if ctx ends
// first); no adaptive gate. For long-lived requests that the adaptive
// limit must not measure (gRPC streams). Call Done on an allowed Verdict.
func (e *Engine) DecideStatic(ctx context.Context, req *Request) (Verdict, error) {
	return e.decide(ctx, req, decideHeld)
}

// ErrWouldWait is DecideNow's error for a request Decide would have queued
// for an adaptive slot.
var ErrWouldWait = errors.New("no adaptive slot free: the request would wait in the queue")

// DecideNow is Decide without waiting, for a caller that keeps its own
// time (sluice replay): a rule's max_wait is not waited for (its refusal
// comes back, with RetryAfter), a delay is not held (Decision.Delay says
// it), and a request with no adaptive slot free at once gets ErrWouldWait,
// with what its static check took given back and its class in the
// verdict. Call Done on an allowed Verdict.
func (e *Engine) DecideNow(ctx context.Context, req *Request) (Verdict, error) {
	return e.decide(ctx, req, decideNow)
}

// decideMode is how far decide goes.
type decideMode uint8

const (
	decideFull   decideMode = iota // static check, delay, adaptive gate
	decideHeld                     // static check, delay; no gate
	decideStatic                   // static check only, taken
	decideDry                      // static check only, nothing taken
	decideNow                      // static check, adaptive gate, no waiting
)

// waits reports whether a decision of this mode waits: for quota (a rule's
// max_wait) and out the delay the store gave.
func (m decideMode) waits() bool { return m == decideFull || m == decideHeld }

func (e *Engine) decide(ctx context.Context, req *Request, mode decideMode) (Verdict, error) {
	sc := e.scratch.Get().(*scratch)
	v, err := e.decideWith(ctx, req, mode, sc)
	if v.cost == nil {
		sc.reset()
		e.scratch.Put(sc)
	}
	return v, err
}

func (e *Engine) decideWith(ctx context.Context, req *Request, mode decideMode, sc *scratch) (Verdict, error) {
	gate := mode == decideFull || mode == decideNow
	rs := e.rules.Load()
	path, ok := CanonicalPath(req.Path)
	if !ok {
		return Verdict{}, ErrAmbiguousPath
	}
	req.ambiguous = ""
	ip := rs.identity.clientIP(req)
	user := rs.identity.user(req)
	spare := e.limiter == nil || e.limiter.Spare(rs.headroom)
	sc.match(rs, req, path, ip, user, mode == decideDry, spare)
	limits, matched := sc.limits, sc.matched
	var taken static.Reservation // what the static check took, given back if the gate refuses
	var costRes static.Result    // the check's result, for a cost the response states
	var checked time.Time        // when the static check ended: the start, when nothing waited after it
	v := Verdict{Allowed: true, e: e, static: sluice.NopPermit{}, Decision: sluice.Decision{Allowed: true, Remaining: -1}}
	class := -1
	if gate && e.limiter != nil && len(rs.classes) > 0 {
		class = rs.classOf(req, path, ip, user)
		v.Class = rs.classes[class].name
	}
	if req.ambiguous != "" {
		return Verdict{}, ambiguousHeader(req.ambiguous)
	}
	w := waitCtx{parent: ctx}
	defer w.stop()
	if mode.waits() && rs.deadlines.on {
		var refused bool
		if w.latest, refused = e.readDeadline(rs, req, class, gate, &v); refused {
			return e.deadlineRefusal(v.Class, "arrival", e.rtt()), nil
		}
	}
	if len(limits) > 0 {
		sc.setKeys()
		each := slices.Grow(sc.decisions, len(limits))[:len(limits)]
		sc.decisions = each
		qctx := ctx
		if quotaWaits(matched) {
			qctx = w.get()
		}
		res, at, err := e.checkWaiting(qctx, mode, matched, limits, each)
		checked = at
		if err != nil {
			return e.deadlineOr(ctx, v.Class, err)
		}
		v.static = res.Permit
		if mode != decideDry {
			e.account(matched, limits, each, res.Allowed)
		}
		if !v.takeStatic(matched, limits, each, res) {
			return v, nil
		}
		if !gate && !mode.waits() {
			if mode != decideDry {
				v.attachCost(sc, &res, checked)
			}
			return v, nil
		}
		taken = static.Reserved(e.store, limits, res)
		costRes = res
		if taken.Delay() > 0 {
			checked = time.Time{}
		}
		if mode.waits() {
			hctx := ctx
			if taken.Delay() > 0 {
				hctx = w.get()
			}
			if err := taken.Wait(hctx); err != nil {
				return e.deadlineOr(ctx, v.Class, err)
			}
		}
	}
	if gate && e.limiter != nil {
		c := max(class, 0)
		p, ok := e.queue.TryAcquire(c)
		if !ok && mode == decideNow {
			taken.Cancel(ctx)
			return Verdict{Class: v.Class}, ErrWouldWait
		}
		if !ok {
			// It waits: under the deadline's context, if it has one.
			qctx := w.get()
			var err error
			checked = time.Time{}
			if p, err = e.queue.AcquireAs(qctx, c, rs.tenant(req, ip, user)); err != nil {
				// Not served after all: the static quota and slots go back.
				taken.Cancel(ctx)
				if qctx.Err() != nil {
					return e.deadlineOr(ctx, v.Class, qctx.Err())
				}
				return e.shed(err, c, v.Class), nil
			}
		}
		v.permit = p
	}
	v.started = checked
	if checked.IsZero() {
		v.started = e.clock.Now()
	}
	v.attachCost(sc, &costRes, v.started)
	return v, nil
}

// match appends the limits of the HTTP rules req matches (dry: a dry
// run's, noting no demand; spare: the service has room, for elastic
// rules) and their keys to the scratch.
func (sc *scratch) match(rs *ruleSet, req *Request, path string, ip netip.Addr, user string, dry, spare bool) {
	var ipBuf [48]byte
	var ipText []byte // the client address as ip_address rules key it, once one needs it
	for _, r := range rs.http {
		if !r.match.match(req, path, ip, user) {
			continue
		}
		prefix, value, useIP, ok := r.identifier(rs, req, ip, user)
		if !ok {
			continue
		}
		if len(value) > MaxIdentifierBytes {
			value = hashIdentifier(value)
		}
		var ipKey []byte
		if useIP {
			if ipText == nil {
				ipText = rs.identity.keyAddr(ip).AppendTo(ipBuf[:0])
			}
			ipKey = ipText
		}
		sc.limits = append(sc.limits, r.limit(r.admissionCost(), dry, spare))
		sc.matched = append(sc.matched, r)
		sc.hasCost = sc.hasCost || r.cost != nil
		sc.appendKey(prefix, value, ipKey, r.id)
	}
}

// readDeadline reads req's deadline into v and returns the latest start
// that can still finish: the deadline less the service's median at the
// adaptive gate (gate), the deadline itself for a request the gate does
// not measure; zero without a deadline. It reports refused when the
// request should not wait at all: its deadline has passed or, at the
// gate, the expected wait plus the median exceed it.
func (e *Engine) readDeadline(rs *ruleSet, req *Request, class int, gate bool, v *Verdict) (latest time.Time, refused bool) {
	budget, present, ok := rs.deadlines.budget(req, class, e.metrics.deadlineBad.Inc)
	if !ok {
		return time.Time{}, false
	}
	// Wall time, as the queue's and quota lines' timers use: a test on
	// testing/synctest runs them all on virtual time.
	v.deadline, v.deadlineFrom, v.rs = time.Now().Add(budget), present, rs
	rtt := e.rtt()
	if budget <= 0 || (gate && rtt > 0 && e.expectedWait(rtt)+rtt > budget) {
		return time.Time{}, true
	}
	if gate {
		// A request the adaptive limit measures will take about the
		// median; a stream (DecideStatic) may take any time.
		return v.deadline.Add(-rtt), false
	}
	return v.deadline, false
}

// quotaWaits reports whether a check of these rules may wait in a key's
// line (a rule's max_wait without a reservation).
func quotaWaits(matched []*rule) bool {
	for _, r := range matched {
		if r.maxWait > 0 && r.reserve == 0 {
			return true
		}
	}
	return false
}

// rtt is the service's median round trip as the adaptive limit last
// measured it; 0 when unknown or without one.
func (e *Engine) rtt() time.Duration {
	if e.limiter == nil {
		return 0
	}
	return e.limiter.RTT()
}

// shed is the verdict of a request the adaptive gate refused (err, the
// queue's) in class c (className its name).
func (e *Engine) shed(err error, c int, className string) Verdict {
	e.metrics.shed.Add(1)
	if e.part != nil {
		e.shedByClass[c].Add(1)
	}
	reason := sluice.ReasonOverload
	switch {
	case errors.Is(err, queue.ErrFull):
		reason = sluice.ReasonQueueFull
	case errors.Is(err, queue.ErrTimeout):
		reason = sluice.ReasonQueueTimeout
	}
	return Verdict{Status: StatusShed, Reason: reason, Class: className, Decision: sluice.Decision{
		RuleID: config.ReservedRuleID, Limit: int64(e.limiter.Limit()), Remaining: 0,
		RetryAfter: time.Second, Reason: reason}}
}

// expectedWait is how long a request arriving now would wait for an
// adaptive slot: none while one is free and nobody waits, else its place
// in the queue at the rate the service ends requests (limit / rtt, by
// Little's law). An estimate from lock-free counters.
func (e *Engine) expectedWait(rtt time.Duration) time.Duration {
	limit, waiting := e.limiter.Limit(), e.queue.Waiting()
	if waiting == 0 && e.limiter.InFlight() < limit {
		return 0
	}
	return time.Duration(waiting+1) * rtt / time.Duration(max(limit, 1))
}

// deadlineRefusal is the verdict for a request its client's deadline
// leaves no time for (where: arrival or queue); rtt, the service's median,
// is the work spared.
func (e *Engine) deadlineRefusal(class, where string, rtt time.Duration) Verdict {
	e.metrics.deadlineRefused.WithLabelValues(where).Inc()
	e.metrics.deadlineSpared.Add(rtt.Seconds())
	limit := int64(0)
	if e.limiter != nil {
		limit = int64(e.limiter.Limit())
	}
	return Verdict{Status: StatusShed, Reason: sluice.ReasonDeadline, Class: class, Decision: sluice.Decision{
		RuleID: config.ReservedRuleID, Limit: limit, Remaining: 0, RetryAfter: time.Second, Reason: sluice.ReasonDeadline}}
}

// deadlineOr turns err, a wait's end, into a deadline refusal when the
// deadline ended it (parent, the caller's context, still lives), else
// returns it: the client left (the verdict, not allowed, names only the
// request's class).
func (e *Engine) deadlineOr(parent context.Context, class string, err error) (Verdict, error) {
	if parent.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return e.deadlineRefusal(class, "queue", e.rtt()), nil
	}
	return Verdict{Class: class}, err
}

// limit is the rule's limit for a request of cost (its key is set later):
// its policy (a global rule's regional budget, whose demand it notes unless
// dry), and its mode: shadow never denies, elastic not while the service
// has spare capacity.
func (r *rule) limit(cost int64, dry, spare bool) static.Limit {
	l := static.Limit{RuleID: r.id, Policy: r.policy, Cost: cost, OnError: r.onError, DryRun: dry, Reserve: r.reserve, Local: r.local}
	if r.budget != nil {
		l.Policy = r.budget.Policy()
		if !dry {
			r.budget.Note(cost)
		}
	}
	switch r.mode {
	case modeShadow:
		l.Shadow = true
	case modeElastic:
		l.Shadow = spare
	}
	return l
}

// takeStatic sets the verdict from a static check: the deciding (or
// tightest) rule's decision, its configured quota for a soft rule, and on a
// refusal the status and the rules that denied. It reports whether the
// check admitted the request.
func (v *Verdict) takeStatic(matched []*rule, limits []static.Limit, each []sluice.Decision, res static.Result) bool {
	v.Decision = res.Decision
	if r := decidingRule(matched, res); r != nil {
		v.Window, v.rule = r.window, r
		if r.mode == modeSoft {
			// Report the configured quota, not the soft allowance.
			v.Decision.Limit = r.nominalCap
			v.Decision.Remaining = min(max(0, v.Decision.Remaining-r.softExtra), r.nominalCap)
		}
	}
	if res.Allowed {
		return true
	}
	v.Allowed, v.Reason = false, res.Reason
	v.Status = StatusQuota
	if res.Reason == sluice.ReasonStoreDown {
		v.Status = StatusShed
	}
	for i := range each {
		if each[i].Allowed || limits[i].Shadow {
			continue
		}
		if v.Violated == nil && i < len(matched) && matched[i].alone != nil && matched[i].id == limits[i].RuleID {
			v.Violated = matched[i].alone // shared, capacity 1: the next append copies
		} else {
			v.Violated = append(v.Violated, limits[i].RuleID)
		}
	}
	return false
}

// checkWaiting checks the static limits once and, when a rule with
// max_wait denies (a quota, not a store failure), waits in that key's line
// for the quota to come back and checks again at the retry time the store
// gave, until admitted or max_wait would pass: "rejected with 429 or
// enqueued to be processed later". A newcomer whose key has a line waits
// behind it before checking, so a key's quota goes to its waiters in
// arrival order. Only decisions that wait do (not /v1/check).
//
// It returns, with the result, when the last check ended.
func (e *Engine) checkWaiting(ctx context.Context, mode decideMode, matched []*rule, limits []static.Limit, each []sluice.Decision) (static.Result, time.Time, error) {
	waits := mode.waits() && waitsInLine(matched)
	w := quotaWait{q: &e.quota, ctx: ctx}
	defer w.leave()
	if waits {
		in, err := w.joinBusy(matched, limits)
		if err != nil {
			return static.Result{}, time.Time{}, err
		}
		waits = in // the line is too long: check once, no wait
	}
	backoff := 5 * time.Millisecond
	for {
		res, at, err := e.checkStore(ctx, limits, each)
		if err != nil || res.Allowed || !waits || res.Reason == sluice.ReasonStoreDown || res.Decision.RetryAfter == sluice.Never {
			return res, at, err
		}
		r := decidingRule(matched, res)
		if r == nil || r.maxWait <= 0 || r.reserve > 0 || res.Index < 0 || res.Index >= len(limits) {
			return res, at, nil
		}
		if w.turn == nil {
			first := max(res.Decision.RetryAfter, 0)
			if first > r.maxWait {
				return res, at, nil // the quota comes back too late
			}
			in, waited, err := w.join(limits[res.Index].Key, r, first)
			if err != nil || !in {
				return res, at, err // !in: too many wait already
			}
			if waited {
				continue // behind others meanwhile: check again before sleeping
			}
		}
		wait := res.Decision.RetryAfter
		if wait <= 0 {
			// No retry time (a concurrency limit frees on a release):
			// look again after a short, growing pause.
			wait, backoff = backoff, min(2*backoff, 100*time.Millisecond)
		}
		if time.Now().Add(wait).After(w.deadline) {
			return res, at, nil
		}
		if !sleepUntil(ctx, wait) {
			return res, at, ctx.Err()
		}
	}
}

// checkStore is one check of the store, timed and its fallbacks counted;
// it returns when the check ended.
func (e *Engine) checkStore(ctx context.Context, limits []static.Limit, each []sluice.Decision) (static.Result, time.Time, error) {
	start := e.clock.Now()
	res, err := e.store.Check(ctx, limits, each)
	end := res.At
	if !e.storeReadsClock || err != nil || end.Before(start) {
		end = e.clock.Now()
	}
	e.metrics.storeLatency.Observe(end.Sub(start))
	if err == nil && res.Fallback != nil {
		e.metrics.storeErrors.Inc()
	}
	return res, end, err
}

// decidingRule returns the rule of the limit the store's result names
// (res.Index). A Store of the caller's own that does not set Index is
// looked up by rule id instead.
func decidingRule(matched []*rule, res static.Result) *rule {
	if i := res.Index; i >= 0 && i < len(matched) && matched[i].id == res.RuleID {
		return matched[i]
	}
	for _, r := range matched {
		if r.id == res.RuleID {
			return r
		}
	}
	return nil
}

// account counts the decisions per rule and logs shadow denials.
func (e *Engine) account(matched []*rule, limits []static.Limit, each []sluice.Decision, admitted bool) {
	if e.observe != nil {
		e.observe(Observations{Admitted: admitted, rules: matched, limits: limits, decisions: each})
	}
	for i, r := range matched {
		d := &each[i]
		switch {
		case !d.Allowed && limits[i].Shadow:
			r.counters.wouldDeny.Add(1)
			if r.mode == modeShadow {
				e.log.Info("shadow rule would deny", "rule", r.id, "limit", d.Limit, "retry_after", d.RetryAfter)
			}
		case !d.Allowed:
			r.counters.denied.Add(1)
		case !admitted:
			r.counters.notCounted.Add(1)
		default:
			r.counters.allowed.Add(1)
			if d.Limit > 0 && d.Remaining*10 < d.Limit {
				r.counters.nearLimit.Add(1)
			}
			if r.budget != nil {
				r.budget.Admitted(limits[i].Policy, *d)
			}
		}
	}
}

// Done ends an admitted request: it releases what the request held and
// feeds the outcome and round-trip time to the adaptive limit. Call it
// exactly once for an allowed Verdict.
func (v *Verdict) Done(o sluice.Outcome) {
	if !v.Allowed || v.e == nil {
		return
	}
	now := v.e.clock.Now()
	v.e.metrics.upstreamLatency.Observe(now.Sub(v.started))
	v.permit.ReleaseAt(o, now.UnixNano()) // the limiter reads the engine's clock
	v.static.Release(o)
	if v.cost != nil {
		// After the releases: a charge's round trip is not the service's
		// time, and holds no slot.
		v.e.settle(v.cost, now)
		v.cost = nil
	}
	v.e = nil
}

// RestartClock restarts an admitted request's round-trip time for the
// adaptive limit: the HTTP face calls it when a streamed upload ends, so
// that the client's upload time is not counted as the service's.
func (v *Verdict) RestartClock() {
	if v.Allowed {
		v.permit.Restart()
	}
}

// OutcomeOf classifies an upstream response: timeouts (504), unavailability
// (502, 503) and upstream throttling (429) signal overload; other 4xx say
// nothing about load; the rest is a valid latency sample.
func OutcomeOf(status int) sluice.Outcome {
	switch {
	case status == 429 || status == 502 || status == 503 || status == 504:
		return sluice.Dropped
	case status >= 400 && status < 500:
		return sluice.Ignore
	}
	return sluice.Success
}

// Slot is an admitted request's place under the adaptive limit, as a small
// handle (Verdict.Slot) a face keeps to give the place back once the
// service's answer shows the request has become a stream (IsStream).
type Slot struct{ p adaptive.Permit }

// Slot returns v's place under the adaptive limit; the Slot of a request
// the adaptive limit did not admit holds nothing.
func (v *Verdict) Slot() Slot { return Slot{v.permit} }

// Free gives the place back now, before Done: the service answered with a
// stream, which may stay open for as long as its client wants without using
// the capacity the adaptive limit measures, and would otherwise hold the
// limit's places until they read as a hang. A static concurrency limit
// still counts the request until Done. Free is no latency sample; it may be
// called more than once, and Done after it gives back the rest.
func (s Slot) Free() { s.p.Free() }

// IsStream reports whether a response with status and Content-Type
// contentType is a stream that frees its adaptive slot once answered: a
// switch to another protocol (101: a WebSocket, an upgraded connection) or
// a successful text/event-stream.
func IsStream(status int, contentType string) bool {
	if status == 101 {
		return true
	}
	if status < 200 || status > 299 {
		return false
	}
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}
