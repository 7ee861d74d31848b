package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/static"
)

// This file checks a configuration whose defaults are filled: every
// field, every rule, and the contradictions between them.

// Validate reports the first problem, naming the file, the rule and the
// field. It expects SetDefaults to have run.
func (c *Config) Validate() error {
	top := func(field, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %s", c.File, field, fmt.Sprintf(format, args...))
	}
	for _, a := range []struct{ field, v string }{{"listen", c.Listen}, {"admin", c.Admin}} {
		if _, _, err := splitHostPort(a.v); err != nil {
			return top(a.field, "%v", err)
		}
	}
	if c.MaxHeaderBytes < 1024 || c.MaxHeaderBytes > 16<<20 {
		return top("max_header_bytes", "%d is outside [1024, 16777216]", c.MaxHeaderBytes)
	}
	if d := c.WriteTimeout.D(); d < time.Millisecond || d > time.Hour {
		return top("write_timeout", "%v is outside [1ms, 1h]", d)
	}
	if c.RequestBuffer < 0 || c.RequestBuffer > 64<<20 {
		return top("request_buffer", "%d is outside [0, 67108864]", c.RequestBuffer)
	}
	if n := *c.UploadMinRate; n < 0 || n > 1<<30 {
		return top("upload_min_rate", "%d is outside [0, 1073741824] bytes per second", n)
	}
	if err := c.Proxy.Engine.Validate(); err != nil {
		return top("proxy.engine", "%v", err)
	}
	if err := c.Deadlines.validate(); err != nil {
		return top("deadlines", "%v", err)
	}
	if err := c.Store.Type.Validate(); err != nil {
		return top("store.type", "%v", err)
	}
	if err := c.validateSharing(); err != nil {
		return err
	}
	if c.Store.Type == StoreRedis && len(c.Store.Redis.Addrs) == 0 {
		return top("store.redis.addrs", "at least one address is required for store type redis")
	}
	if c.Store.Memory.MaxKeys < 1 {
		return top("store.memory.max_keys", "must be at least 1")
	}
	if err := c.Store.Redis.OnError.Validate(); err != nil {
		return top("store.redis.on_error", "%v", err)
	}
	if c.Store.Redis.Instances < 1 {
		return top("store.redis.instances", "must be at least 1")
	}
	if err := c.Store.Redis.TLS.Validate(); err != nil {
		return top("store.redis.tls", "%v", err)
	}
	switch id := c.Identity; {
	case id.UserFrom != "header" && id.UserFrom != "jwt":
		return top("identity.user_from", "%q is not header or jwt", id.UserFrom)
	case id.UserFromJWT && id.UserFrom != "jwt":
		return top("identity.user_from_jwt", "contradicts user_from: %s; set one of them", id.UserFrom)
	case id.IPv4Prefix < 1 || id.IPv4Prefix > 32:
		return top("identity.ipv4_prefix", "%d is outside [1, 32]", id.IPv4Prefix)
	case id.IPv6Prefix < 1 || id.IPv6Prefix > 128:
		return top("identity.ipv6_prefix", "%d is outside [1, 128]", id.IPv6Prefix)
	}
	for _, p := range c.Identity.TrustedProxies {
		if _, err := ParsePrefix(p); err != nil {
			return top("identity.trusted_proxies", "%v", err)
		}
	}
	a := c.Adaptive
	if err := a.Algorithm.Validate(); err != nil {
		return top("adaptive.algorithm", "%v", err)
	}
	if a.MinLimit < 1 || a.MinLimit > a.MaxLimit {
		return top("adaptive.min_limit", "must be in [1, max_limit (%d)]", a.MaxLimit)
	}
	if a.InitialLimit < a.MinLimit || a.InitialLimit > a.MaxLimit {
		return top("adaptive.initial_limit", "%d is outside [min_limit, max_limit] = [%d, %d]", a.InitialLimit, a.MinLimit, a.MaxLimit)
	}
	if a.ElasticHeadroom <= 0 || a.ElasticHeadroom > 1 {
		return top("adaptive.elastic_headroom", "%v is outside (0, 1]", a.ElasticHeadroom)
	}
	if *c.Queue.ClosedLoopMaxSize < 0 {
		return top("queue.closed_loop_max_size", "must not be negative")
	}
	if w := *c.Queue.ClosedLoopMaxWait; w < 0 || w > Duration(time.Minute) {
		return top("queue.closed_loop_max_wait", "%v is outside [0s, 1m]", w.D())
	}
	if *c.Queue.MaxSize < 0 {
		return top("queue.max_size", "must not be negative")
	}
	if err := c.Queue.Order.Validate(); err != nil {
		return top("queue.order", "%v", err)
	}
	if err := c.Queue.Fairness.Validate(); err != nil {
		return top("queue.fairness", "%v", err)
	}
	if err := a.validateClasses(); err != nil {
		return top("adaptive.classes", "%v", err)
	}
	if err := c.validateSource(); err != nil {
		return err
	}
	if c.RLS.Listen != "" {
		if path, ok := strings.CutPrefix(c.RLS.Listen, "unix:"); ok {
			if path == "" {
				return top("rls.listen", "unix: needs a socket path (unix:/run/sluice/rls.sock)")
			}
		} else if _, _, err := splitHostPort(c.RLS.Listen); err != nil {
			return top("rls.listen", "%v", err)
		}
	}
	if r := c.RLS.NearLimitRatio; !(r > 0 && r <= 1) {
		return top("rls.near_limit_ratio", "%v is outside (0, 1]", r)
	}
	if t := c.RLS.TLS; t != nil && (t.CertFile == "" || t.KeyFile == "") {
		return top("rls.tls", "cert_file and key_file are required")
	}
	seen := map[string]bool{}
	for i := range c.Rules {
		r := &c.Rules[i]
		if r.RuleID == "" {
			return fmt.Errorf("%s: rule #%d: rule_id: required", c.File, i+1)
		}
		if r.RuleID == ReservedRuleID {
			return fmt.Errorf("%s: rule %q: rule_id: reserved for the adaptive limit's shed responses; choose another", c.File, r.RuleID)
		}
		if seen[r.RuleID] {
			return fmt.Errorf("%s: rule %q: rule_id: defined twice", c.File, r.RuleID)
		}
		seen[r.RuleID] = true
		if err := r.validate(); err != nil {
			return fmt.Errorf("%s: rule %q: %w", c.File, r.RuleID, err)
		}
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		for _, id := range r.Replaces {
			if !seen[id] || id == r.RuleID {
				return fmt.Errorf("%s: rule %q: replaces: %q is not another rule", c.File, r.RuleID, id)
			}
		}
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("%q is not host:port", addr)
	}
	port, err := strconv.Atoi(addr[i+1:])
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q has no valid port", addr)
	}
	return addr[:i], port, nil
}

