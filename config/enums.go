package config

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/static"
)

// The configuration's words are typed where they are decoded: each type
// below checks its value against the one list of valid values (here, or in
// the package that gives the word its meaning) when the YAML is decoded,
// and an error names the line. Validate checks them again for
// configurations built in Go. Their underlying type is string, so Go code
// may still write them as string literals.

// valueError is a decoded word that is not one of the valid values.
type valueError struct {
	line  int
	value string
	want  string
}

func (e *valueError) Error() string {
	return fmt.Sprintf("line %d: %q is not %s", e.line, e.value, e.want)
}

// oneOf lists words for an error: "a, b or c".
func oneOf[T ~string](words ...T) string {
	s := make([]string, len(words))
	for i, w := range words {
		s[i] = string(w)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// decodeWord decodes a scalar into *dst when check accepts it.
func decodeWord[T ~string](n *yaml.Node, dst *T, check func(T) error, want string) error {
	if n.Kind != yaml.ScalarNode {
		return &valueError{line: n.Line, value: n.Value, want: want}
	}
	v := T(n.Value)
	if check(v) != nil {
		return &valueError{line: n.Line, value: n.Value, want: want}
	}
	*dst = v
	return nil
}

// Mode is a rule's throttling mode.
type Mode string

// The throttling modes.
const (
	ModeHard    Mode = "hard"    // deny over the limit
	ModeSoft    Mode = "soft"    // admit up to soft_percent over the limit
	ModeElastic Mode = "elastic" // over the limit, admit while the service has spare capacity
	ModeShadow  Mode = "shadow"  // never deny; count and log
)

func modes() []Mode { return []Mode{ModeHard, ModeSoft, ModeElastic, ModeShadow} }

// Validate reports whether m is a mode.
func (m Mode) Validate() error {
	for _, v := range modes() {
		if m == v {
			return nil
		}
	}
	return fmt.Errorf("%q is not %s", string(m), oneOf(modes()...))
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (m *Mode) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, m, Mode.Validate, oneOf(modes()...))
}

// IdentifierType says what keys a rule: user_id, ip_address, api_key,
// global, or header:<Name>; or a combination of them but global (the
// "hybrid" identity: the rule is keyed by the pair or tuple), written in
// YAML as a list ([ip_address, user_id]) and held joined by commas.
type IdentifierType string

// The identifier types but header:<Name>.
const (
	IdentifyUser   IdentifierType = "user_id"
	IdentifyIP     IdentifierType = "ip_address"
	IdentifyAPIKey IdentifierType = "api_key"
	IdentifyGlobal IdentifierType = "global"
	// IdentifyHeaderPrefix starts header:<Name>.
	IdentifyHeaderPrefix = "header:"
)

const identifierWant = "user_id, ip_address, api_key, header:<Name> or global, or a list of them but global"

// maxIdentifierParts bounds a combined identifier.
const maxIdentifierParts = 4

// Parts returns the identifier types t combines: t itself when it is one.
func (t IdentifierType) Parts() []IdentifierType {
	parts := strings.Split(string(t), ",")
	out := make([]IdentifierType, len(parts))
	for i, p := range parts {
		out[i] = IdentifierType(p)
	}
	return out
}

// Header returns the header name of a header:<Name> identifier, or "".
func (t IdentifierType) Header() string {
	if name, ok := strings.CutPrefix(string(t), IdentifyHeaderPrefix); ok && !strings.Contains(name, ",") {
		return name
	}
	return ""
}

// Validate reports whether t is an identifier type or a valid combination.
func (t IdentifierType) Validate() error {
	parts := t.Parts()
	if len(parts) == 1 {
		return t.checkOne()
	}
	if len(parts) > maxIdentifierParts {
		return fmt.Errorf("%d identifiers combined, at most %d", len(parts), maxIdentifierParts)
	}
	seen := map[IdentifierType]bool{}
	for _, p := range parts {
		if err := p.checkOne(); err != nil {
			return err
		}
		if p == IdentifyGlobal {
			return errors.New("global cannot be combined: it is one key for everyone")
		}
		if seen[p] {
			return fmt.Errorf("%q listed twice", string(p))
		}
		seen[p] = true
	}
	return nil
}

func (t IdentifierType) checkOne() error {
	switch t {
	case IdentifyUser, IdentifyIP, IdentifyAPIKey, IdentifyGlobal:
		return nil
	}
	if h := t.Header(); h != "" && !strings.ContainsAny(h, " :\t") {
		return nil
	}
	return fmt.Errorf("%q is not %s", string(t), identifierWant)
}

// UnmarshalYAML implements yaml.Unmarshaler: one word, or a list of them.
func (t *IdentifierType) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return decodeWord(n, t, IdentifierType.Validate, identifierWant)
	}
	var words []string
	for _, c := range n.Content {
		if c.Kind != yaml.ScalarNode || c.Value == "" || strings.Contains(c.Value, ",") {
			return &valueError{line: c.Line, value: c.Value, want: identifierWant}
		}
		words = append(words, c.Value)
	}
	v := IdentifierType(strings.Join(words, ","))
	if len(words) == 0 {
		return &valueError{line: n.Line, value: "[]", want: identifierWant}
	}
	if err := v.Validate(); err != nil {
		return &valueError{line: n.Line, value: "[" + strings.Join(words, ", ") + "]", want: identifierWant + " (" + err.Error() + ")"}
	}
	*t = v
	return nil
}

