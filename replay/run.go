package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/replay/logfmt"
	"github.com/sluicehq/sluice/static"
)

// run is one configuration's replay: its engine on a simulated clock, the
// requests it holds (served, waiting), and what it counts.
type run struct {
	cfg        *config.Config
	e          *engine.Engine
	clock      simClock // now, as the engine reads it (Unix ns)
	now        time.Time
	req        engine.Request
	hdr        replayHeaders
	userHeader string
	keyHeader  string

	events eventHeap
	seq    uint64
	// pending are the waiters for an adaptive slot, by class (highest
	// first, the unclassified last), each in arrival order; a waiter
	// decided otherwise (its deadline) stays until it reaches the head.
	pending [][]*waiter
	rank    map[string]int // a class's index in pending
	slots   int            // the service model's; 0: static rules only
	busy    int            // requests in the service model
	inSvc   []*served      // admitted, waiting for one of the service's slots

	rules []*ruleStats
	byID  map[string]*ruleStats
	// byIndex is byID by the rule's position in the configuration
	// (engine.Observations.Index); nil for Envoy's descriptor rules.
	byIndex []*ruleStats
	obs     []observation // the current decision's, from Options.Observe
	// idents are the key stats by identity; seen, the current decision's
	// identities, looked up once each.
	idents map[string]*identity
	seen   []*identity
	base   time.Time // the first request's minute
	// minutes are the counts of each minute that had requests, by its
	// index from base: sparse, so that a log with a gap (or a line far off
	// in time) costs nothing for the minutes between.
	minutes map[int64]*minute
	cur     *minute // the latest minute() returned
	// curStart and curEnd are cur's span (Unix ns).
	curStart, curEnd int64
	model            ModelResult
	delayed          int64 // served after waiting (max_wait, a delay)
	// waiting counts the waiters for an adaptive slot [0] and in rules'
	// lines [1]; maxWaiting bounds them as the live engine does
	// (queue.max_size; 10,000 in lines), so that a burst in the log
	// costs no more memory than live.
	waiting, maxWaiting [2]int
	// needsEnd: a rule reads when a request ends (a concurrency limit, a
	// cost from the response): admitted requests are then ended after
	// their upstream time, not at once.
	needsEnd bool
	classes  map[string]*ClassResult
	o        Options
	// src and line place the current request; decisions, for the first
	// configuration, receives the answers of those that waited.
	src       string
	line      int
	decisions io.Writer
}

// simClock is the replay's simulated clock: the log's time, set as each
// request is replayed. Unlike sluice.FakeClock it takes no lock: the
// engine reads it several times a request (FakeClock's reads were 3% of a
// replayed line of ten rules), and as a NanoClock the memory store reads
// it without building a time.Time.
type simClock struct{ ns atomic.Int64 }

// Now implements sluice.Clock.
func (c *simClock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// UnixNano implements sluice.NanoClock.
func (c *simClock) UnixNano() int64 { return c.ns.Load() }

var _ sluice.NanoClock = (*simClock)(nil)

// observation is one rule's decision on the current request.
type observation struct {
	rs               *ruleStats
	ks               *keyStat
	limit, remaining int64 // the rule's, and what it left
	allowed, shadow  bool
}

// waiter is a request waiting to be decided again: for a rule's quota
// (max_wait) or, with the service model, for an adaptive slot.
type waiter struct {
	entry    logfmt.Entry // its strings copied
	source   string
	line     int
	arrived  time.Time
	deadline time.Time
	retry    bool   // it waits for a rule's quota (a retry time is known)
	class    string // its priority class, with the service model
}

// served is an admitted request in the service model.
type served struct {
	v        engine.Verdict
	upstream time.Duration
	status   int
}

// event is a time the replay must act at: a request's end or a waiter's
// retry or deadline.
type event struct {
	at     time.Time
	seq    uint64
	done   *engine.Verdict // a request ends (static rules only: no service model)
	svc    *served         // a request ends in the service model
	w      *waiter         // a waiter retries, or gives up
	status int             // the logged status of an ending request
}

type eventHeap []event

// A typed binary heap (container/heap would box each event).
func (h eventHeap) less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}