// ParsePrefix parses a CIDR or a single address (as a /32 or /128).
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

func (r *Rule) validate() error {
	if r.Descriptor != nil {
		if err := r.Descriptor.validate(); err != nil {
			return fmt.Errorf("descriptor.%w", err)
		}
		if r.IdentifierType != "" {
			return errors.New("identifier_type: a descriptor rule is keyed by the descriptor's values; remove identifier_type")
		}
		if !reflect.DeepEqual(r.Match, Match{}) {
			return errors.New("match: a descriptor rule matches descriptors, not HTTP requests; remove match")
		}
		if r.Descriptor.Unlimited {
			if r.Algorithm != "" || r.Limit != nil {
				return errors.New("descriptor.unlimited: an unlimited descriptor has no algorithm or limit")
			}
			return nil
		}
		if r.Algorithm == "concurrency" {
			return errors.New("algorithm: concurrency needs each request's end, which Envoy's rate limit API does not report; " +
				"use a rate algorithm, or sluice as the proxy")
		}
	} else if len(r.Replaces) > 0 {
		return errors.New("replaces: only descriptor rules replace others")
	}
	if r.IdentifierType == "" && r.Descriptor == nil {
		return errors.New("identifier_type: required (" + identifierWant + ")")
	}
	if r.Descriptor == nil {
		if err := r.IdentifierType.Validate(); err != nil {
			return fmt.Errorf("identifier_type: %w", err)
		}
	}
	if r.Algorithm == "" {
		return errors.New("algorithm: required")
	}
	if r.Limit == nil {
		return errors.New("limit: required")
	}
	if r.WindowSizeSeconds != nil && r.Window != 0 {
		return errors.New("window: set window or window_size_seconds, not both")
	}
	if err := r.Mode.Validate(); err != nil {
		return fmt.Errorf("mode: %w", err)
	}
	if sp := *r.SoftPercent; sp < 0 || sp > 1000 || math.IsNaN(sp) {
		return fmt.Errorf("soft_percent: %v is outside [0, 1000]", sp)
	}
	if r.OnError != "" {
		if err := r.OnError.Validate(); err != nil {
			return fmt.Errorf("on_error: %w", err)
		}
	}
	if _, err := r.Policy(); err != nil {
		return err
	}
	if r.MaxWait < 0 || r.MaxWait > Duration(5*time.Minute) {
		return fmt.Errorf("max_wait: %v is outside [0s, 5m]", r.MaxWait.D())
	}
	if err := r.validateCost(); err != nil {
		return err
	}
	return r.Match.validate()
}