// StaticAlgorithm names a rule's static algorithm (static.ParseAlgorithm's
// names); AdaptiveAlgorithm names the adaptive limit's.
type StaticAlgorithm string

// Parse returns the static algorithm.
func (a StaticAlgorithm) Parse() (static.Algorithm, error) { return static.ParseAlgorithm(string(a)) }

// Validate reports whether a names an algorithm.
func (a StaticAlgorithm) Validate() error { _, err := a.Parse(); return err }

// UnmarshalYAML implements yaml.Unmarshaler.
func (a *StaticAlgorithm) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, a, StaticAlgorithm.Validate, oneOf(static.AlgorithmNames()...))
}

// FailurePolicy names what a rule does when Redis cannot decide
// (static.ParseFailurePolicy's names: local, open, closed).
type FailurePolicy string

// Parse returns the failure policy.
func (f FailurePolicy) Parse() (static.FailurePolicy, error) {
	return static.ParseFailurePolicy(string(f))
}

// Validate reports whether f names a failure policy.
func (f FailurePolicy) Validate() error { _, err := f.Parse(); return err }

// UnmarshalYAML implements yaml.Unmarshaler.
func (f *FailurePolicy) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, f, FailurePolicy.Validate, oneOf(static.FailurePolicyNames()...))
}

// QueueOrder names the wait queue's order (queue.ParseOrder's names).
type QueueOrder string

// Parse returns the queue order.
func (o QueueOrder) Parse() (queue.Order, error) { return queue.ParseOrder(string(o)) }

// Validate reports whether o names an order.
func (o QueueOrder) Validate() error { _, err := o.Parse(); return err }

// UnmarshalYAML implements yaml.Unmarshaler.
func (o *QueueOrder) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, o, QueueOrder.Validate, oneOf(queue.OrderNames()...))
}

// AdaptiveAlgorithm names the adaptive limit's algorithm
// (adaptive.NewAlgorithm's names), or "off".
type AdaptiveAlgorithm string

// AdaptiveOff turns the adaptive limit off.
const AdaptiveOff AdaptiveAlgorithm = "off"

// New returns a fresh algorithm, or nil for "off".
func (a AdaptiveAlgorithm) New() (adaptive.Algorithm, error) {
	if a == AdaptiveOff {
		return nil, nil
	}
	return adaptive.NewAlgorithm(string(a))
}

// Validate reports whether a names an adaptive algorithm or "off".
func (a AdaptiveAlgorithm) Validate() error { _, err := a.New(); return err }

