package zkrules_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/netproxy"
	"github.com/sluicehq/sluice/internal/zktest"
	"github.com/sluicehq/sluice/zkrules"
)

const parent = "/config/ratelimit/rules"

// sets collects what a Watcher applies.
type sets struct {
	ch chan zkrules.Set
}

func newWatcher(t *testing.T, addr, path string, check func(config.Rule) error) (*zkrules.Watcher, *sets) {
	t.Helper()
	s := &sets{ch: make(chan zkrules.Set, 100)}
	w, err := zkrules.Watch(zkrules.Options{Servers: []string{addr}, Path: path, SessionTimeout: time.Second,
		Check: check, Apply: func(set zkrules.Set) error { s.ch <- set; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w, s
}

// next waits for the next applied set that satisfies ok.
func (s *sets) next(t *testing.T, what string, ok func(zkrules.Set) bool) zkrules.Set {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case set := <-s.ch:
			if ok(set) {
				return set
			}
		case <-deadline:
			t.Fatalf("no rule set with %s within 30s", what)
		}
	}
}

func ids(set zkrules.Set) string {
	var out []string
	for _, r := range set.Rules {
		out = append(out, fmt.Sprintf("%s=%d", r.RuleID, *r.Limit))
	}
	return strings.Join(out, ",")
}

func rule(id string, limit int) []byte {
	return fmt.Appendf(nil, `{"rule_id":%q,"identifier_type":"ip_address","algorithm":"token_bucket","limit":%d,"window":"1s"}`, id, limit)
}

func dial(t *testing.T, addr, path string) *zkrules.Client {
	t.Helper()
	c, err := zkrules.Dial([]string{addr}, path, 30*time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func push(t *testing.T, c *zkrules.Client, rules map[string][]byte) []zkrules.Change {
	t.Helper()
	ch, err := c.Push(rules, false)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// Add, change and delete through Push; a bad znode is refused without
// touching the others, and a rule whose new version is bad keeps its last
// good one.
func TestWatchAddChangeDeleteBad(t *testing.T) {
	zk := zktest.Start(t)
	c := dial(t, zk.Addr(), parent)
	if ch := push(t, c, map[string][]byte{"a": rule("a", 10), "b": rule("b", 20)}); len(ch) != 2 {
		t.Fatalf("first push: %v, want two creates", ch)
	}
	w, s := newWatcher(t, zk.Addr(), parent, nil)
	s.next(t, "a and b", func(set zkrules.Set) bool { return ids(set) == "a=10,b=20" })

	push(t, c, map[string][]byte{"a": rule("a", 11), "b": rule("b", 20), "c": rule("c", 30)})
	s.next(t, "a changed and c added", func(set zkrules.Set) bool { return ids(set) == "a=11,b=20,c=30" })

	// Pushing the same again changes nothing.
	if ch := push(t, c, map[string][]byte{"a": rule("a", 11), "b": rule("b", 20), "c": rule("c", 30)}); len(ch) != 0 {
		t.Fatalf("same push: %v, want no changes", ch)
	}

	// A bad new version of b, and a new bad znode d: both refused, b's
	// last good version kept, a and c untouched.
	push(t, c, map[string][]byte{"a": rule("a", 11), "b": []byte(`{"rule_id":"b","limit":`), "c": rule("c", 30),
		"d": []byte(`{"rule_id":"d","identifier_type":"ip_address","algorithm":"no_such","limit":1,"window":"1s"}`)})
	waitState(t, w, "two refused", func(st zkrules.State) bool { return len(st.Refused) == 2 })
	st := w.State()
	if st.Refused[0].ZNode != "b" || !st.Refused[0].Kept || st.Refused[1].ZNode != "d" || st.Refused[1].Kept {
		t.Fatalf("refused %+v, want b (kept) and d (not kept)", st.Refused)
	}
	if !strings.Contains(st.Refused[1].Error, "no_such") {
		t.Errorf("d refused for %q, want the bad algorithm named", st.Refused[1].Error)
	}
	if st.Rules != 3 {
		t.Errorf("%d rules in force, want a, b (last good) and c", st.Rules)
	}

	// A znode whose rule_id is not its name is refused too.
	push(t, c, map[string][]byte{"a": rule("a", 11), "b": rule("b", 21), "c": rule("c", 30), "e": rule("other", 5)})
	set := s.next(t, "b fixed", func(set zkrules.Set) bool { return ids(set) == "a=11,b=21,c=30" })
	if len(set.Refused) != 1 || set.Refused[0].ZNode != "e" || !strings.Contains(set.Refused[0].Error, "differs") {
		t.Fatalf("refused %+v, want e for its rule_id", set.Refused)
	}

	push(t, c, map[string][]byte{"c": rule("c", 30)})
	s.next(t, "a and b deleted", func(set zkrules.Set) bool { return ids(set) == "c=30" })

	entries, err := c.List()
	if err != nil || len(entries) != 1 || entries[0].ZNode != "c" || entries[0].Err != nil {
		t.Fatalf("list: %+v %v", entries, err)
	}
}

// Check refuses what the configuration cannot take; the rule stays out.
func TestWatchCheck(t *testing.T) {
	zk := zktest.Start(t)
	c := dial(t, zk.Addr(), parent)
	push(t, c, map[string][]byte{"a": rule("a", 10), "big": rule("big", 1000)})
	_, s := newWatcher(t, zk.Addr(), parent, func(r config.Rule) error {
		if *r.Limit > 100 {
			return errors.New("limit too high here")
		}
		return nil
	})
	set := s.next(t, "a only", func(set zkrules.Set) bool { return ids(set) == "a=10" })
	if len(set.Refused) != 1 || set.Refused[0].Error != "limit too high here" {
		t.Fatalf("refused %+v", set.Refused)
	}
}

// A missing parent keeps the rules out until it is created; the watch on
// its existence sees the creation.
func TestWatchParentCreatedLater(t *testing.T) {
	zk := zktest.Start(t)
	w, s := newWatcher(t, zk.Addr(), "/sluice/later", nil)
	waitState(t, w, "the missing parent reported", func(st zkrules.State) bool {
		return st.Connected && strings.Contains(st.Error, "no parent znode")
	})
	push(t, dial(t, zk.Addr(), "/sluice/later"), map[string][]byte{"a": rule("a", 1)})
	s.next(t, "a", func(set zkrules.Set) bool { return ids(set) == "a=1" })
}

// The server restarts: the watcher keeps the last good set meanwhile,
// resumes, and sees the changes made after.
func TestWatchServerRestart(t *testing.T) {
	zk := zktest.Start(t)
	c := dial(t, zk.Addr(), parent)
	push(t, c, map[string][]byte{"a": rule("a", 10)})
	w, s := newWatcher(t, zk.Addr(), parent, nil)
	s.next(t, "a", func(set zkrules.Set) bool { return ids(set) == "a=10" })
	c.Close()

	zk.Stop()
	waitState(t, w, "disconnected", func(st zkrules.State) bool { return !st.Connected })
	select {
	case set := <-s.ch:
		t.Fatalf("applied %q while ZooKeeper was down", ids(set))
	default:
	}
	zk.Restart()
	waitState(t, w, "connected again", func(st zkrules.State) bool { return st.Connected })
	push(t, dial(t, zk.Addr(), parent), map[string][]byte{"a": rule("a", 12), "b": rule("b", 2)})
	s.next(t, "the change after the restart", func(set zkrules.Set) bool { return ids(set) == "a=12,b=2" })
}

// The session expires while the link is cut and the rules change: after
// the link heals, the new session reads everything again.
func TestWatchSessionExpiry(t *testing.T) {
	zk := zktest.Start(t)
	c := dial(t, zk.Addr(), parent)
	push(t, c, map[string][]byte{"a": rule("a", 10), "b": rule("b", 20)})
	link := netproxy.Start(t, zk.Addr(), 0)
	w, s := newWatcher(t, link.Addr(), parent, nil)
	s.next(t, "a and b", func(set zkrules.Set) bool { return ids(set) == "a=10,b=20" })
	sessions := w.State().Sessions

	link.Cut()
	waitState(t, w, "disconnected", func(st zkrules.State) bool { return !st.Connected })
	push(t, c, map[string][]byte{"a": rule("a", 11), "c": rule("c", 30)})
	// Well past the session timeout (1s asked, at most 20 ticks granted):
	// the server expires the session. A test of expiry needs real time.
	time.Sleep(3 * time.Second)
	link.Heal()
	s.next(t, "the changes made during the partition", func(set zkrules.Set) bool { return ids(set) == "a=11,c=30" })
	if st := w.State(); st.Sessions < sessions+1 {
		t.Errorf("sessions %d, want a new one after the expiry", st.Sessions)
	}
	// The re-armed watches work in the new session.
	push(t, c, map[string][]byte{"a": rule("a", 12), "c": rule("c", 30)})
	s.next(t, "a change after the new session", func(set zkrules.Set) bool { return ids(set) == "a=12,c=30" })
}

// Many watchers on one path all get a push.
func TestWatchManyWatchers(t *testing.T) {
	zk := zktest.Start(t)
	c := dial(t, zk.Addr(), parent)
	push(t, c, map[string][]byte{"a": rule("a", 10)})
	const n = 8
	var all []*sets
	for range n {
		_, s := newWatcher(t, zk.Addr(), parent, nil)
		s.next(t, "a", func(set zkrules.Set) bool { return ids(set) == "a=10" })
		all = append(all, s)
	}
	push(t, c, map[string][]byte{"a": rule("a", 11)})
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.next(t, "a=11", func(set zkrules.Set) bool { return ids(set) == "a=11" })
		}()
	}
	wg.Wait()
}

// The cache holds the good rules and only for its path.
func TestCache(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.json")
	set := zkrules.Set{Data: map[string][]byte{"a": rule("a", 3), "y": []byte("rule_id: y\nidentifier_type: global\nalgorithm: gcra\nlimit: 2\nwindow: 1s\n")}}
	if err := zkrules.SaveCache(file, parent, set); err != nil {
		t.Fatal(err)
	}
	rules, err := zkrules.LoadCache(file, parent, nil)
	if err != nil || len(rules) != 2 || rules[0].RuleID != "a" || *rules[0].Limit != 3 || rules[1].RuleID != "y" {
		t.Fatalf("load: %+v %v", rules, err)
	}
	if _, err := zkrules.LoadCache(file, "/other", nil); err == nil {
		t.Fatal("a cache of another path loaded")
	}
	if err := os.WriteFile(file, []byte(`{"path":"`+parent+`","rules":{"a":{"rule_id":"a","limit":"x"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := zkrules.LoadCache(file, parent, nil); err == nil {
		t.Fatal("a bad cached rule loaded")
	}
}

func waitState(t *testing.T, w *zkrules.Watcher, what string, ok func(zkrules.State) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok(w.State()) {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 30s: %+v", what, w.State())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
