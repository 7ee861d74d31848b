package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// What the engine decides, on its own (no HTTP face), on a fake clock:
// each case is a configuration and a sequence of requests, each with the
// verdict it must get.
func TestDecide(t *testing.T) {
	type step struct {
		path     string
		advance  time.Duration // before the request
		allowed  bool
		status   int
		violated []string
		limit    int64 // the reported quota, when not 0
	}
	allow := step{allowed: true}
	deny := func(rules ...string) step { return step{status: StatusQuota, violated: rules} }
	after := func(d time.Duration, s step) step { s.advance = d; return s }
	cases := []struct {
		name   string
		config string
		steps  []step
		counts map[string][4]uint64 // rule: allowed, denied, would_deny, not_counted
	}{
		{
			name:   "token bucket: two a second, the third refused, one back after half a second",
			config: "rules: [{rule_id: tb, identifier_type: global, algorithm: token_bucket, limit: 2, window: 1s}]",
			steps:  []step{allow, allow, deny("tb"), after(500*time.Millisecond, allow), deny("tb")},
			counts: map[string][4]uint64{"tb": {3, 2, 0, 0}},
		},
		{
			name: "all-or-nothing: the tight rule refuses, the wide one is not taken",
			config: `rules:
  - {rule_id: wide, identifier_type: global, algorithm: fixed_window, limit: 3, window: 1h}
  - {rule_id: tight, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /tight}}`,
			steps: []step{
				{path: "/tight", allowed: true},
				{path: "/tight", status: StatusQuota, violated: []string{"tight"}},
				allow, allow, // wide had 2 left: the refused request took none
				deny("wide"),
			},
			counts: map[string][4]uint64{"wide": {3, 1, 0, 1}, "tight": {1, 1, 0, 0}},
		},
		{
			name:   "shadow: never refuses, counts what it would have",
			config: "rules: [{rule_id: sh, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, mode: shadow}]",
			steps:  []step{allow, allow, allow},
			counts: map[string][4]uint64{"sh": {1, 0, 2, 0}}, // within the quota, then over it (admitted)
		},
		{
			name:   "soft: 20% over the quota admitted, the quota reported",
			config: "rules: [{rule_id: soft, identifier_type: global, algorithm: fixed_window, limit: 5, window: 1h, mode: soft, soft_percent: 20}]",
			steps:  []step{{allowed: true, limit: 5}, allow, allow, allow, allow, {allowed: true, limit: 5}, {status: StatusQuota, violated: []string{"soft"}, limit: 5}},
		},
		{
			name: "priority: the first denying rule names the refusal",
			config: `rules:
  - {rule_id: b, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, priority: 2}
  - {rule_id: a, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, priority: 1}`,
			steps: []step{allow, deny("a", "b")},
		},
		{
			name:   "a rule that matches nothing counts nothing",
			config: "rules: [{rule_id: api, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /api/**}}]",
			steps:  []step{allow, allow, {path: "/api/x", allowed: true}, {path: "/api/y", status: StatusQuota, violated: []string{"api"}}},
			counts: map[string][4]uint64{"api": {1, 1, 0, 0}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, clock := fakeClockEngine(t, tc.config+"\n")
			for i, st := range tc.steps {
				clock.Advance(st.advance)
				r := get()
				if st.path != "" {
					r.Path = st.path
				}
				v, err := e.Decide(context.Background(), r)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if v.Allowed != st.allowed || (!st.allowed && v.Status != st.status) {
					t.Fatalf("step %d: allowed %v status %d, want %v %d (%+v)", i, v.Allowed, v.Status, st.allowed, st.status, v.Decision)
				}
				if got := slices.Sorted(slices.Values(v.Violated)); !slices.Equal(got, st.violated) {
					t.Errorf("step %d: violated %v, want %v", i, got, st.violated)
				}
				if st.limit != 0 && v.Decision.Limit != st.limit {
					t.Errorf("step %d: reported limit %d, want %d", i, v.Decision.Limit, st.limit)
				}
				if !st.allowed && v.Reason != sluice.ReasonQuota {
					t.Errorf("step %d: reason %v, want quota", i, v.Reason)
				}
				if v.Allowed {
					v.Done(sluice.Success)
				}
			}
			for rule, want := range tc.counts {
				var got [4]uint64
				for _, r := range e.State().Rules {
					if r.RuleID == rule {
						got = [4]uint64{r.Allowed, r.Denied, r.WouldDeny, r.NotCounted}
					}
				}
				if got != want {
					t.Errorf("rule %s: allowed, denied, would_deny, not_counted = %v, want %v", rule, got, want)
				}
			}
		})
	}
}

