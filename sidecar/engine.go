// Package sidecar is sluice's HTTP face: the Engine that composes the static
// stores, the adaptive limit and the queue on the request path of DESIGN.md,
// the http.Handler middleware and reverse proxy around it, the response
// headers, the admin server and the Prometheus metrics.
//
// The Engine is the only place where the parts are composed. It takes a
// small Request view, not *http.Request, and returns a Verdict; the
// middleware turns a Verdict into a response or a forwarded request.
package sidecar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/sidecar/config"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
)

// rule is a compiled config.Rule.
type rule struct {
	id     string
	idType string // user_id, ip_address, api_key, header, global
	header string // for header:<Name>
	// headerPrefix is "h:<Name>:", the identifier prefix of header rules.
	headerPrefix string
	// lastPolicy caches the RateLimit-Policy value; rateLimitPrefix starts
	// the RateLimit value.
	lastPolicy      atomic.Pointer[quotaHeader]
	rateLimitPrefix string
	policy          *static.Policy
	nominal         int64 // the configured limit (soft rules check a wider one)
	// nominalCap is the capacity decisions report for the configured
	// policy; softExtra is how much more a soft rule's wider policy holds.
	nominalCap, softExtra int64
	window                time.Duration
	mode                  string
	onError               static.FailurePolicy
	priority              int
	match                 matcher
	counters              *ruleCounters
}

// ruleSet is one configuration's compiled rules; swapped atomically.
type ruleSet struct {
	rules    []*rule
	identity identity
	headroom float64
	cfg      *config.Config
}

// Engine decides requests. It is safe for concurrent use; Reload swaps its
// rules while requests are in flight. Start begins its background work (the
// sweep of idle keys, waiting for Redis to answer) and Close ends it.
type Engine struct {
	store   static.Store
	memory  *static.Memory    // the embedded store (or the local fallback)
	redis   *redisstore.Store // nil unless the store is Redis
	closeR  func() error      // closes the Redis client New opened
	limiter *adaptive.Limiter // nil when adaptive is off
	queue   *queue.Queue[adaptive.Permit]
	rules   atomic.Pointer[ruleSet]
	metrics *Metrics
	log     *slog.Logger
	clock   sluice.Clock
	ready   atomic.Bool

	scratch sync.Pool // *scratch

	stop      chan struct{}
	started   atomic.Bool
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Options are the parts an Engine is built from; New fills the missing ones.
type Options struct {
	// Store checks static limits. Default: what cfg.Store says, the embedded
	// memory store or Redis behind a static.Failover that applies each
	// rule's on_error.
	Store static.Store
	// Memory is the embedded store behind Store (for Sweep and stats).
	Memory *static.Memory
	// Logger logs decisions worth logging (shadow denials, reloads).
	Logger *slog.Logger
	// Registerer receives the engine's metrics, e.g. the application's own
	// registry; default a registry of the engine's own. A registry that
	// already holds sluice's metric names makes New fail.
	Registerer prometheus.Registerer
	// Clock is read for latencies; default the system clock.
	Clock sluice.Clock
}

// New builds an Engine for cfg from opts. cfg may come from config.Load or
// be built in Go: New works on a copy with the defaults filled in and
// validates it, so a bad or incomplete configuration is an error, never a
// panic. With a Redis store it opens the client (no round trip yet); the
// engine is ready once Start has seen Redis answer.
func New(cfg *config.Config, opts Options) (*Engine, error) {
	if cfg == nil {
		return nil, errors.New("sidecar: nil configuration")
	}
	cfg = cfg.Clone()
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{store: opts.Store, memory: opts.Memory, log: opts.Logger, clock: opts.Clock,
		stop: make(chan struct{})}
	e.scratch.New = newScratch
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.clock == nil {
		e.clock = sluice.SystemClock{}
	}
	if e.memory == nil && (e.store == nil || cfg.Store.Type == "redis") {
		e.memory = static.NewMemory(static.WithMaxKeys(cfg.Store.Memory.MaxKeys), static.WithClock(e.clock))
	}
	if e.store == nil {
		e.store = e.memory
		if cfg.Store.Type == "redis" {
			r := cfg.Store.Redis
			client, err := redisstore.NewClient(redisstore.Config{Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username,
				Password: r.Password, DB: r.DB, Timeout: r.Timeout.D()})
			if err != nil {
				return nil, fmt.Errorf("%s: store.redis: %w", cfg.File, err)
			}
			e.closeR = client.Close
			e.redis = redisstore.New(client, redisstore.WithPrefix(r.Prefix), redisstore.WithTimeout(r.Timeout.D()))
			e.store = static.NewFailover(e.redis, e.memory, r.Instances)
		}
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, e.closeOnError(err)
	}
	e.metrics = m
	if cfg.Adaptive.Algorithm != "off" {
		alg, err := adaptive.NewAlgorithm(cfg.Adaptive.Algorithm)
		if err != nil {
			return nil, e.closeOnError(err)
		}
		l, err := adaptive.New(adaptive.Config{Algorithm: alg, InitialLimit: cfg.Adaptive.InitialLimit,
			MinLimit: cfg.Adaptive.MinLimit, MaxLimit: cfg.Adaptive.MaxLimit, Clock: e.clock})
		if err != nil {
			return nil, e.closeOnError(fmt.Errorf("adaptive: %w", err))
		}
		order, _ := queue.ParseOrder(cfg.Queue.Order)
		size := *cfg.Queue.MaxSize
		if size == 0 {
			size = -1 // no queueing
		}
		e.limiter = l
		e.queue = queue.New(queue.Config{MaxSize: size, MaxWait: cfg.Queue.MaxWait.D(), Order: order, Priorities: 1, Clock: e.clock},
			l.TryAcquire, func(p adaptive.Permit) { p.Release(sluice.Ignore) })
		l.SetOnRelease(e.queue.Notify)
	}
	if err := e.Reload(cfg); err != nil {
		m.unregister()
		return nil, e.closeOnError(err)
	}
	if err := e.metrics.attach(e); err != nil {
		m.unregister()
		return nil, e.closeOnError(err)
	}
	return e, nil
}

func (e *Engine) closeOnError(err error) error {
	if e.closeR != nil {
		_ = e.closeR()
	}
	return err
}

// SweepInterval is how often a started Engine drops idle keys from its
// memory store.
const SweepInterval = 10 * time.Second

// Start begins the engine's background work: a periodic sweep of idle keys
// and, with Redis, loading the scripts until Redis answers (then the engine
// is ready). It returns at once; calling it twice does nothing.
func (e *Engine) Start() {
	if !e.started.CompareAndSwap(false, true) {
		return
	}
	e.wg.Add(1)
	go e.sweep()
	if e.redis != nil {
		e.wg.Add(1)
		go e.waitForRedis()
	}
}

// Close stops the background work and closes the Redis client the engine
// opened. Requests still in flight may finish; new ones keep working on the
// memory store or the failure policy. It is safe to call more than once and
// from several goroutines: every call waits for the first to finish and
// returns its result.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.stop)
		e.wg.Wait()
		if e.closeR != nil {
			e.closeErr = e.closeR()
		}
	})
	return e.closeErr
}

