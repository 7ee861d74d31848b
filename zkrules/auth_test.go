package zkrules_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/zktest"
	"github.com/sluicehq/sluice/zkrules"
)

func authFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func loadAuth(t *testing.T, content string) *zkrules.Auth {
	t.Helper()
	a, err := zkrules.LoadAuth(authFile(t, content))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestLoadAuthRefusesMalformedFiles(t *testing.T) {
	if a := loadAuth(t, "  pusher:s3cr:et \n"); a.User != "pusher" || a.Password != "s3cr:et" {
		t.Errorf("got %+v", a)
	}
	for _, bad := range []string{"", "nocolon", ":password", "user:", "\n"} {
		if _, err := zkrules.LoadAuth(authFile(t, bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := zkrules.LoadAuth(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file: no error")
	}
}

// Against a real ZooKeeper: a push with an identity leaves the rules
// changeable by it alone (readable by anyone, or by the readers' identity
// alone), and a Watcher reads protected rules with the right identity,
// never without it.
func TestAuthProtectsTheRules(t *testing.T) {
	zk := zktest.Start(t)
	pusher, reader := loadAuth(t, "pusher:p4ss"), loadAuth(t, "reader:r34d")
	dialAs := func(path string, auth, readers *zkrules.Auth) *zkrules.Client {
		c, err := zkrules.Dial([]string{zk.Addr()}, path, 30*time.Second, auth, readers)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}

	// Writable by the pusher only, readable by all.
	open := "/auth/open/rules"
	push(t, dialAs(open, pusher, nil), map[string][]byte{"a": rule("a", 10)})
	if _, err := dialAs(open, nil, nil).Push(map[string][]byte{"a": rule("a", 99)}, false); err == nil ||
		!strings.Contains(err.Error(), "authenticated") {
		t.Fatalf("an anonymous push over protected znodes: %v, want not authenticated", err)
	}
	if _, err := dialAs(open, loadAuth(t, "pusher:wrong"), nil).Push(map[string][]byte{"b": rule("b", 1)}, false); err == nil {
		t.Fatal("a push with a wrong password created a rule")
	}
	entries, err := dialAs(open, nil, nil).List()
	if err != nil || len(entries) != 1 || entries[0].ZNode != "a" {
		t.Fatalf("anonymous list: %v %v", entries, err)
	}
	_, s := newWatcher(t, zk.Addr(), open, nil)
	s.next(t, "the pushed rule, read anonymously", func(set zkrules.Set) bool { return ids(set) == "a=10" })
	push(t, dialAs(open, pusher, nil), map[string][]byte{"a": rule("a", 11)})
	s.next(t, "the change", func(set zkrules.Set) bool { return ids(set) == "a=11" })

	// Readable by the readers' identity only.
	private := "/auth/private/rules"
	push(t, dialAs(private, pusher, reader), map[string][]byte{"a": rule("a", 20)})
	if _, err := dialAs(private, nil, nil).List(); err == nil {
		t.Fatal("an anonymous list of private rules succeeded")
	}
	anon, err := zkrules.Watch(zkrules.Options{Servers: []string{zk.Addr()}, Path: private, SessionTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	ws, _ := newAuthWatcher(t, zk.Addr(), private, reader)
	ws.next(t, "private rules read with the reader's identity", func(set zkrules.Set) bool { return ids(set) == "a=20" })
	push(t, dialAs(private, pusher, reader), map[string][]byte{"a": rule("a", 21)})
	ws.next(t, "the change", func(set zkrules.Set) bool { return ids(set) == "a=21" })
	st := anon.State()
	if !st.Connected || st.Rules != 0 || st.Error == "" {
		t.Errorf("the anonymous watcher: %+v, want connected, no rules and an error", st)
	}
	// The identity survives a new session (the client sends it again).
	zk.Restart()
	push(t, dialAs(private, pusher, reader), map[string][]byte{"a": rule("a", 22)})
	ws.next(t, "a change after a server restart", func(set zkrules.Set) bool { return ids(set) == "a=22" })
}

func newAuthWatcher(t *testing.T, addr, path string, auth *zkrules.Auth) (*sets, *zkrules.Watcher) {
	t.Helper()
	s := &sets{ch: make(chan zkrules.Set, 100)}
	w, err := zkrules.Watch(zkrules.Options{Servers: []string{addr}, Path: path, SessionTimeout: time.Second, Auth: auth,
		Apply: func(set zkrules.Set) error { s.ch <- set; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return s, w
}
