// Package envoyconf reads envoyproxy/ratelimit (Lyft ratelimit)
// configuration files, a domain with nested descriptors, and turns them
// into sluice descriptor rules: each descriptor with a rate_limit becomes
// a fixed window rule (that service's one algorithm) of requests_per_unit
// per unit, on the descriptor's path of entries, counting every hit as
// that service does (count_blocked: refused hits too); unlimited, shadow_mode,
// name and replaces, wildcard values ("*" anywhere) and share_threshold
// keep their meaning. What has no
// equivalent is refused with a message that says so, never dropped.
package envoyconf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/config"
)

// file is an envoyproxy/ratelimit configuration file.
type file struct {
	Domain      string       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors"`
}

type descriptor struct {
	Key         string       `yaml:"key"`
	Value       string       `yaml:"value"`
	RateLimit   *rateLimit   `yaml:"rate_limit"`
	Descriptors []descriptor `yaml:"descriptors"`
	ShadowMode  bool         `yaml:"shadow_mode"`
	// ShareThreshold makes the values a wildcard matches share one
	// counter.
	ShareThreshold bool `yaml:"share_threshold"`
	// Metadata goes into the answer's dynamic metadata when the descriptor
	// passes (with rls.response_dynamic_metadata).
	Metadata map[string]any `yaml:"metadata"`
	// QuotaMode: over the limit, the descriptor alone does not make the
	// answer OVER_LIMIT.
	QuotaMode bool `yaml:"quota_mode"`
	// DetailedMetric labels the rule's envoyproxy/ratelimit metrics with
	// the request's values; ValueToMetric this entry alone.
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
}

type rateLimit struct {
	Unit            string    `yaml:"unit"`
	RequestsPerUnit *int64    `yaml:"requests_per_unit"`
	Unlimited       bool      `yaml:"unlimited"`
	Name            string    `yaml:"name"`
	Replaces        []replace `yaml:"replaces"`
}

type replace struct {
	Name string `yaml:"name"`
}

// Units are envoyproxy/ratelimit's units, as that service divides time
// (a month is 30 days, a year 365).
var Units = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
}

// maxDepth bounds the nesting of descriptors.
const maxDepth = config.MaxDescriptorEntries

// Load reads the files and returns their rules, in file order. A domain in
// two files is an error, as in envoyproxy/ratelimit without
// MERGE_DOMAIN_CONFIG.
func Load(paths ...string) ([]config.Rule, error) { return LoadMerging(false, paths...) }

// LoadMerging is Load; with merge, a domain may span several files (the
// peer's MERGE_DOMAIN_CONFIG): their descriptors add up, and one
// descriptor configured in two of them is an error naming both.
func LoadMerging(merge bool, paths ...string) ([]config.Rule, error) {
	var rules []config.Rule
	from := map[string]string{}     // rule id -> the file that configured it
	idDomain := map[string]string{} // rule id -> its domain
	domains := map[string]string{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rs, domain, err := Parse(p, data)
		if err != nil {
			return nil, err
		}
		if other, ok := domains[domain]; ok && !merge {
			return nil, fmt.Errorf("%s: domain %q is also configured in %s (set rls.merge_domains to merge them, as MERGE_DOMAIN_CONFIG does)", p, domain, other)
		}
		domains[domain] = p
		scopeNames(rs, domain, idDomain)
		for _, r := range rs {
			if other, ok := from[r.RuleID]; ok {
				if other == p {
					return nil, fmt.Errorf("rule name %q is used twice in %s", r.RuleID, p)
				}
				return nil, fmt.Errorf("%s: %s is also configured in %s", p, r.RuleID, other)
			}
			from[r.RuleID], idDomain[r.RuleID] = p, domain
		}
		rules = append(rules, rs...)
	}
	return rules, nil
}

