package daemon_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar/daemon"
)

const twoRules = `upstream: http://127.0.0.1:1
adaptive: {algorithm: off}
rules:
  - {rule_id: a, identifier_type: global, algorithm: fixed_window, limit: 5, window: 1m}
  - {rule_id: b, identifier_type: global, algorithm: fixed_window, limit: 5, window: 1m}
`

// cut is twoRules cut at a rule boundary: it parses, and lacks rule b.
var cut = twoRules[:strings.Index(twoRules, "  - {rule_id: b")]

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func ruleIDs(e *engine.Engine) string {
	var ids []string
	for _, r := range e.State().Rules {
		ids = append(ids, r.RuleID)
	}
	return strings.Join(ids, ",")
}

// A file caught mid-write at a rule boundary parses; the reload waits for
// it to settle instead of lifting the missing rule's limit.
func TestReloadWaitsForAPartialWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(path, []byte(twoRules), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		logs := &lockedBuffer{}
		s, err := daemon.New(cfg, path, slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Engine.Close()

		// The writer is half-way through; it finishes 100 ms later.
		if err := os.WriteFile(path, []byte(cut), 0o600); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = os.WriteFile(path, []byte(twoRules), 0o600)
		}()
		done := make(chan error)
		go func() { done <- s.Reload() }()
		synctest.Wait()
		if got := ruleIDs(s.Engine); got != "a,b" {
			t.Fatalf("while the file settles, rules %q, want a,b", got)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := ruleIDs(s.Engine); got != "a,b" {
			t.Fatalf("after the write ended, rules %q, want a,b", got)
		}

		// Written in two steps with a pause longer than the settle time:
		// the half-written file is applied, but the rule it lacks stays in
		// force, and the second step brings it back before it is removed.
		if err := os.WriteFile(path, []byte(cut), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
		if got := ruleIDs(s.Engine); got != "a,b" {
			t.Fatalf("a half-written file lifted a rule: rules %q, want a,b", got)
		}
		time.Sleep(2 * time.Second) // the writer's pause
		if err := os.WriteFile(path, []byte(twoRules), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * daemon.RemovalDelay) // past any scheduled confirmation
		synctest.Wait()
		if got := ruleIDs(s.Engine); got != "a,b" {
			t.Fatalf("after the second step, rules %q, want a,b", got)
		}
		if l := logs.String(); strings.Contains(l, "removed=[b]") {
			t.Errorf("the rule was removed while the file was being written:\n%s", l)
		}

		// A removal that stays is applied once the rule has been missing
		// for the delay, with a warning naming the rule.
		if err := os.WriteFile(path, []byte(cut), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
		if got := ruleIDs(s.Engine); got != "a,b" {
			t.Fatalf("just after the removal, rules %q, want a,b kept", got)
		}
		time.Sleep(daemon.RemovalDelay + time.Second)
		synctest.Wait()
		if got := ruleIDs(s.Engine); got != "a" {
			t.Fatalf("after the rule was missing for %v, rules %q, want a", daemon.RemovalDelay, got)
		}
		if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "removed=[b]") || !strings.Contains(l, "missing=[b]") {
			t.Errorf("no warnings naming the missing, then removed, rule:\n%s", l)
		}
		s.Shutdown(context.Background())
	})
}