func (e *Engine) sweep() {
	defer e.wg.Done()
	t := time.NewTicker(SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.Sweep()
		}
	}
}

// waitForRedis loads the scripts (which proves Redis answers) and marks the
// engine ready, retrying every second until it works or the engine closes.
func (e *Engine) waitForRedis() {
	defer e.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := e.redis.Load(ctx)
		cancel()
		if err == nil {
			e.ready.Store(true)
			e.log.Info("redis answered; ready")
			return
		}
		e.log.Warn("redis not answering yet; checks use the failure policy", "error", err.Error())
		select {
		case <-e.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// Reload fills cfg's defaults (on a copy), validates it, compiles its rules
// and swaps them in atomically; a bad cfg is an error and changes nothing. Rules that did not change keep their counters:
// their keys and policies are the same. Changes to the store, adaptive or
// queue sections need a restart and are reported in the returned error's
// absence only as a log line.
func (e *Engine) Reload(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("sidecar: nil configuration")
	}
	cfg = cfg.Clone()
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	rs, err := compile(cfg, e.metrics)
	if err != nil {
		return err
	}
	old := e.rules.Load()
	if old != nil {
		o, n := old.cfg, cfg
		if o.Store.Type != n.Store.Type || o.Adaptive != n.Adaptive || o.Queue.Order != n.Queue.Order ||
			o.Queue.MaxWait != n.Queue.MaxWait || *o.Queue.MaxSize != *n.Queue.MaxSize {
			e.log.Warn("reload: store, adaptive and queue settings take effect at restart; rules and identity reloaded")
		}
	}
	e.rules.Store(rs)
	if f, ok := e.store.(*static.Failover); ok {
		f.ForgetShares() // the old rules' policies are gone
	}
	if e.redis == nil {
		e.ready.Store(true) // with Redis: once Redis answered (Start)
	}
	return nil
}

func compile(cfg *config.Config, m *Metrics) (*ruleSet, error) {
	rs := &ruleSet{cfg: cfg, headroom: cfg.Adaptive.ElasticHeadroom, identity: identity{
		// Canonical names: looking them up then costs no allocation.
		userHeader: http.CanonicalHeaderKey(cfg.Identity.UserHeader), apiKeyHeader: http.CanonicalHeaderKey(cfg.Identity.APIKeyHeader),
		userFromJWT: cfg.Identity.UserFrom == "jwt", v4Bits: cfg.Identity.IPv4Prefix, v6Bits: cfg.Identity.IPv6Prefix,
	}}
	for _, p := range cfg.Identity.TrustedProxies {
		pr, err := config.ParsePrefix(p)
		if err != nil {
			return nil, err
		}
		rs.identity.trusted = append(rs.identity.trusted, pr)
	}
	defaultOnError, _ := static.ParseFailurePolicy(cfg.Store.Redis.OnError)
	for i := range cfg.Rules {
		cr := &cfg.Rules[i]
		p, err := cr.Policy()
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", cr.RuleID, err)
		}
		r := &rule{id: cr.RuleID, idType: cr.IdentifierType, mode: cr.Mode, onError: defaultOnError,
			priority: cr.Priority, match: compileMatch(cr.Match, cfg.CaseSensitivePaths), nominal: p.Limit, window: p.Window}
		if len(r.idType) > 7 && r.idType[:7] == "header:" {
			r.idType, r.header = "header", http.CanonicalHeaderKey(r.idType[7:])
			r.headerPrefix = "h:" + r.header + ":"
		}
		if cr.OnError != "" {
			r.onError, _ = static.ParseFailurePolicy(cr.OnError)
		}
		r.nominalCap = p.Capacity()
		if cr.Mode == "soft" {
			// A soft rule admits up to soft_percent over its limit.
			p.Limit = int64(math.Floor(float64(p.Limit) * (1 + *cr.SoftPercent/100)))
			if p.Burst > 0 {
				p.Burst = int64(math.Floor(float64(p.Burst) * (1 + *cr.SoftPercent/100)))
			}
			if err := p.Validate(); err != nil {
				return nil, fmt.Errorf("rule %q: soft_percent: %w", cr.RuleID, err)
			}
			r.softExtra = p.Capacity() - r.nominalCap
		}
		r.policy = &p
		r.counters = m.ruleCounters(r.id)
		r.rateLimitPrefix = `"` + r.id + `";r=`
		rs.rules = append(rs.rules, r)
	}
	sort.SliceStable(rs.rules, func(i, j int) bool { return rs.rules[i].priority < rs.rules[j].priority })
	return rs, nil
}

