package config

import (
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

// Check reports whether m is a mode.
func (m Mode) Check() error {
	for _, v := range modes() {
		if m == v {
			return nil
		}
	}
	return fmt.Errorf("%q is not %s", string(m), oneOf(modes()...))
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (m *Mode) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, m, Mode.Check, oneOf(modes()...))
}

// IdentifierType says what keys a rule: user_id, ip_address, api_key,
// global, or header:<Name>.
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

const identifierWant = "user_id, ip_address, api_key, header:<Name> or global"

// Header returns the header name of a header:<Name> identifier, or "".
func (t IdentifierType) Header() string {
	if name, ok := strings.CutPrefix(string(t), IdentifyHeaderPrefix); ok {
		return name
	}
	return ""
}

// Check reports whether t is an identifier type.
func (t IdentifierType) Check() error {
	switch t {
	case IdentifyUser, IdentifyIP, IdentifyAPIKey, IdentifyGlobal:
		return nil
	}
	if h := t.Header(); h != "" && !strings.ContainsAny(h, " :\t") {
		return nil
	}
	return fmt.Errorf("%q is not %s", string(t), identifierWant)
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (t *IdentifierType) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, t, IdentifierType.Check, identifierWant)
}

// Algorithm names a static algorithm (static.ParseAlgorithm's names).
type Algorithm string

// Parse returns the static algorithm.
func (a Algorithm) Parse() (static.Algorithm, error) { return static.ParseAlgorithm(string(a)) }

// Check reports whether a names an algorithm.
func (a Algorithm) Check() error { _, err := a.Parse(); return err }

// UnmarshalYAML implements yaml.Unmarshaler.
func (a *Algorithm) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, a, Algorithm.Check, oneOf(static.AlgorithmNames()...))
}

// FailurePolicy names what a rule does when Redis cannot decide
// (static.ParseFailurePolicy's names: local, open, closed).
type FailurePolicy string

// Parse returns the failure policy.
func (f FailurePolicy) Parse() (static.FailurePolicy, error) {
	return static.ParseFailurePolicy(string(f))
}

// Check reports whether f names a failure policy.
func (f FailurePolicy) Check() error { _, err := f.Parse(); return err }

// UnmarshalYAML implements yaml.Unmarshaler.
func (f *FailurePolicy) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, f, FailurePolicy.Check, oneOf(static.FailurePolicyNames()...))
}

// QueueOrder names the wait queue's order (queue.ParseOrder's names).
type QueueOrder string

// Parse returns the queue order.
func (o QueueOrder) Parse() (queue.Order, error) { return queue.ParseOrder(string(o)) }

// Check reports whether o names an order.
func (o QueueOrder) Check() error { _, err := o.Parse(); return err }

// UnmarshalYAML implements yaml.Unmarshaler.
func (o *QueueOrder) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, o, QueueOrder.Check, oneOf(queue.OrderNames()...))
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

// Check reports whether a names an adaptive algorithm or "off".
func (a AdaptiveAlgorithm) Check() error { _, err := a.New(); return err }

// UnmarshalYAML implements yaml.Unmarshaler.
func (a *AdaptiveAlgorithm) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, a, AdaptiveAlgorithm.Check, oneOf(append(adaptive.AlgorithmNames(), string(AdaptiveOff))...))
}

// StoreType selects the static limits' store: memory or redis.
type StoreType string

// The store types.
const (
	StoreMemory StoreType = "memory"
	StoreRedis  StoreType = "redis"
)

// Check reports whether s is a store type.
func (s StoreType) Check() error {
	if s == StoreMemory || s == StoreRedis {
		return nil
	}
	return fmt.Errorf("%q is not %s", string(s), oneOf(StoreMemory, StoreRedis))
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *StoreType) UnmarshalYAML(n *yaml.Node) error {
	return decodeWord(n, s, StoreType.Check, oneOf(StoreMemory, StoreRedis))
}
