package sidecar

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/netip"
	"net/textproto"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sidecar/config"
	"github.com/sluicehq/sluice/static"
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
	idKind idKind
	header string // for header:<Name>, canonical
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
	mode                  modeKind
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
	for i := range cfg.Rules {
		cr := &cfg.Rules[i]
		p, err := cr.Policy()
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", cr.RuleID, err)
		}
		r := &rule{id: cr.RuleID, idKind: compileIdentifier(cr.IdentifierType), mode: compileMode(cr.Mode), onError: defaultOnError,
			priority: cr.Priority, match: compileMatch(cr.Match, cfg.CaseSensitivePaths), nominal: p.Limit, window: p.Window}
		if r.idKind == idHeader {
			r.header = textproto.CanonicalMIMEHeaderKey(cr.IdentifierType.Header())
			r.headerPrefix = "h:" + r.header + ":"
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
		r.counters = m.ruleCounters(r.id)
		r.rateLimitPrefix = `"` + r.id + `";r=`
		rs.rules = append(rs.rules, r)
	}
	sort.SliceStable(rs.rules, func(i, j int) bool { return rs.rules[i].priority < rs.rules[j].priority })
	return rs, nil
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
		if req.Header == nil {
			return "", "", false, false
		}
		k := req.Header.Get(rs.identity.apiKeyHeader)
		return "key:", k, false, k != ""
	case idHeader:
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
