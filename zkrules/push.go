package zkrules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// Change is one operation of a Push.
type Change struct {
	// Op is "create", "set" or "delete".
	Op string
	// RuleID names the znode.
	RuleID string
}

// Entry is one child znode as List shows it.
type Entry struct {
	// ZNode is the child's name; Version its data version.
	ZNode   string
	Version int32
	// Data is the znode's data (the rule as JSON).
	Data []byte
	// Err is why the data is not a valid rule, nil when it is one.
	Err error
}

// Client is a short-lived ZooKeeper session for Push and List.
type Client struct {
	conn *zk.Conn
	path string
	acl  []zk.ACL // of the znodes Push creates
}

// Dial opens a session to servers for the rules under parent, waiting up
// to timeout for it. With auth, the session is authenticated with it, and
// the znodes Push creates get ACL(auth, readers).
func Dial(servers []string, parent string, timeout time.Duration, auth, readers *Auth) (*Client, error) {
	conn, events, err := zk.Connect(servers, max(timeout, 2*time.Second), zk.WithLogInfo(false), zk.WithLogger(discard{}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper %s: %w", strings.Join(servers, ","), err)
	}
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				if auth != nil {
					if err := auth.add(conn); err != nil {
						conn.Close()
						return nil, err
					}
				}
				return &Client{conn: conn, path: parent, acl: ACL(auth, readers)}, nil
			}
		case <-deadline:
			conn.Close()
			return nil, fmt.Errorf("zookeeper %s: no session within %v", strings.Join(servers, ","), timeout)
		}
	}
}

type discard struct{}

func (discard) Printf(string, ...any) {}

// Close ends the session.
func (c *Client) Close() { c.conn.Close() }

// List returns the children of the parent with their data, sorted by name,
// each checked as the Watcher checks it (without a configuration).
func (c *Client) List() ([]Entry, error) {
	children, _, err := c.conn.Children(c.path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.path, err)
	}
	slices.Sort(children)
	out := make([]Entry, 0, len(children))
	for _, name := range children {
		data, st, err := c.conn.Get(path.Join(c.path, name))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path.Join(c.path, name), err)
		}
		_, derr := decodeRule(name, data, nil)
		out = append(out, Entry{ZNode: name, Version: st.Version, Data: data, Err: derr})
	}
	return out, nil
}

// Push makes the children of the parent match rules (rule id -> the rule
// as JSON): the seed's update workflow of create, setData and delete, run
// as one ZooKeeper multi-operation, so that a watcher sees either the old
// set or the new one, and a concurrent writer makes the push fail rather
// than be overwritten. The parent (and its ancestors) are created when
// missing, in the same operation. With dryRun nothing is written. It
// returns the changes.
func (c *Client) Push(rules map[string][]byte, dryRun bool) ([]Change, error) {
	for id, data := range rules {
		if strings.ContainsAny(id, "/\x00") || id == "." || id == ".." || id == "" {
			return nil, fmt.Errorf("rule_id %q cannot name a znode", id)
		}
		if len(data) > MaxRuleBytes {
			return nil, fmt.Errorf("rule %q: %d bytes, more than %d", id, len(data), MaxRuleBytes)
		}
	}
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("%d rules, more than %d", len(rules), MaxRules)
	}
	// The parent and its ancestors, when missing, are created in the same
	// multi-operation: a watcher never sees a new parent without its rules.
	var ops []any
	missing, err := c.missingPath()
	if err != nil {
		return nil, err
	}
	for _, p := range missing {
		ops = append(ops, &zk.CreateRequest{Path: p, Acl: c.acl})
	}
	var children []string
	if len(missing) == 0 {
		if children, _, err = c.conn.Children(c.path); err != nil {
			return nil, fmt.Errorf("%s: %w", c.path, err)
		}
	}
	var changes []Change
	have := map[string]bool{}
	for _, name := range children {
		have[name] = true
		p := path.Join(c.path, name)
		data, st, err := c.conn.Get(p)
		if errors.Is(err, zk.ErrNoNode) {
			delete(have, name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		want, keep := rules[name]
		switch {
		case !keep:
			ops = append(ops, &zk.DeleteRequest{Path: p, Version: st.Version})
			changes = append(changes, Change{Op: "delete", RuleID: name})
		case !sameJSON(data, want):
			ops = append(ops, &zk.SetDataRequest{Path: p, Data: want, Version: st.Version})
			changes = append(changes, Change{Op: "set", RuleID: name})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(rules)) {
		if !have[id] {
			ops = append(ops, &zk.CreateRequest{Path: path.Join(c.path, id), Data: rules[id], Acl: c.acl})
			changes = append(changes, Change{Op: "create", RuleID: id})
		}
	}
	if dryRun || len(changes) == 0 && len(missing) == 0 {
		return changes, nil
	}
	if _, err := c.conn.Multi(ops...); err != nil {
		if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("the rules under %s changed while pushing; nothing was written, push again: %w", c.path, err)
		}
		return nil, fmt.Errorf("push to %s: nothing was written: %w", c.path, err)
	}
	return changes, nil
}

// missingPath lists the parent and those of its ancestors that do not
// exist, outermost first.
func (c *Client) missingPath() ([]string, error) {
	var missing []string
	for p := c.path; p != "/" && p != ""; p = path.Dir(p) {
		ok, _, err := c.conn.Exists(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if ok {
			break
		}
		missing = append([]string{p}, missing...)
	}
	return missing, nil
}

// sameJSON reports whether a and b hold the same JSON value (keys in any
// order), or the same bytes.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}