// scopeNames renames the rules of one file (of domain) whose ids another
// domain's file took (taken: id -> domain): a rate_limit name is the
// rule's id, and the peer scopes names by domain, so two domains may both
// name a limit "per_user". The later one becomes "domain.name" (numbered
// if that is taken too), and the file's replaces follow it. An id its own
// domain took (merged files) stays, to be refused as a duplicate.
func scopeNames(rs []config.Rule, domain string, taken map[string]string) {
	used := make(map[string]bool, len(rs)) // this file's ids, as they become
	for _, r := range rs {
		used[r.RuleID] = true
	}
	rename := map[string]string{}
	for i := range rs {
		id := rs[i].RuleID
		if d, ok := taken[id]; !ok || d == domain {
			continue
		}
		n := domain + "." + id
		for k := 2; taken[n] != "" || used[n]; k++ {
			n = fmt.Sprintf("%s.%s#%d", domain, id, k)
		}
		rename[id], used[n] = n, true
		rs[i].RuleID = n
	}
	if len(rename) == 0 {
		return
	}
	for i := range rs {
		for j, id := range rs[i].Replaces {
			if n, ok := rename[id]; ok {
				rs[i].Replaces[j] = n
			}
		}
	}
}

// Parse converts one file's data; name names it in errors. It returns the
// rules and the file's domain.
func Parse(name string, data []byte) ([]config.Rule, string, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if strings.Contains(msg, "not found in type") {
			msg += " (a field envoyproxy/ratelimit's configuration does not have, or one sluice cannot convert)"
		}
		return nil, "", fmt.Errorf("%s: %s", name, msg)
	}
	if f.Domain == "" {
		return nil, "", fmt.Errorf("%s: domain: required", name)
	}
	c := converter{file: name, domain: f.Domain, seen: map[string]bool{}, ids: map[string]bool{}}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) == nil {
		c.lines = descriptorLines(&doc, nil)
	}
	if err := c.walk(f.Descriptors, nil); err != nil {
		return nil, "", err
	}
	// A name is the rule's id; a name several limits share (replaces then
	// replaces them all) is made unique with the descriptor's path.
	byName := map[string][]int{}
	for i, n := range c.names {
		if n != "" {
			byName[n] = append(byName[n], i)
		}
	}
	for i, n := range c.names {
		switch {
		case n == "":
		case len(byName[n]) == 1:
			c.rules[i].RuleID = n
		default:
			c.rules[i].RuleID = n + "@" + c.rules[i].RuleID
		}
	}
	for i := range c.rules {
		r := &c.rules[i]
		var ids []string
		for _, n := range r.Replaces {
			if len(byName[n]) == 0 {
				return nil, "", fmt.Errorf("%s: %s: replaces %q, which no rate_limit of the domain names", name, r.RuleID, n)
			}
			for _, j := range byName[n] {
				ids = append(ids, c.rules[j].RuleID)
			}
		}
		r.Replaces = ids
	}
	return c.rules, f.Domain, nil
}

// descriptorLines appends the line of every descriptor under n, in the
// order walk visits them (document order, parents first).
func descriptorLines(n *yaml.Node, lines []int) []int {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			lines = descriptorLines(c, lines)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value != "descriptors" || n.Content[i+1].Kind != yaml.SequenceNode {
				continue
			}
			for _, d := range n.Content[i+1].Content {
				lines = append(lines, d.Line)
				lines = descriptorLines(d, lines)
			}
		}
	}
	return lines
}

type converter struct {
	file, domain string
	// pos is the file and line of the descriptor being converted, for
	// errors; lines are every descriptor's line, in walk order, and next
	// the index of the next one.
	pos   string
	lines []int
	next  int
	rules []config.Rule
	names []string        // each rule's rate_limit name ("" when none)
	seen  map[string]bool // descriptor paths, for duplicates
	ids   map[string]bool // rule ids given so far
}