// Equal reports whether a and b configure the same adaptive limit.
func (a Adaptive) Equal(b Adaptive) bool { return reflect.DeepEqual(a, b) }

// ClassNames returns the classes' names, highest first.
func (a Adaptive) ClassNames() []string {
	names := make([]string, len(a.Classes))
	for i, c := range a.Classes {
		names[i] = c.Name
	}
	return names
}

func (a Adaptive) validateClasses() error {
	if len(a.Classes) == 0 {
		if a.DefaultClass != "" {
			return fmt.Errorf("default_class %q names no class (there are none)", a.DefaultClass)
		}
		return nil
	}
	if a.Algorithm == AdaptiveOff {
		return errors.New("classes share the adaptive limit; with algorithm off there is none")
	}
	if len(a.Classes) > 16 {
		return fmt.Errorf("%d classes, at most 16", len(a.Classes))
	}
	total, seen, found := 0.0, map[string]bool{}, false
	for i, c := range a.Classes {
		switch {
		case c.Name == "" || strings.ContainsAny(c.Name, " \t\"\n"):
			return fmt.Errorf("class #%d: name %q: required, without spaces or quotes", i+1, c.Name)
		case seen[c.Name]:
			return fmt.Errorf("class %q: defined twice", c.Name)
		case !(c.Share >= 0 && c.Share <= 1):
			return fmt.Errorf("class %q: share %v is outside [0, 1]", c.Name, c.Share)
		}
		if err := c.Match.validate(); err != nil {
			return fmt.Errorf("class %q: %w", c.Name, err)
		}
		if d := c.Deadline.D(); d < 0 || d > maxDeadline {
			return fmt.Errorf("class %q: deadline %v is outside [0, %v]", c.Name, d, maxDeadline)
		}
		seen[c.Name], total = true, total+c.Share
		found = found || c.Name == a.DefaultClass
	}
	if total > 1+1e-9 {
		return fmt.Errorf("shares sum to %v, more than 1", total)
	}
	if !found {
		return fmt.Errorf("default_class %q names no class", a.DefaultClass)
	}
	return nil
}

func (m Match) validate() error {
	if m.PathPattern != "" {
		if err := checkPattern(m.PathPattern); err != nil {
			return fmt.Errorf("match.path_pattern: %w", err)
		}
	}
	for _, meth := range m.Methods {
		if meth == "" || strings.ToUpper(meth) != meth || strings.ContainsAny(meth, " /") {
			return fmt.Errorf("match.methods: %q is not an upper-case method name", meth)
		}
	}
	for h := range m.RequiredHeaders {
		if h == "" || strings.ContainsAny(h, " :") {
			return fmt.Errorf("match.required_headers: %q is not a header name", h)
		}
	}
	if m.IPSubnet != "" {
		if _, err := ParsePrefix(m.IPSubnet); err != nil {
			return fmt.Errorf("match.ip_subnet: %w", err)
		}
	}
	return nil
}

// checkPattern accepts "/a/*/b" and "/a/**": "**" only as the last segment.
func checkPattern(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q must start with /", p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if strings.Contains(s, "*") && s != "*" && s != "**" {
			return fmt.Errorf("%q: a wildcard must be a whole segment (* or **)", p)
		}
		if s == "**" && i != len(segs)-1 {
			return fmt.Errorf("%q: ** may only be the last segment", p)
		}
	}
	return nil
}

// Policy returns the rule's static policy (the quota as configured; the
// engine widens soft rules). Errors name the field.
func (r *Rule) Policy() (static.Policy, error) {
	alg, err := r.Algorithm.Parse()
	if err != nil {
		return static.Policy{}, fmt.Errorf("algorithm: %w", err)
	}
	p := static.Policy{
		Algorithm: alg, Limit: *r.Limit, Window: r.Window.D(), Burst: r.Burst, Warmup: r.Warmup.D(),
		NoDelay: r.NoDelay, MinInterval: r.MinInterval.D(), CountBlocked: r.CountBlocked, Timeout: r.Timeout.D(),
	}
	if r.WindowSizeSeconds != nil {
		s := *r.WindowSizeSeconds
		if s <= 0 || s > float64(static.MaxWindow/time.Second) || math.IsNaN(s) {
			return static.Policy{}, fmt.Errorf("window_size_seconds: %v out of range", s)
		}
		p.Window = time.Duration(s * float64(time.Second))
	}
	if err := p.Validate(); err != nil {
		return static.Policy{}, err
	}
	return p, nil
}