// UnmarshalYAML implements yaml.Unmarshaler.
func (a *AdaptiveAlgorithm) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, a, AdaptiveAlgorithm.Validate, oneOf(append(adaptive.AlgorithmNames(), string(AdaptiveOff))...))
}

// StoreType selects the static limits' store: memory, redis or gossip.
type StoreType string

// The store types.
const (
	StoreMemory StoreType = "memory"
	StoreRedis  StoreType = "redis"
	// StoreGossip shares usage among the sidecars themselves, no Redis.
	StoreGossip StoreType = "gossip"
)

// Validate reports whether s is a store type.
func (s StoreType) Validate() error {
	if s == StoreMemory || s == StoreRedis || s == StoreGossip {
		return nil
	}
	return fmt.Errorf("%q is not %s", string(s), oneOf(StoreMemory, StoreRedis, StoreGossip))
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *StoreType) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, s, StoreType.Validate, oneOf(StoreMemory, StoreRedis, StoreGossip))
}

// Consistency says how a Redis-backed rule shares its usage: exact (every
// check in Redis) or eventual (decided locally, synced every sync_interval).
type Consistency string

// The consistency modes.
const (
	ConsistencyExact    Consistency = "exact"
	ConsistencyEventual Consistency = "eventual"
)

// Validate reports whether c is a consistency mode.
func (c Consistency) Validate() error {
	if c == ConsistencyExact || c == ConsistencyEventual {
		return nil
	}
	return fmt.Errorf("%q is not %s", string(c), oneOf(ConsistencyExact, ConsistencyEventual))
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *Consistency) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, c, Consistency.Validate, oneOf(ConsistencyExact, ConsistencyEventual))
}

// Scope says where a rule's limit holds: in this region (its Redis) or
// globally, split into regional budgets.
type Scope string

// The scopes.
const (
	ScopeRegion Scope = "region"
	ScopeGlobal Scope = "global"
)

// Validate reports whether s is a scope.
func (s Scope) Validate() error {
	if s == ScopeRegion || s == ScopeGlobal {
		return nil
	}
	return fmt.Errorf("%q is not %s", string(s), oneOf(ScopeRegion, ScopeGlobal))
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *Scope) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, s, Scope.Validate, oneOf(ScopeRegion, ScopeGlobal))
}

// Fairness says how waiting requests of one class share the queue: none
// (in the queue's order), or in turn among tenants keyed as a rule would be
// (user_id, ip_address, api_key, header:<Name>).
type Fairness string

// FairnessNone serves a class's waiters in the queue's order.
const FairnessNone Fairness = "none"

const fairnessWant = "none, user_id, ip_address, api_key or header:<Name>"

// Tenant returns the identifier type that keys tenants, or "" for none.
func (f Fairness) Tenant() IdentifierType {
	if f == FairnessNone || f == "" {
		return ""
	}
	return IdentifierType(f)
}

// Validate reports whether f is a fairness setting.
func (f Fairness) Validate() error {
	t := f.Tenant()
	if f == FairnessNone || (t != IdentifyGlobal && t.checkOne() == nil) {
		return nil
	}
	return fmt.Errorf("%q is not %s", string(f), fairnessWant)
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (f *Fairness) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, f, Fairness.Validate, fairnessWant)
}

// ProxyEngine is the HTTP engine of the proxy: fast or nethttp.
type ProxyEngine string

// The proxy engines.
const (
	// ProxyFast serves HTTP/1.1 on fasthttp and hands h2c and upgrade
	// requests (websocket) to net/http on the same listener.
	ProxyFast ProxyEngine = "fast"
	// ProxyNetHTTP serves everything on net/http (httputil.ReverseProxy).
	ProxyNetHTTP ProxyEngine = "nethttp"
)

// Validate reports whether e is a proxy engine.
func (e ProxyEngine) Validate() error {
	if e == ProxyFast || e == ProxyNetHTTP {
		return nil
	}
	return fmt.Errorf("%q is not fast or nethttp", string(e))
}
