package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"math"
	"net/netip"
	"net/textproto"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/region"
)

// This file compiles a configuration into what the request path reads:
// rules with their policies, matchers and identifiers, as small integers
// and precomputed strings. It imports no net/http.

// idKind is what keys a rule: a compiled config.IdentifierType.
type idKind uint8

const (
	idGlobal idKind = iota
	idUser
	idIP
	idAPIKey
	idHeader
	idHybrid // a combination: parts
)

// modeKind is a compiled config.Mode: the request path compares small
// integers, not strings.
type modeKind uint8

const (
	modeHard modeKind = iota
	modeSoft
	modeElastic
	modeShadow
)

var modeNames = [...]config.Mode{modeHard: config.ModeHard, modeSoft: config.ModeSoft, modeElastic: config.ModeElastic, modeShadow: config.ModeShadow}

// String returns the configuration's word for m.
func (m modeKind) String() string { return string(modeNames[m]) }

// rule is a compiled config.Rule.
type rule struct {
	id     string
	index  int // its position in the configuration's rules
	idKind idKind
	header string // for header:<Name>, canonical
	// headerPrefix is "h:<Name>:", the identifier prefix of header rules.
	headerPrefix string
	// lastPolicy caches the RateLimit-Policy value; rateLimitPrefix starts
	// the RateLimit value.
	lastPolicy      atomic.Pointer[quotaHeader]
	rateLimitPrefix string
	// alone is []string{id} (capacity 1): a refusal's Violated when this
	// rule denies first, shared (an append copies it), so that a refusal
	// allocates no list of one.
	alone   []string
	policy  *static.Policy
	nominal int64 // the configured limit (soft rules check a wider one)
	// nominalCap is the capacity decisions report for the configured
	// policy; softExtra is how much more a soft rule's wider policy holds.
	nominalCap, softExtra int64
	window                time.Duration
	mode                  modeKind
	onError               static.FailurePolicy
	priority              int
	match                 matcher
	counters              *ruleCounters
	maxWait               time.Duration // how long a request over the quota may wait for it
	// reserve is maxWait for the algorithms that reserve (a token bucket
	// without warm-up, GCRA): the store takes the tokens in advance and the
	// request is held until its turn, instead of waiting in a line.
	reserve time.Duration
	// local sends the rule's limits to the fleet store (eventual
	// consistency); global gives it a regional budget, budget (bound by
	// the engine, nil until then).
	local, global bool
	budget        *region.Rule
	// parts are the identifiers a hybrid rule (idHybrid) combines, in the
	// configuration's order.
	parts []*rule
	// desc marks a descriptor rule (Envoy's rate limit service), which
	// HTTP requests never match; replaces are the descriptor rules it
	// replaces.
	desc     bool
	replaces []string
	// envoyCompat answers the rule's descriptors as envoyproxy/ratelimit
	// does, with envoyName as current_limit's name.
	envoyCompat bool
	envoyName   string
	envoyMeta   map[string]any // the descriptor's metadata, for dynamic metadata
	quotaMode   bool           // the peer's quota_mode (see config.Descriptor)
	// cost is the rule's cost_from (nil: a request costs 1, a descriptor
	// its hits).
	cost *costRule
}

// ruleSet is one configuration's compiled rules; swapped atomically.
type ruleSet struct {
	rules []*rule // every rule with a limit
	// http are the rules HTTP requests are matched against (those without
	// a descriptor), by priority.
	http []*rule
	// domains are the descriptor rules' trees, by Envoy domain.
	domains  map[string]*descNode
	identity identity
	headroom float64
	cfg      *config.Config
	// classes are the priority classes, highest first (none: one class);
	// defaultClass is the index of the class of requests none matches.
	classes      []class
	defaultClass int
	// fairness keys the queue's tenants (only its identifier is used);
	// nil without fairness.
	fairness   *rule
	tenantSeed maphash.Seed
	// deadlines reads clients' deadlines.
	deadlines deadlines
	// overrides are the rules of Envoy's per-descriptor limit overrides,
	// made on first use (at most maxOverrides); onError and metrics are
	// what they are made with.
	overrideMu sync.Mutex
	overrides  map[LimitOverride]*rule
	onError    static.FailurePolicy
	metrics    *Metrics
}