func (c *converter) walk(ds []descriptor, parent []config.DescriptorEntry) error {
	if len(parent) >= maxDepth {
		return fmt.Errorf("%s: descriptors nested deeper than %d", c.file, maxDepth)
	}
	for _, d := range ds {
		path := append(append([]config.DescriptorEntry(nil), parent...), config.DescriptorEntry{Key: d.Key, Value: d.Value, ShareThreshold: d.ShareThreshold,
			ValueToMetric: d.ValueToMetric})
		where := c.where(path)
		c.pos = c.file
		if c.next < len(c.lines) {
			c.pos = fmt.Sprintf("%s:%d", c.file, c.lines[c.next])
		}
		c.next++
		if d.Key == "" {
			return fmt.Errorf("%s: %s: key: required", c.pos, where)
		}
		if d.ShareThreshold && !strings.Contains(d.Value, "*") {
			return fmt.Errorf("%s: %s: share_threshold: only for a value with a wildcard (\"*\")", c.pos, where)
		}
		if c.seen[where] {
			return fmt.Errorf("%s: %s: the same descriptor is configured twice", c.pos, where)
		}
		c.seen[where] = true
		if d.RateLimit != nil {
			r, err := c.rule(d, path, where)
			if err != nil {
				return err
			}
			c.rules = append(c.rules, r)
			c.names = append(c.names, d.RateLimit.Name)
		} else if d.ShadowMode {
			return fmt.Errorf("%s: %s: shadow_mode without a rate_limit", c.pos, where)
		} else if len(d.Descriptors) == 0 {
			// A value listed without a limit and nothing below it: the
			// peer's whitelist (its lookup ends there, with no limit), not
			// the limit of a key-only sibling that would match it too.
			c.rules = append(c.rules, config.Rule{RuleID: c.id(where), Description: "imported from " + c.file + ": " + where + " (no limit)",
				Descriptor: &config.Descriptor{Domain: c.domain, Entries: path, Unlimited: true}})
			c.names = append(c.names, "")
		}
		if err := c.walk(d.Descriptors, path); err != nil {
			return err
		}
	}
	return nil
}

