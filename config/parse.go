package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file decodes a configuration file strictly and names the line of
// an error.

// Load reads and decodes the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(path, data)
}

var (
	lineRE     = regexp.MustCompile(`line (\d+)`)
	badValueRE = regexp.MustCompile(`bad value (\S+)`)
	// quotedValueRE finds the value a field's decoder refused
	// (`"soon" is not a duration`).
	quotedValueRE = regexp.MustCompile(`^("(?:[^"\\]|\\.)*") is not`)
	// unknownFieldRE finds the field cleanYAML names unknown.
	unknownFieldRE = regexp.MustCompile(`unknown field (\S+)`)
)

// Parse decodes data (YAML or JSON) strictly, fills defaults and validates.
// file names the source in errors.
func Parse(file string, data []byte) (*Config, error) {
	if file == "" {
		file = "config"
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %s", file, cleanYAML(err))
	}
	c := &Config{File: file}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: empty configuration", file)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		var ve *valueError
		if errors.As(err, &ve) {
			msg := fmt.Sprintf("%q is not %s (line %d)", ve.value, ve.want, ve.line)
			path := findKey(root.Content, nil, func(_, v *yaml.Node) bool {
				return v.Line == ve.line && v.Kind == yaml.ScalarNode && v.Value == ve.value
			})
			if len(path) > 0 {
				msg = strings.Join(path, ".") + ": " + msg
			}
			if id := ruleAtLine(&root, ve.line); id != "" {
				return nil, fmt.Errorf("%s: rule %q: %s", file, id, msg)
			}
			return nil, fmt.Errorf("%s: %s", file, msg)
		}
		msg := cleanYAML(err)
		if m := lineRE.FindStringSubmatch(msg); m != nil {
			// "path: what (line N)", as every other error says it; the
			// path is found by the key (an unknown field's parent) or the
			// value (a bad value's key) on that line, not by the line
			// alone: flow-style YAML and one-line JSON hold many keys.
			line, _ := strconv.Atoi(m[1])
			what := strings.TrimSpace(strings.TrimPrefix(msg[strings.Index(msg, m[0]):], m[0]+":"))
			if i := strings.Index(what, "; line "); i >= 0 {
				what = what[:i] // the first of several
			}
			var path []string
			if uf := unknownFieldRE.FindStringSubmatch(what); uf != nil {
				path = findKey(root.Content, nil, func(k, _ *yaml.Node) bool { return k.Line == line && k.Value == uf[1] })
				if len(path) > 0 {
					path = path[:len(path)-1] // the mapping that does not know the field
				}
			} else if strings.HasPrefix(what, "a map where") || strings.HasPrefix(what, "a list where") {
				path = findKey(root.Content, nil, func(_, v *yaml.Node) bool { return v.Line == line && v.Kind != yaml.ScalarNode })
			} else if bv := badValueRE.FindStringSubmatch(what); bv != nil || quotedValueRE.MatchString(what) {
				if bv == nil {
					bv = quotedValueRE.FindStringSubmatch(what)
					bv[1], _ = strconv.Unquote(bv[1])
				}
				path = findKey(root.Content, nil, func(_, v *yaml.Node) bool {
					return v.Line == line && v.Kind == yaml.ScalarNode && v.Value == bv[1]
				})
			}
			where := ""
			if len(path) > 0 {
				where = strings.Join(path, ".") + ": "
			}
			if id := ruleAtLine(&root, line); id != "" {
				return nil, fmt.Errorf("%s: rule %q: %s%s (line %d)", file, id, where, what, line)
			}
			return nil, fmt.Errorf("%s: %s%s (line %d)", file, where, what, line)
		}
		return nil, fmt.Errorf("%s: %s", file, msg)
	}
	c.File = file
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, withLine(&root, file, err)
	}
	if c.RulesSource.ZooKeeper != nil && len(c.Rules) > 0 {
		return nil, fmt.Errorf("%s: rules: the rules come from rules_source.zookeeper; remove rules: from the file "+
			"(push them with `sluice rules push`)", file)
	}
	return c, nil
}