// compile compiles cfg (valid) into a rule set; m keeps the rules' counters.
func compile(cfg *config.Config, m *Metrics) (*ruleSet, error) {
	rs := &ruleSet{cfg: cfg, headroom: cfg.Adaptive.ElasticHeadroom, identity: identity{
		// Canonical names: looking them up then costs no allocation.
		userHeader: textproto.CanonicalMIMEHeaderKey(cfg.Identity.UserHeader), apiKeyHeader: textproto.CanonicalMIMEHeaderKey(cfg.Identity.APIKeyHeader),
		userFromJWT: cfg.Identity.UserFrom == "jwt", v4Bits: cfg.Identity.IPv4Prefix, v6Bits: cfg.Identity.IPv6Prefix,
	}}
	for _, p := range cfg.Identity.TrustedProxies {
		pr, err := config.ParsePrefix(p)
		if err != nil {
			return nil, err
		}
		rs.identity.trusted = append(rs.identity.trusted, pr)
	}
	defaultOnError, _ := cfg.Store.Redis.OnError.Parse() // validated
	rs.onError, rs.metrics = defaultOnError, m
	for i := range cfg.Rules {
		cr := &cfg.Rules[i]
		if d := cr.Descriptor; d != nil && d.Unlimited {
			if err := rs.addDescriptor(d, nil, cr.RuleID); err != nil {
				return nil, err
			}
			continue
		}
		p, err := cr.Policy()
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", cr.RuleID, err)
		}
		r := &rule{id: cr.RuleID, index: i, mode: compileMode(cr.Mode), onError: defaultOnError,
			priority: cr.Priority, match: compileMatch(cr.Match, cfg.CaseSensitivePaths), nominal: p.Limit, window: p.Window,
			maxWait: cr.MaxWait.D(), local: cfg.Eventual(cr), global: cr.Scope == config.ScopeGlobal}
		if parts := cr.IdentifierType.Parts(); len(parts) > 1 {
			r.idKind = idHybrid
			for _, t := range parts {
				r.parts = append(r.parts, compileIdentity(t))
			}
		} else {
			id := compileIdentity(cr.IdentifierType)
			r.idKind, r.header, r.headerPrefix = id.idKind, id.header, id.headerPrefix
		}
		if cr.OnError != "" {
			r.onError, _ = cr.OnError.Parse() // validated
		}
		r.nominalCap = p.Capacity()
		if r.mode == modeSoft {
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
		if r.maxWait > 0 && (p.Algorithm == static.GCRA || (p.Algorithm == static.TokenBucket && p.Warmup == 0)) {
			r.reserve = r.maxWait
		}
		r.counters = m.ruleCounters(r.id)
		r.rateLimitPrefix = `"` + r.id + `";r=`
		r.alone = []string{r.id}
		r.replaces, r.desc = cr.Replaces, cr.Descriptor != nil
		r.cost = compileCost(cr)
		if r.cost != nil {
			r.counters.costFrom.Store(true)
		}
		if d := cr.Descriptor; d != nil {
			r.counters.envoy.Store(envoyStatsOf(d, r.counters.envoy.Load()))
			r.envoyCompat, r.envoyName, r.envoyMeta, r.quotaMode = d.EnvoyCompatible, d.Name, d.Metadata, d.QuotaMode
		}
		rs.rules = append(rs.rules, r)
		if cr.Descriptor != nil {
			if err := rs.addDescriptor(cr.Descriptor, r, r.id); err != nil {
				return nil, err
			}
		}
	}
	sort.SliceStable(rs.rules, func(i, j int) bool { return rs.rules[i].priority < rs.rules[j].priority })
	for _, r := range rs.rules {
		if !r.desc {
			rs.http = append(rs.http, r)
		}
	}
	compileClasses(rs, cfg)
	return rs, nil
}

// compileIdentity returns a rule that only identifies: its kind and, for
// header:<Name>, the header.
func compileIdentity(t config.IdentifierType) *rule {
	r := &rule{idKind: compileIdentifier(t)}
	if r.idKind == idHeader {
		r.header = textproto.CanonicalMIMEHeaderKey(t.Header())
		r.headerPrefix = "h:" + r.header + ":"
	}
	return r
}

