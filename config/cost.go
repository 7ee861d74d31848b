package config

import (
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"gopkg.in/yaml.v3"
)

// CostKind is where a rule reads a request's cost.
type CostKind uint8

// The sources of a cost learned after admission.
const (
	// CostFixed: no cost_from; a request costs 1 (a descriptor its hits).
	CostFixed CostKind = iota
	// CostHeader: an integer in a response header (or trailer).
	CostHeader
	// CostJSON: a number at a path in a JSON response body, or in the
	// last event of a text/event-stream body that has it.
	CostJSON
	// CostUpstreamMS: the upstream's time in milliseconds, rounded up.
	CostUpstreamMS
	// CostResponseBytes: the bytes of the response body.
	CostResponseBytes
	// CostHitsAddend: for a descriptor rule, Envoy's call at the end of
	// the stream (apply_on_stream_done) carries the cost as its hits.
	CostHitsAddend
)

// MaxCostPath bounds a cost_from json path, in bytes.
const MaxCostPath = 256

// CostFrom is a rule's cost_from: {header: X-Tokens-Used},
// {json: usage.total_tokens}, upstream_ms, response_bytes, or, for a
// descriptor rule, hits_addend.
type CostFrom struct {
	Kind CostKind
	// Name is the header's name (canonical) or the JSON path.
	Name string
}

// String returns the configuration form of c.
func (c CostFrom) String() string {
	switch c.Kind {
	case CostHeader:
		return "header:" + c.Name
	case CostJSON:
		return "json:" + c.Name
	case CostUpstreamMS:
		return "upstream_ms"
	case CostResponseBytes:
		return "response_bytes"
	case CostHitsAddend:
		return "hits_addend"
	}
	return "fixed"
}

const costFromWant = "{header: <Name>}, {json: <path>}, upstream_ms, response_bytes or hits_addend"

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *CostFrom) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Value {
		case "upstream_ms":
			*c = CostFrom{Kind: CostUpstreamMS}
		case "response_bytes":
			*c = CostFrom{Kind: CostResponseBytes}
		case "hits_addend":
			*c = CostFrom{Kind: CostHitsAddend}
		default:
			return fmt.Errorf("line %d: %q: want %s", n.Line, n.Value, costFromWant)
		}
		return nil
	case yaml.MappingNode:
		if len(n.Content) != 2 {
			return fmt.Errorf("line %d: want one of %s", n.Line, costFromWant)
		}
		k, v := n.Content[0], n.Content[1]
		if v.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: %s: want a string", v.Line, k.Value)
		}
		switch k.Value {
		case "header":
			*c = CostFrom{Kind: CostHeader, Name: v.Value}
		case "json":
			*c = CostFrom{Kind: CostJSON, Name: v.Value}
		default:
			return fmt.Errorf("line %d: %q: want %s", k.Line, k.Value, costFromWant)
		}
		return c.Validate()
	}
	return fmt.Errorf("line %d: want %s", n.Line, costFromWant)
}

// Validate reports whether c is well formed: a header name is an HTTP
// token (it is kept canonical), a JSON path is dot-separated names and
// array indexes of letters, digits, '_' and '-', at most MaxCostPath bytes.
func (c *CostFrom) Validate() error {
	switch c.Kind {
	case CostHeader:
		if !httpguts.ValidHeaderFieldName(c.Name) {
			return fmt.Errorf("header %q: want a header name", c.Name)
		}
		c.Name = textproto.CanonicalMIMEHeaderKey(c.Name)
	case CostJSON:
		if err := validCostPath(c.Name); err != nil {
			return fmt.Errorf("json %q: %w", c.Name, err)
		}
	}
	return nil
}

func validCostPath(p string) error {
	if p == "" || len(p) > MaxCostPath {
		return fmt.Errorf("want a path of 1 to %d bytes such as usage.total_tokens", MaxCostPath)
	}
	for seg := range strings.SplitSeq(p, ".") {
		if seg == "" {
			return errors.New("an empty name between dots")
		}
		if strings.ContainsFunc(seg, func(r rune) bool {
			return !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) {
			return fmt.Errorf("%q: names and indexes hold letters, digits, '_' and '-' only", seg)
		}
	}
	return nil
}

// CostEstimate is a rule's cost_estimate: what admission reserves of a
// cost read from the response, corrected when the response has said it.
// The zero value is none.
type CostEstimate struct {
	// Mean reserves the rule's recent mean cost.
	Mean bool
	// N, when not Mean, reserves N units; 0 (none) reserves 1, the least
	// a request needs to find for admission.
	N int64
}

// String returns the configuration form of e.
func (e CostEstimate) String() string {
	switch {
	case e.Mean:
		return "mean"
	case e.N == 0:
		return "none"
	}
	return strconv.FormatInt(e.N, 10)
}

// UnmarshalYAML implements yaml.Unmarshaler: none, mean, or a whole number.
func (e *CostEstimate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "none":
			*e = CostEstimate{}
			return nil
		case "mean":
			*e = CostEstimate{Mean: true}
			return nil
		}
		if v, err := strconv.ParseInt(n.Value, 10, 64); err == nil && v >= 1 && v <= maxCost {
			*e = CostEstimate{N: v}
			return nil
		}
	}
	return fmt.Errorf("line %d: cost_estimate %q: want none, mean, or a whole number in [1, %d]", n.Line, n.Value, maxCost)
}

// maxCost bounds a cost: as static.MaxLimit, more than any quota holds.
const maxCost = 1 << 40

// validateCost checks a rule's cost_from, cost_default and cost_estimate.
func (r *Rule) validateCost() error {
	if r.CostFrom == nil {
		if r.CostDefault != nil || r.CostEstimate != (CostEstimate{}) {
			return errors.New("cost_default, cost_estimate: only with cost_from")
		}
		return nil
	}
	if err := r.CostFrom.Validate(); err != nil {
		return fmt.Errorf("cost_from: %w", err)
	}
	switch {
	case r.Descriptor != nil && r.CostFrom.Kind != CostHitsAddend:
		return errors.New("cost_from: a descriptor rule never sees the response; use hits_addend " +
			"(Envoy sends the cost at the stream's end, apply_on_stream_done)")
	case r.Descriptor == nil && r.CostFrom.Kind == CostHitsAddend:
		return errors.New("cost_from: hits_addend is for descriptor rules (Envoy's rate limit service)")
	case r.Algorithm == "concurrency":
		return errors.New("cost_from: a concurrency limit counts requests in flight, not a cost")
	case r.Algorithm == "token_bucket" && r.Warmup > 0:
		return errors.New("cost_from: a token bucket with warmup cannot be charged after admission; remove warmup")
	case r.CostDefault != nil && (*r.CostDefault < 0 || *r.CostDefault > maxCost):
		return fmt.Errorf("cost_default: %d is outside [0, %d]", *r.CostDefault, maxCost)
	case r.CostFrom.Kind == CostHitsAddend && r.CostEstimate != (CostEstimate{}):
		return errors.New("cost_estimate: with hits_addend, Envoy's first call reserves (its hits)")
	}
	return nil
}