// identifier returns the rule's identifier for the request as a prefix and
// a value (the client address, appended by the caller, when useIP), or false
// when the request carries none (the rule does not apply, as with Envoy's
// descriptors).
func (r *rule) identifier(rs *ruleSet, req *Request, ip netip.Addr, user string) (prefix, value string, useIP, ok bool) {
	switch r.idType {
	case "user_id":
		return "user:", user, false, user != ""
	case "ip_address":
		return "ip:", "", true, ip.IsValid()
	case "api_key":
		if req.Header == nil {
			return "", "", false, false
		}
		k := req.Header.Get(rs.identity.apiKeyHeader)
		return "key:", k, false, k != ""
	case "header":
		if req.Header == nil {
			return "", "", false, false
		}
		v := req.Header.Get(r.header)
		return r.headerPrefix, v, false, v != ""
	}
	return "global", "", false, true
}

// MaxIdentifierBytes is the longest identifier (user id, API key, header
// value) kept as it is in a key; a longer one is replaced by a digest of it
// (hashIdentifier), so that every key is short and the store's max_keys
// bounds its memory in bytes, whatever clients send.
const MaxIdentifierBytes = 64

// hashIdentifier returns "#" and the hex of the first 128 bits of v's
// SHA-256: the same on every sidecar (Redis keys are shared), 33 bytes, and
// no collision a client could find.
func hashIdentifier(v string) string {
	sum := sha256.Sum256([]byte(v))
	var out [33]byte
	out[0] = '#'
	hex.Encode(out[1:], sum[:16])
	return string(out[:])
}