func compileIdentifier(t config.IdentifierType) idKind {
	switch t {
	case config.IdentifyUser:
		return idUser
	case config.IdentifyIP:
		return idIP
	case config.IdentifyAPIKey:
		return idAPIKey
	case config.IdentifyGlobal:
		return idGlobal
	}
	return idHeader // validated: header:<Name>
}

func compileMode(m config.Mode) modeKind {
	switch m {
	case config.ModeSoft:
		return modeSoft
	case config.ModeElastic:
		return modeElastic
	case config.ModeShadow:
		return modeShadow
	}
	return modeHard
}

// identifier returns the rule's identifier for the request as a prefix and
// a value (the client address, appended by the caller, when useIP), or false
// when the request carries none (the rule does not apply, as with Envoy's
// descriptors).
func (r *rule) identifier(rs *ruleSet, req *Request, ip netip.Addr, user string) (prefix, value string, useIP, ok bool) {
	switch r.idKind {
	case idUser:
		return "user:", user, false, user != ""
	case idIP:
		return "ip:", "", true, ip.IsValid()
	case idAPIKey:
		k := req.header(rs.identity.apiKeyHeader)
		return "key:", k, false, k != ""
	case idHeader:
		v := req.header(r.header)
		return r.headerPrefix, v, false, v != ""
	case idHybrid:
		return r.hybrid(rs, req, ip, user)
	}
	return "global", "", false, true
}

// hybrid joins the identifiers of a hybrid rule's parts, each with its
// prefix, into one value ("ip:192.0.2.1|user:alice"): the rule applies only
// when the request carries every one of them. It allocates, unlike single
// identifiers; hybrid rules are few.
func (r *rule) hybrid(rs *ruleSet, req *Request, ip netip.Addr, user string) (prefix, value string, useIP, ok bool) {
	var b []byte
	for i, p := range r.parts {
		pre, v, withIP, ok := p.identifier(rs, req, ip, user)
		if !ok {
			return "", "", false, false
		}
		if i > 0 {
			b = append(b, '|')
		}
		b = append(b, pre...)
		if len(v) > MaxIdentifierBytes {
			v = hashIdentifier(v) // each part bounded: the join stays short
		}
		b = append(b, v...)
		if withIP {
			b = rs.identity.keyAddr(ip).AppendTo(b)
		}
	}
	return "hy:", string(b), false, true
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

// envoyStatsOf returns the envoy stats of a descriptor rule: was, when its
// labels are the same (a reload keeps the counts), else new ones.
func envoyStatsOf(d *config.Descriptor, was *envoyStats) *envoyStats {
	label := func(i int) string {
		if i >= len(d.Entries) {
			return ""
		}
		if e := d.Entries[i]; e.Value != "" {
			return e.Key + "_" + e.Value
		}
		return d.Entries[i].Key
	}
	var spec envoyLabelSpec
	for i := range spec.fromRequest {
		if i < len(d.Entries) {
			e := d.Entries[i]
			spec.fromRequest[i] = !e.ShareThreshold && (e.ValueToMetric || d.DetailedMetric)
		}
	}
	if was != nil && was.domain == d.Domain && was.key1 == label(0) && was.key2 == label(1) && was.labels == spec {
		return was
	}
	return &envoyStats{domain: d.Domain, key1: label(0), key2: label(1), labels: spec}
}

// bindSharing gives rs's rules their store and budget: eventual rules go to
// the fleet store when there is one, global rules get their region's budget.
func (e *Engine) bindSharing(rs *ruleSet) {
	ids := map[string]bool{}
	for _, r := range rs.rules {
		if r.local && e.share.Fleet == nil {
			r.local = false
			e.log.Warn("reload: eventual consistency takes effect at restart; the rule stays exact until then", "rule", r.id)
		}
		if r.global {
			if e.share.Budgets == nil {
				e.log.Warn("reload: regions take effect at restart; the rule holds in this region only until then", "rule", r.id)
				continue
			}
			r.budget = e.share.Budgets.Rule(r.id, r.policy)
			ids[r.id] = true
		}
	}
	if e.share.Budgets != nil {
		e.share.Budgets.Retain(ids)
	}
}