// cleanYAML turns yaml.v3's messages into ours.
func cleanYAML(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	msg = regexp.MustCompile(`field (\S+) not found in type \S+`).ReplaceAllString(msg, "unknown field $1")
	msg = regexp.MustCompile(`cannot unmarshal !!\w+ `+"`"+`([^`+"`"+`]*)`+"`"+` into \S+`).ReplaceAllString(msg, "bad value $1")
	msg = regexp.MustCompile(`cannot unmarshal !!(map|seq) into (\S+)`).ReplaceAllStringFunc(msg, func(m string) string {
		f := strings.Fields(m) // cannot unmarshal !!kind into type
		kind, typ := map[string]string{"!!map": "map", "!!seq": "list"}[f[2]], f[4]
		switch {
		case strings.HasPrefix(typ, "[]"):
			typ = "list"
		case strings.HasPrefix(typ, "map["):
			typ = "map"
		case strings.Contains(typ, "."):
			typ = "value" // one of ours: a word, a duration, a size
		}
		return "a " + kind + " where a " + typ + " belongs"
	})
	return msg
}

// withLine adds to a validation error ("file: path: what" or "file: rule
// "id": path: what") the line of the field it names, when the file spells
// that field out, so that every error of a file says where, as decoding
// errors do.
func withLine(root *yaml.Node, file string, err error) error {
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, file+": ")
	if !ok {
		return err
	}
	nodes := root.Content
	if r, ok := strings.CutPrefix(rest, "rule "); ok {
		id, qerr := strconv.QuotedPrefix(r)
		if qerr != nil {
			return err // "rule #1": a rule without an id
		}
		rest = strings.TrimPrefix(r[len(id):], ": ")
		id, _ = strconv.Unquote(id)
		nodes = nil
		for _, item := range ruleNodes(root) {
			for i := 0; i+1 < len(item.Content); i += 2 {
				if item.Content[i].Value == "rule_id" && item.Content[i+1].Value == id {
					nodes = []*yaml.Node{item}
				}
			}
		}
	}
	path, _, ok := strings.Cut(rest, ": ")
	if !ok || strings.ContainsAny(path, " \"[") {
		return err
	}
	at := nodeAt(nodes, strings.Split(path, "."))
	if at == nil {
		return err
	}
	return fmt.Errorf("%s (line %d)", msg, at.Line)
}

// ruleNodes returns the mappings of the file's rules list.
func ruleNodes(root *yaml.Node) []*yaml.Node {
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "rules" && m.Content[i+1].Kind == yaml.SequenceNode {
			return m.Content[i+1].Content
		}
	}
	return nil
}

// nodeAt returns the key node at the dotted path keys within the first
// mapping of nodes (a document's), or nil.
func nodeAt(nodes []*yaml.Node, keys []string) *yaml.Node {
	var n *yaml.Node
	for _, c := range nodes {
		if c.Kind == yaml.DocumentNode && len(c.Content) > 0 {
			c = c.Content[0]
		}
		if c.Kind == yaml.MappingNode {
			n = c
			break
		}
	}
	for i, key := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == key {
				if i == len(keys)-1 {
					return n.Content[j]
				}
				next = n.Content[j+1]
			}
		}
		n = next
	}
	return nil
}

// findKey returns the dotted path, as a list, of the first mapping key in
// nodes (under path) for which match holds. Inside the rules list a path
// starts again at the rule (errors name the rule apart); inside another
// list an item adds its index.
func findKey(nodes []*yaml.Node, path []string, match func(k, v *yaml.Node) bool) []string {
	for _, n := range nodes {
		switch n.Kind {
		case yaml.DocumentNode:
			if p := findKey(n.Content, path, match); p != nil {
				return p
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				here := append(append([]string(nil), path...), k.Value)
				if match(k, v) {
					return here
				}
				if v.Kind == yaml.SequenceNode {
					for j, item := range v.Content {
						sub := append(append([]string(nil), path...), fmt.Sprintf("%s[%d]", k.Value, j))
						if len(path) == 0 && k.Value == "rules" {
							sub = []string{}
						}
						if p := findKey([]*yaml.Node{item}, sub, match); p != nil {
							return p
						}
					}
					continue
				}
				if p := findKey([]*yaml.Node{v}, here, match); p != nil {
					return p
				}
			}
		}
	}
	return nil
}

// ruleAtLine returns the rule_id of the rule whose YAML spans line.
func ruleAtLine(root *yaml.Node, line int) string {
	if len(root.Content) == 0 {
		return ""
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "rules" || doc.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		rules := doc.Content[i+1].Content
		for j, r := range rules {
			end := math.MaxInt
			if j+1 < len(rules) {
				end = rules[j+1].Line
			}
			if line >= r.Line && line < end {
				for k := 0; k+1 < len(r.Content); k += 2 {
					if r.Content[k].Value == "rule_id" {
						return r.Content[k+1].Value
					}
				}
				return fmt.Sprintf("#%d", j+1)
			}
		}
	}
	return ""
}