// scratch is one request's working memory, pooled: the matching rules,
// their limits and decisions.
type scratch struct {
	limits    []static.Limit
	matched   []*rule
	decisions []sluice.Decision
	idents    []ident
}

// ident is a matching rule's identifier before its key is built.
type ident struct {
	prefix, value string
	useIP         bool
}

func newScratch() any {
	return &scratch{limits: make([]static.Limit, 0, maxInlineRules), matched: make([]*rule, 0, maxInlineRules),
		decisions: make([]sluice.Decision, 0, maxInlineRules), idents: make([]ident, 0, maxInlineRules)}
}

func (sc *scratch) reset() {
	clear(sc.limits) // drop references to keys and policies
	clear(sc.matched)
	clear(sc.idents)
	sc.limits, sc.matched, sc.decisions, sc.idents = sc.limits[:0], sc.matched[:0], sc.decisions[:0], sc.idents[:0]
}

// buildKeys sets the key of every limit, "{<identifier>}:<rule id>", in one
// allocation: the keys are views of one buffer that is never written again
// once they are made (stores copy a key they keep; see static.Limit.Key).
func (sc *scratch) buildKeys(ip netip.Addr) {
	var ipBuf [48]byte
	var ipText []byte
	n := 0
	for i, id := range sc.idents {
		if id.useIP && ipText == nil {
			ipText = ip.AppendTo(ipBuf[:0])
		}
		n += len(id.prefix) + len(id.value) + len(sc.limits[i].RuleID) + 3
		if id.useIP {
			n += len(ipText)
		}
	}
	buf := make([]byte, 0, n)
	for i, id := range sc.idents {
		start := len(buf)
		buf = append(buf, '{')
		buf = append(buf, id.prefix...)
		buf = append(buf, id.value...)
		if id.useIP {
			buf = append(buf, ipText...)
		}
		buf = append(buf, '}', ':')
		buf = append(buf, sc.limits[i].RuleID...)
		sc.limits[i].Key = unsafe.String(&buf[start], len(buf)-start)
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
	// Violated lists the rule ids that denied.
	Violated []string
	// Reason is why a request was refused.
	Reason sluice.Reason

	e       *Engine
	rule    *rule // the deciding rule, for its precomputed headers
	static  sluice.Permit
	permit  adaptive.Permit
	started time.Time
}

// ErrAmbiguousPath is Decide's error for a path that routers disagree on
// (see CanonicalPath): the HTTP face answers 400.
var ErrAmbiguousPath = errors.New("ambiguous request path: backslash, control character or dot segment with parameters")

// maxInlineRules is how many matching rules a request handles on the stack;
// more are handled on the heap.
const maxInlineRules = 16

// Decide runs the request path of DESIGN.md up to forwarding: identify,
// match, one static check for all matching rules, throttling modes, the
// leaky-bucket or semaphore delay, and the adaptive gate with its queue. An
// error means the client went away (ctx ended) while waiting, or the path
// is ambiguous (ErrAmbiguousPath).
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

// decideMode is how far decide goes.
type decideMode uint8

const (
	decideFull   decideMode = iota // static check, delay, adaptive gate
	decideStatic                   // static check only, taken
	decideDry                      // static check only, nothing taken
)

func (e *Engine) decide(ctx context.Context, req *Request, mode decideMode) (Verdict, error) {
	sc := e.scratch.Get().(*scratch)
	v, err := e.decideWith(ctx, req, mode, sc)
	sc.reset()
	e.scratch.Put(sc)
	return v, err
}

func (e *Engine) decideWith(ctx context.Context, req *Request, mode decideMode, sc *scratch) (Verdict, error) {
	gate := mode == decideFull
	rs := e.rules.Load()
	path, ok := CanonicalPath(req.Path)
	if !ok {
		return Verdict{}, ErrAmbiguousPath
	}
	ip := rs.identity.clientIP(req)
	user := rs.identity.user(req)
	spare := e.limiter == nil || e.limiter.Spare(rs.headroom)
	for _, r := range rs.rules {
		if !r.match.match(req, path, ip, user) {
			continue
		}
		prefix, value, useIP, ok := r.identifier(rs, req, ip, user)
		if !ok {
			continue
		}
		l := static.Limit{RuleID: r.id, Policy: r.policy, Cost: 1, OnError: r.onError, DryRun: mode == decideDry}
		switch r.mode {
		case "shadow":
			l.Shadow = true
		case "elastic":
			// Over its quota an elastic rule admits while the service has
			// spare capacity.
			l.Shadow = spare
		}
		if len(value) > MaxIdentifierBytes {
			value = hashIdentifier(value)
		}
		sc.limits = append(sc.limits, l)
		sc.matched = append(sc.matched, r)
		sc.idents = append(sc.idents, ident{prefix: prefix, value: value, useIP: useIP})
	}
	limits, matched := sc.limits, sc.matched
	var res static.Result
	v := Verdict{Allowed: true, e: e, static: sluice.NopPermit{}, Decision: sluice.Decision{Allowed: true, Remaining: -1}}
	if len(limits) > 0 {
		sc.buildKeys(rs.identity.keyAddr(ip))
		each := slices.Grow(sc.decisions, len(limits))[:len(limits)]
		sc.decisions = each
		start := e.clock.Now()
		var err error
		res, err = e.store.Check(ctx, limits, each)
		e.metrics.storeLatency.Observe(e.clock.Now().Sub(start).Seconds())
		if err != nil {
			return Verdict{}, err
		}
		if res.Fallback != nil {
			e.metrics.storeErrors.Inc()
		}
		v.Decision, v.static = res.Decision, res.Permit
		if mode != decideDry {
			e.account(matched, limits, each, res.Allowed)
		}
		for _, r := range matched {
			if r.id == res.RuleID {
				v.Window, v.rule = r.window, r
				if r.mode == "soft" {
					// Report the configured quota, not the soft allowance.
					v.Decision.Limit = r.nominalCap
					v.Decision.Remaining = min(max(0, v.Decision.Remaining-r.softExtra), r.nominalCap)
				}
				break
			}
		}
		if !res.Allowed {
			v.Allowed, v.Reason = false, res.Reason
			v.Status = StatusQuota
			if res.Reason == sluice.ReasonStoreDown {
				v.Status = StatusShed
			}
			for i := range each {
				if !each[i].Allowed && !limits[i].Shadow {
					v.Violated = append(v.Violated, limits[i].RuleID)
				}
			}
			return v, nil
		}
		if !gate {
			return v, nil
		}
		if err := static.Hold(ctx, e.store, limits, res); err != nil {
			return Verdict{}, err
		}
	}
	if gate && e.limiter != nil {
		p, err := e.queue.Acquire(ctx, 0)
		if err != nil {
			// Not served after all: the static quota and slots go back.
			if len(limits) > 0 {
				static.GiveBack(ctx, e.store, limits, res)
			}
			if ctx.Err() != nil {
				return Verdict{}, ctx.Err()
			}
			e.metrics.shed.Add(1)
			reason := sluice.ReasonOverload
			switch {
			case errors.Is(err, queue.ErrFull):
				reason = sluice.ReasonQueueFull
			case errors.Is(err, queue.ErrTimeout):
				reason = sluice.ReasonQueueTimeout
			}
			return Verdict{Status: StatusShed, Reason: reason, Decision: sluice.Decision{
				RuleID: config.ReservedRuleID, Limit: int64(e.limiter.Limit()), Remaining: 0,
				RetryAfter: time.Second, Reason: reason}}, nil
		}
		v.permit = p
	}
	v.started = e.clock.Now()
	return v, nil
}

// account counts the decisions per rule and logs shadow denials.
func (e *Engine) account(matched []*rule, limits []static.Limit, each []sluice.Decision, admitted bool) {
	for i, r := range matched {
		d := &each[i]
		switch {
		case !d.Allowed && limits[i].Shadow:
			r.counters.wouldDeny.Add(1)
			if r.mode == "shadow" {
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
	v.e.metrics.upstreamLatency.Observe(v.e.clock.Now().Sub(v.started).Seconds())
	v.permit.Release(o)
	v.static.Release(o)
	v.e = nil
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

// Ready reports whether rules are loaded and the store answered once.
func (e *Engine) Ready() bool { return e.ready.Load() }

// Sweep drops idle keys from the embedded store; the sidecar calls it
// periodically.
func (e *Engine) Sweep() {
	if e.memory != nil {
		e.memory.Sweep()
	}
}

// Metrics returns the engine's metrics.
func (e *Engine) Metrics() *Metrics { return e.metrics }