func (h *eventHeap) push(ev event) {
	*h = append(*h, ev)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = event{}
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r := l + 1; r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

func newRun(c *config.Config, o Options) (*run, error) {
	cfg := prepare(c, o.Slots > 0)
	r := &run{cfg: cfg, slots: o.Slots, byID: map[string]*ruleStats{}, idents: map[string]*identity{}, classes: map[string]*ClassResult{}, o: o, minutes: map[int64]*minute{}}
	// One goroutine replays: one lock for all keys, not a shard's each.
	mem := static.NewMemory(static.MemoryOptions{Clock: &r.clock, MaxKeys: cfg.Store.Memory.MaxKeys, OneLock: true})
	e, err := engine.New(cfg, engine.Options{Clock: &r.clock, Observe: r.observe, Store: mem, Memory: mem})
	if err != nil {
		return nil, err
	}
	r.e = e
	r.userHeader, r.keyHeader = e.Config().Identity.UserHeader, e.Config().Identity.APIKeyHeader
	r.byIndex = make([]*ruleStats, len(e.Config().Rules))
	for i, cr := range e.Config().Rules {
		if cr.Descriptor != nil {
			continue // Envoy's: never an HTTP request's
		}
		rs := newRuleStats(&cr)
		rs.index = len(r.rules)
		r.needsEnd = r.needsEnd || cr.Algorithm == "concurrency" || cr.CostFrom != nil
		r.rules = append(r.rules, rs)
		r.byID[cr.RuleID] = rs
		r.byIndex[i] = rs
	}
	r.req.Header = &r.hdr
	r.maxWaiting = [2]int{*e.Config().Queue.MaxSize, engine.MaxQuotaWaiters}
	r.rank = map[string]int{}
	for i, c := range e.Config().Adaptive.Classes {
		r.rank[c.Name] = i
	}
	r.pending = make([][]*waiter, len(r.rank)+1)
	return r, nil
}

// prepare is the configuration as replayed: the memory store (a replay
// never touches Redis, ZooKeeper or Envoy), users and keys from the log
// (a JWT's subject is the log's user), and the adaptive limit only with a
// service model.
func prepare(c *config.Config, model bool) *config.Config {
	cfg := c.Clone()
	cfg.Store = config.Store{Type: "memory", Memory: c.Store.Memory}
	cfg.RulesSource = config.RulesSource{}
	cfg.RLS = config.RLS{}
	cfg.Identity.TrustedProxies = nil
	cfg.Identity.UserFrom, cfg.Identity.UserFromJWT = "header", false
	for i := range cfg.Rules {
		cfg.Rules[i].Consistency, cfg.Rules[i].Scope, cfg.Rules[i].OnError = "", "", ""
	}
	if !model {
		cfg.Adaptive.Algorithm = config.AdaptiveOff
		cfg.Adaptive.Classes, cfg.Adaptive.DefaultClass = nil, ""
	}
	return cfg
}

func (r *run) close() { _ = r.e.Close() }

// observe is the engine's Options.Observe: each matching rule's decision
// on the request being decided.
func (r *run) observe(o engine.Observations) {
	for i := range o.Len() {
		j := o.Index(i)
		if j < 0 || j >= len(r.byIndex) || r.byIndex[j] == nil {
			continue
		}
		rs, d := r.byIndex[j], o.Decision(i)
		r.obs = append(r.obs, observation{rs: rs, ks: r.identity(identityOf(o.Key(i), rs.id)).key(rs),
			allowed: d.Allowed, limit: d.Limit, remaining: d.Remaining, shadow: o.Shadow(i)})
	}
}

// identity returns the stats of the identity named name (the engine's
// key's, valid only now: copied when new).
func (r *run) identity(name string) *identity {
	for _, id := range r.seen {
		if id.name == name {
			return id
		}
	}
	id := r.idents[name]
	if id == nil {
		id = &identity{name: strings.Clone(name)}
		r.idents[id.name] = id
	}
	r.seen = append(r.seen, id)
	return id
}

// request replays one log entry at its time; it returns the status the
// request got (200, 429, 503; 0 while it waits) and the refusing rule.
func (r *run) request(e *logfmt.Entry) (int, string) {
	r.advance(e.Time)
	r.minute().requests++
	r.fill(e)
	return r.decide(e, nil)
}

// decide decides e (w: it waited, and is decided again).
func (r *run) decide(e *logfmt.Entry, w *waiter) (int, string) {
	r.obs, r.seen = r.obs[:0], r.seen[:0]
	var v engine.Verdict
	var err error
	if r.slots > 0 {
		v, err = r.e.DecideNow(context.Background(), &r.req)
	} else {
		v, err = r.e.CheckStatic(context.Background(), &r.req, true)
	}
	if w == nil {
		r.demand()
	}
	waited := w != nil
	switch {
	case errors.Is(err, engine.ErrAmbiguous):
		r.obs = r.obs[:0]
		return 400, "-"
	case err != nil:
		// It would wait for an adaptive slot (ErrWouldWait).
		r.obs = r.obs[:0]
		if w == nil {
			if r.waiting[0] >= r.maxWaiting[0] {
				// The queue is full, as the live one bounds it.
				r.refuse(engine.StatusShed, config.ReservedRuleID, v.Class)
				return engine.StatusShed, config.ReservedRuleID
			}
			r.waitFor(e, r.now.Add(r.maxWait()), false, v.Class)
		}
		return 0, ""
	case v.Allowed:
		r.settleObs(true)
		r.admit(v, e, waited)
		return 200, "-"
	}
	// Refused: a rule's quota that max_wait lets it wait for comes back
	// at its retry time.
	if wait := r.ruleWait(v.Decision.RuleID); wait > 0 && v.Status == engine.StatusQuota && v.Decision.RetryAfter >= 0 {
		deadline := r.now.Add(wait)
		if w != nil {
			deadline = w.deadline
		}
		full := w == nil && r.waiting[1] >= r.maxWaiting[1]
		if at := r.now.Add(v.Decision.RetryAfter); !full && r.now.Before(deadline) && !at.After(deadline) {
			if w == nil {
				w = r.waitFor(e, deadline, true, v.Class)
			}
			r.push(event{at: at, w: w})
			r.obs = r.obs[:0]
			return 0, ""
		}
	}
	r.settleObs(false)
	r.refuse(v.Status, v.Decision.RuleID, v.Class)
	return v.Status, v.Decision.RuleID
}

// demand counts the current request against each rule it matched: its
// keys' traffic, whatever the answer.
func (r *run) demand() {
	now := r.clock.UnixNano()
	for _, o := range r.obs {
		o.rs.matched++
		o.ks.requests++
		o.ks.count(now, o.rs.window, o.rs)
	}
}

// settleObs counts the final answer's decisions: the rules that refused
// (or would have, in shadow), and how much quota the admitted used.
func (r *run) settleObs(admitted bool) {
	m := r.minute()
	for _, o := range r.obs {
		switch {
		case !o.allowed && o.shadow:
			o.rs.wouldDeny++
			o.ks.wouldDeny++
		case !o.allowed:
			o.rs.limited++
			o.ks.limited++
			m.limit(o.rs.index)
		case admitted && o.limit > 0 && o.remaining >= 0:
			o.ks.peak = max(o.ks.peak, o.limit-o.remaining)
		}
	}
	r.obs = r.obs[:0]
}

// admit starts an admitted request: it ends after its logged upstream
// time, or, with the service model, when a slot has served it.
func (r *run) admit(v engine.Verdict, e *logfmt.Entry, waited bool) {
	if waited || v.Decision.Delay > 0 {
		r.delayed++
	}
	// A reservation's or a leaky bucket's delay is held before it goes on.
	upstream := e.Upstream + v.Decision.Delay
	c := r.class(v.Class)
	c.Admitted++
	if r.slots > 0 {
		r.model.Admitted++
		s := &served{v: v, upstream: upstream, status: e.Status}
		if r.busy < r.slots {
			r.busy++
			r.push(event{at: r.now.Add(s.upstream), svc: s, status: s.status})
		} else {
			r.inSvc = append(r.inSvc, s)
		}
		return
	}
	if upstream <= 0 || !r.needsEnd {
		v.Done(outcome(e.Status))
		return
	}
	done := v
	r.push(event{at: r.now.Add(upstream), done: &done, status: e.Status})
}

// refuse counts a refusal.
func (r *run) refuse(status int, rule, class string) {
	if status == engine.StatusShed {
		r.model.Shed++
		r.minute().shed++
		r.class(class).Shed++
	}
}

func (r *run) class(name string) *ClassResult {
	c := r.classes[name]
	if c == nil {
		c = &ClassResult{Class: name}
		r.classes[name] = c
	}
	return c
}

// waitFor keeps e waiting until deadline.
func (r *run) waitFor(e *logfmt.Entry, deadline time.Time, retry bool, class string) *waiter {
	w := &waiter{entry: cloneEntry(e), source: r.src, line: r.line, arrived: r.now, deadline: deadline, retry: retry, class: class}
	r.waiting[w.kind()]++
	if !retry {
		r.model.Queued++
		i, ok := r.rank[class]
		if !ok {
			i = len(r.pending) - 1
		}
		r.pending[i] = append(r.pending[i], w)
	}
	r.push(event{at: deadline, w: w})
	return w
}

// advance runs every event due by t, in time order, then sets the clock
// to t (never backwards: a log's lines may be a little out of order).
func (r *run) advance(t time.Time) {
	for len(r.events) > 0 && !r.events[0].at.After(t) {
		ev := r.events.pop()
		r.setNow(ev.at)
		r.fire(ev)
	}
	r.setNow(t)
}

func (r *run) setNow(t time.Time) {
	if t.After(r.now) {
		r.now = t
		r.clock.ns.Store(t.UnixNano())
	}
	if r.base.IsZero() {
		r.base = t.Truncate(time.Minute)
	}
}

func (r *run) push(ev event) {
	r.seq++
	ev.seq = r.seq
	r.events.push(ev)
}

func (r *run) fire(ev event) {
	switch {
	case ev.done != nil:
		ev.done.Done(outcome(ev.status))
	case ev.svc != nil:
		ev.svc.v.Done(outcome(ev.status))
		r.busy--
		if len(r.inSvc) > 0 {
			next := r.inSvc[0]
			r.inSvc = r.inSvc[1:]
			r.busy++
			r.push(event{at: r.now.Add(next.upstream), svc: next, status: next.status})
		}
		r.retryPending()
	case ev.w != nil:
		r.wake(ev.w)
	}
}

// wake decides a waiter again: at its retry time, or at its deadline,
// when it gets its final answer.
func (r *run) wake(w *waiter) {
	if w.deadline.IsZero() {
		return // decided already
	}
	if r.now.Before(w.deadline) {
		if w.retry {
			r.retryOne(w)
		}
		return
	}
	// The deadline: one last try (a quota waiter gets its 429 from it),
	// else the queue's 503.
	if r.retryOne(w) {
		return
	}
	w.deadline = time.Time{}
	r.waiting[0]--
	r.decided(w, engine.StatusShed, config.ReservedRuleID)
	r.model.Shed++
	r.model.QueueTimeouts++
	r.minute().shed++
	r.class(w.class).Shed++
}

// retryOne decides w again; it reports whether w got its final answer.
func (r *run) retryOne(w *waiter) bool {
	r.fill(&w.entry)
	status, rule := r.decide(&w.entry, w)
	if status == 0 {
		return false
	}
	w.deadline = time.Time{}
	r.waiting[w.kind()]--
	r.decided(w, status, rule)
	return true
}

// kind is 0 for a waiter for an adaptive slot, 1 for one in a rule's
// line (max_wait): the index of its count in run.waiting.
func (w *waiter) kind() int {
	if w.retry {
		return 1
	}
	return 0
}

// retryPending gives freed slots to the waiters: the oldest of each class,
// highest class first, as the queue serves them, until one is refused a
// slot in every class.
func (r *run) retryPending() {
	for progress := true; progress; {
		progress = false
		for i := range r.pending {
			q := r.pending[i]
			for len(q) > 0 && q[0].deadline.IsZero() {
				q[0] = nil
				q = q[1:]
			}
			r.pending[i] = q
			if len(q) > 0 && r.retryOne(q[0]) {
				progress = true
				break
			}
		}
	}
}

// decided writes a waiter's final answer to the decisions.
func (r *run) decided(w *waiter, status int, rule string) {
	if r.decisions != nil {
		fmt.Fprintf(r.decisions, "%s:%d %d %s\n", w.source, w.line, status, rule)
	}
}

// maxWait is how long a request that would wait may: the queue's and the
// rules' longest.
func (r *run) maxWait() time.Duration {
	d := r.e.Config().Queue.MaxWait.D()
	for _, rs := range r.rules {
		d = max(d, rs.maxWait)
	}
	return d
}

// ruleWait is the rule's max_wait.
func (r *run) ruleWait(id string) time.Duration {
	if rs := r.byID[id]; rs != nil {
		return rs.maxWait
	}
	return 0
}

// finish runs what is still due: the requests in flight end.
func (r *run) finish() {
	for len(r.events) > 0 {
		ev := r.events.pop()
		r.setNow(ev.at)
		r.fire(ev)
	}
	for _, rs := range r.rules {
		rs.flush()
	}
}

// fill makes the engine's request of e.
func (r *run) fill(e *logfmt.Entry) {
	r.hdr.kv = r.hdr.kv[:0]
	if e.User != "" {
		r.hdr.kv = append(r.hdr.kv, [2]string{r.userHeader, e.User})
	}
	if e.APIKey != "" {
		r.hdr.kv = append(r.hdr.kv, [2]string{r.keyHeader, e.APIKey})
	}
	r.hdr.kv = append(r.hdr.kv, e.Headers...)
	r.req.Method, r.req.Path, r.req.Peer, r.req.RemoteAddr = e.Method, e.Path, e.ClientIP, ""
	if !e.ClientIP.IsValid() {
		r.req.RemoteAddr = "0.0.0.0:0"
	}
}

// cloneEntry copies e's strings out of the line they point into.
func cloneEntry(e *logfmt.Entry) logfmt.Entry {
	c := *e
	c.Method, c.Path, c.User, c.APIKey = strings.Clone(e.Method), strings.Clone(e.Path), strings.Clone(e.User), strings.Clone(e.APIKey)
	c.Headers = make([][2]string, len(e.Headers))
	for i, h := range e.Headers {
		c.Headers[i] = [2]string{strings.Clone(h[0]), strings.Clone(h[1])}
	}
	return c
}
