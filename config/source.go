package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// RulesSource says where the rules come from when they are not in the
// file: ZooKeeper today.
type RulesSource struct {
	// ZooKeeper, when set, holds the rules: one child znode of Path per
	// rule, named by its rule_id, its data the rule as JSON.
	ZooKeeper *ZooKeeperSource `yaml:"zookeeper"`
}

// ZooKeeperSource is the ZooKeeper layout the rules are read and watched
// from (the seed design's: a persistent parent znode, a child per rule).
type ZooKeeperSource struct {
	// Servers are the ensemble's host:port addresses.
	Servers []string `yaml:"servers"`
	// Path is the parent znode; default /config/ratelimit/rules.
	Path string `yaml:"path"`
	// SessionTimeout is the ZooKeeper session's timeout; default 10s.
	SessionTimeout Duration `yaml:"session_timeout"`
	// Cache is a file the last good rule set is written to after every
	// change, and read at start when ZooKeeper does not answer: a
	// restarted sidecar starts with the rules it last enforced. "" (the
	// default) keeps none.
	Cache string `yaml:"cache"`
	// AuthFile is a file holding "user:password": every session
	// authenticates with that digest identity, so that rules readable only
	// by it (`sluice rules push -readers-auth-file`) can be read. "" (the
	// default): no authentication.
	AuthFile string `yaml:"auth_file"`
}

// DefaultZooKeeperPath is the seed design's parent znode for rules.
const DefaultZooKeeperPath = "/config/ratelimit/rules"

func (s *RulesSource) setDefaults() {
	z := s.ZooKeeper
	if z == nil {
		return
	}
	setDefault(&z.Path, DefaultZooKeeperPath)
	if z.SessionTimeout == 0 {
		z.SessionTimeout = Duration(10 * time.Second)
	}
}

func (c *Config) validateSource() error {
	z := c.RulesSource.ZooKeeper
	if z == nil {
		return nil
	}
	top := func(field, format string, args ...any) error {
		return fmt.Errorf("%s: rules_source.zookeeper.%s: %s", c.File, field, fmt.Sprintf(format, args...))
	}
	if len(z.Servers) == 0 {
		return top("servers", "at least one host:port is required")
	}
	for _, s := range z.Servers {
		if h, _, err := splitHostPort(s); err != nil || h == "" {
			return top("servers", "%q is not host:port", s)
		}
	}
	if err := CheckZNodePath(z.Path); err != nil {
		return top("path", "%v", err)
	}
	if d := z.SessionTimeout.D(); d < 200*time.Millisecond || d > 5*time.Minute {
		return top("session_timeout", "%v is outside [200ms, 5m]", d)
	}
	return nil
}

// CheckZNodePath reports whether p is a znode path a rule set may live
// under: absolute, no trailing slash, no empty, "." or ".." segment.
func CheckZNodePath(p string) error {
	if !strings.HasPrefix(p, "/") || p == "/" || strings.HasSuffix(p, "/") {
		return fmt.Errorf("%q is not an absolute znode path such as %s", p, DefaultZooKeeperPath)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\x00") {
			return fmt.Errorf("%q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return nil
}

// ParseRule decodes one rule (JSON, or YAML) strictly, as the rules of a
// file are: an unknown field or a bad value is an error. name is where it
// came from (a znode), for errors. The rule is checked alone; WithRules
// checks it against the rest of a configuration.
func ParseRule(name string, data []byte) (Rule, error) {
	var r Rule
	if len(bytes.TrimSpace(data)) == 0 {
		return r, fmt.Errorf("%s: empty rule", name)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		var ve *valueError
		if errors.As(err, &ve) {
			return r, fmt.Errorf("%s: %q is not %s", name, ve.value, ve.want)
		}
		return r, fmt.Errorf("%s: %s", name, cleanYAML(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return r, fmt.Errorf("%s: more than one document; one rule per znode", name)
	}
	return r, nil
}

// WithRules returns a copy of c whose rules are rules, with the defaults
// filled and validated as a whole: what a rules source swaps in.
func (c *Config) WithRules(rules []Rule) (*Config, error) {
	n := c.Clone()
	n.Rules = append([]Rule(nil), rules...)
	n.SetDefaults()
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return n, nil
}

// RulesJSON returns each rule of a rules file (YAML or JSON, with a
// top-level rules: list) as JSON, keyed by rule_id, as the rule's author
// wrote it (durations stay "1m", absent fields stay absent): what `sluice
// rules push` writes to the znodes. The file must parse and validate as a
// whole first (Parse).
func RulesJSON(file string, data []byte) (map[string][]byte, error) {
	if _, err := Parse(file, data); err != nil {
		return nil, err
	}
	var doc struct {
		Rules []map[string]any `yaml:"rules"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s", file, cleanYAML(err))
	}
	out := make(map[string][]byte, len(doc.Rules))
	for _, r := range doc.Rules {
		id, _ := r["rule_id"].(string)
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("%s: rule %q: %v", file, id, err)
		}
		out[id] = b
	}
	return out, nil
}