// validateSharing checks the settings of eventual consistency, gossip and
// regions, and the rules' consistency and scope against them.
func (c *Config) validateSharing() error {
	top := func(field, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %s", c.File, field, fmt.Sprintf(format, args...))
	}
	r := &c.Store.Redis
	if err := r.Consistency.Validate(); err != nil {
		return top("store.redis.consistency", "%v", err)
	}
	if d := r.SyncInterval.D(); d < 10*time.Millisecond || d > time.Minute {
		return top("store.redis.sync_interval", "%v is outside [10ms, 1m]", d)
	}
	if r.DenyCacheKeys != nil && (*r.DenyCacheKeys < 0 || *r.DenyCacheKeys > 10_000_000) {
		return top("store.redis.deny_cache_keys", "%d is outside [0, 10000000]", *r.DenyCacheKeys)
	}
	for name, rr := range r.Regions {
		if name == "" {
			return top("store.redis.regions", "a region needs a name")
		}
		if len(rr.Addrs) == 0 {
			return top("store.redis.regions."+name+".addrs", "at least one address is required")
		}
		if err := rr.TLS.Validate(); err != nil {
			return top("store.redis.regions."+name+".tls", "%v", err)
		}
	}
	if r.Region != "" {
		if c.Store.Type != StoreRedis {
			return top("store.redis.region", "needs store.type: redis")
		}
		own, ok := r.Regions[r.Region]
		if !ok {
			return top("store.redis.region", "%q is not a key of store.redis.regions", r.Region)
		}
		if !slices.Equal(own.Addrs, r.Addrs) {
			return top("store.redis.addrs", "contradicts store.redis.regions.%s.addrs; leave one of them out", r.Region)
		}
	}
	g := &c.Store.Gossip
	if c.Store.Type == StoreGossip {
		if _, _, err := splitHostPort(g.Bind); err != nil {
			return top("store.gossip.bind", "%v", err)
		}
		for _, j := range g.Join {
			if _, _, err := splitHostPort(j); err != nil {
				return top("store.gossip.join", "%v", err)
			}
		}
		if d := g.SyncInterval.D(); d < 10*time.Millisecond || d > time.Minute {
			return top("store.gossip.sync_interval", "%v is outside [10ms, 1m]", d)
		}
	}
	for i := range c.Rules {
		rule := &c.Rules[i]
		field := func(f string) string { return fmt.Sprintf("rule %q: %s", rule.RuleID, f) }
		if rule.Consistency != "" {
			if err := rule.Consistency.Validate(); err != nil {
				return top(field("consistency"), "%v", err)
			}
			if c.Store.Type != StoreRedis {
				return top(field("consistency"), "only a Redis store has consistency modes (store.type is %s)", c.Store.Type)
			}
		}
		if err := rule.Scope.Validate(); err != nil {
			return top(field("scope"), "%v", err)
		}
		if rule.Scope == ScopeGlobal {
			if r.Region == "" || c.Store.Type != StoreRedis {
				return top(field("scope"), "global needs store.type: redis with store.redis.region and regions")
			}
			if rule.Algorithm == "concurrency" {
				return top(field("scope"), "global does not apply to concurrency (requests in flight are not a rate to split)")
			}
		}
	}
	return nil
}

// Eventual reports whether rule r's usage is shared eventually (decided
// locally, synced) under c.
func (c *Config) Eventual(r *Rule) bool {
	if c.Store.Type == StoreGossip {
		return true
	}
	if c.Store.Type != StoreRedis {
		return false
	}
	if r.Consistency != "" {
		return r.Consistency == ConsistencyEventual
	}
	return c.Store.Redis.Consistency == ConsistencyEventual
}

// maxDeadline bounds a configured default budget.
const maxDeadline = 24 * time.Hour

func (d Deadlines) validate() error {
	if len(d.From) > 8 {
		return fmt.Errorf("from: %d headers, at most 8", len(d.From))
	}
	for _, h := range d.From {
		if !httpguts.ValidHeaderFieldName(h) {
			return fmt.Errorf("from: %q is not a header name", h)
		}
	}
	if v := d.Default.D(); v < 0 || v > maxDeadline {
		return fmt.Errorf("default: %v is outside [0, %v]", v, maxDeadline)
	}
	if d.Propagate != "" && d.Propagate != "none" && !httpguts.ValidHeaderFieldName(d.Propagate) {
		return fmt.Errorf("propagate: %q is not a header name (or none)", d.Propagate)
	}
	return nil
}