// where names a descriptor path as envoyproxy/ratelimit's stats do:
// domain.key_value.key.
func (c *converter) where(path []config.DescriptorEntry) string {
	var b strings.Builder
	b.WriteString(c.domain)
	for _, e := range path {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

func (c *converter) rule(d descriptor, path []config.DescriptorEntry, where string) (config.Rule, error) {
	rl := d.RateLimit
	r := config.Rule{RuleID: c.id(where), Description: "imported from " + c.file + ": " + where,
		Descriptor: &config.Descriptor{Domain: c.domain, Entries: path, EnvoyCompatible: true, Name: rl.Name, Metadata: d.Metadata, QuotaMode: d.QuotaMode,
			DetailedMetric: d.DetailedMetric}}
	for _, rp := range rl.Replaces {
		if rp.Name == "" {
			return r, fmt.Errorf("%s: %s: replaces: an entry without a name", c.pos, where)
		}
		r.Replaces = append(r.Replaces, rp.Name)
	}
	if rl.Unlimited {
		if rl.RequestsPerUnit != nil || rl.Unit != "" {
			return r, fmt.Errorf("%s: %s: rate_limit: unlimited with a unit or requests_per_unit", c.pos, where)
		}
		if d.ShadowMode {
			return r, fmt.Errorf("%s: %s: shadow_mode on an unlimited rate_limit", c.pos, where)
		}
		r.Descriptor.Unlimited = true
		return r, nil
	}
	unit, ok := Units[strings.ToLower(rl.Unit)]
	if !ok {
		return r, fmt.Errorf("%s: %s: rate_limit.unit: %q is not second, minute, hour, day, week, month or year", c.pos, where, rl.Unit)
	}
	if rl.RequestsPerUnit == nil {
		return r, fmt.Errorf("%s: %s: rate_limit.requests_per_unit: required", c.pos, where)
	}
	if *rl.RequestsPerUnit < 0 {
		return r, fmt.Errorf("%s: %s: rate_limit.requests_per_unit: %d is negative", c.pos, where, *rl.RequestsPerUnit)
	}
	limit := *rl.RequestsPerUnit
	// The peer's counting: every hit counts, refused ones too, and every
	// matching descriptor's counter even when another is over.
	r.Algorithm, r.Limit, r.Window, r.CountBlocked = "fixed_window", &limit, config.Duration(unit), true
	if d.ShadowMode {
		r.Mode = config.ModeShadow
	}
	return r, nil
}

// id is a rule id for the descriptor path where, unique in the file: two
// paths that spell the same id ("/a/b" and "/a*b") are numbered.
func (c *converter) id(where string) string {
	id := ruleID(where)
	for n := 2; c.ids[id]; n++ {
		id = fmt.Sprintf("%s-%d", ruleID(where), n)
	}
	c.ids[id] = true
	return id
}

// ruleID turns a descriptor path into a rule id that headers can carry:
// letters, digits and "._:-"; anything else becomes "_".
func ruleID(where string) string {
	b := []byte(where)
	for i, ch := range b {
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("._:-", ch) >= 0
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

// ErrEmpty is Marshal's error for no rules.
var ErrEmpty = errors.New("no rules")

// outRule is a rule as Marshal writes it: only what the conversion sets.
type outRule struct {
	RuleID       string         `yaml:"rule_id"`
	Description  string         `yaml:"description,omitempty"`
	Algorithm    string         `yaml:"algorithm,omitempty"`
	Limit        *int64         `yaml:"limit,omitempty"`
	Window       string         `yaml:"window,omitempty"`
	Mode         string         `yaml:"mode,omitempty"`
	CountBlocked bool           `yaml:"count_blocked,omitempty"`
	Descriptor   *outDescriptor `yaml:"descriptor"`
	Replaces     []string       `yaml:"replaces,omitempty"`
}

type outDescriptor struct {
	Domain          string         `yaml:"domain"`
	Entries         []outEntry     `yaml:"entries,flow"`
	Unlimited       bool           `yaml:"unlimited,omitempty"`
	EnvoyCompatible bool           `yaml:"envoy_compatible,omitempty"`
	Name            string         `yaml:"name,omitempty"`
	Metadata        map[string]any `yaml:"metadata,omitempty"`
	QuotaMode       bool           `yaml:"quota_mode,omitempty"`
	DetailedMetric  bool           `yaml:"detailed_metric,omitempty"`
}

type outEntry struct {
	Key            string `yaml:"key"`
	Value          string `yaml:"value,omitempty"`
	ShareThreshold bool   `yaml:"share_threshold,omitempty"`
	ValueToMetric  bool   `yaml:"value_to_metric,omitempty"`
}

// Marshal writes rules as a sluice configuration's rules: section.
func Marshal(rules []config.Rule) ([]byte, error) {
	if len(rules) == 0 {
		return nil, ErrEmpty
	}
	out := struct {
		Rules []outRule `yaml:"rules"`
	}{}
	for _, r := range rules {
		o := outRule{RuleID: r.RuleID, Description: r.Description, Algorithm: string(r.Algorithm), Limit: r.Limit,
			Mode: string(r.Mode), CountBlocked: r.CountBlocked, Replaces: r.Replaces}
		if r.Window != 0 {
			o.Window = r.Window.D().String()
		}
		if d := r.Descriptor; d != nil {
			o.Descriptor = &outDescriptor{Domain: d.Domain, Unlimited: d.Unlimited, EnvoyCompatible: d.EnvoyCompatible, Name: d.Name,
				Metadata: d.Metadata, QuotaMode: d.QuotaMode, DetailedMetric: d.DetailedMetric}
			for _, e := range d.Entries {
				o.Descriptor.Entries = append(o.Descriptor.Entries, outEntry(e))
			}
		}
		out.Rules = append(out.Rules, o)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