// A path routers would read differently is refused as ambiguous, not
// guessed; a dot segment that resolves is matched as resolved.
func TestDecideAmbiguousPaths(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte("adaptive: {algorithm: off}\nrules: [{rule_id: admin, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /admin/**}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, p := range []string{"/a\\b", "/x/..;/admin/y"} {
		r := get()
		r.Path = p
		if _, err := e.Decide(context.Background(), r); !errors.Is(err, ErrAmbiguousPath) {
			t.Errorf("%q: %v, want ErrAmbiguousPath", p, err)
		}
	}
	for i, p := range []string{"/admin/x", "/public/../admin/y"} {
		r := get()
		r.Path = p
		v, err := e.Decide(context.Background(), r)
		if err != nil || v.Allowed != (i == 0) {
			t.Errorf("%q: %+v %v, want the second counted on the admin rule and refused", p, v.Decision, err)
		}
		if v.Allowed {
			v.Done(sluice.Success)
		}
	}
}

// DecideNow answers at once: a free adaptive slot admits, a full limit is
// ErrWouldWait with the static quota given back and the class named, and a
// rule's max_wait is not waited for.
func TestDecideNow(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte(`adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1, classes: [{name: main, share: 1}]}
rules:
  - {rule_id: q, identifier_type: global, algorithm: fixed_window, limit: 2, window: 1h, max_wait: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, Options{Clock: sluice.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	first, err := e.DecideNow(ctx, get())
	if err != nil || !first.Allowed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	second, err := e.DecideNow(ctx, get())
	if !errors.Is(err, ErrWouldWait) || second.Allowed || second.Class != "main" {
		t.Fatalf("second, the slot taken: %+v, %v; want ErrWouldWait in class main", second, err)
	}
	first.Done(sluice.Success)
	third, err := e.DecideNow(ctx, get()) // the quota the second took came back: 1 of 2 left
	if err != nil || !third.Allowed {
		t.Fatalf("third: %+v, %v", third, err)
	}
	third.Done(sluice.Success)
	fourth, err := e.DecideNow(ctx, get()) // over the quota: refused at once, max_wait not waited
	if err != nil || fourth.Allowed || fourth.Status != StatusQuota || fourth.Decision.RetryAfter <= 0 {
		t.Fatalf("fourth: %+v, %v; want a 429 with its retry time, at once", fourth, err)
	}
}

// A refusal by one rule lists it without allocating: its Violated is the
// rule's own one-element list, which a refusal by two rules copies before
// appending, so the shared list is never written.
func TestViolatedSharesOnlyWhatIsNotWritten(t *testing.T) {
	e, _ := fakeClockEngine(t, `rules:
  - {rule_id: a, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h}
  - {rule_id: b, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /b}}
`)
	decide := func(path string) Verdict {
		r := get()
		r.Path = path
		v, err := e.Decide(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := decide("/b"); !v.Allowed {
		t.Fatalf("first request refused: %+v", v.Decision)
	}
	if v := decide("/b"); !slices.Equal(slices.Sorted(slices.Values(v.Violated)), []string{"a", "b"}) {
		t.Fatalf("violated %v, want [a b]", v.Violated)
	}
	v := decide("/")
	if !slices.Equal(v.Violated, []string{"a"}) {
		t.Fatalf("violated %v, want [a]", v.Violated)
	}
	for _, r := range e.rules.Load().http {
		if !slices.Equal(r.alone, []string{r.id}) || cap(r.alone) != 1 {
			t.Errorf("rule %s: its own list is %v (capacity %d), want [%s] (1)", r.id, r.alone, cap(r.alone), r.id)
		}
		if r.id == "a" && &v.Violated[0] != &r.alone[0] {
			t.Error("a refusal by a alone copied its list: want it shared")
		}
	}
}
