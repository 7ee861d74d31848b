package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/fleet"
)

type member struct {
	g *Gossip
	s *fleet.Store
}

func start(t *testing.T, name string, join ...string) member {
	t.Helper()
	g, err := New(Config{Node: name, Bind: "127.0.0.1:0", Join: join})
	if err != nil {
		t.Fatal(err)
	}
	// Requests in flight count until the failure detector says their
	// member is gone, however long it stays silent.
	s, err := fleet.New(fleet.Config{Node: name, Transport: g, Interval: 20 * time.Millisecond, GaugeTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return member{g, s}
}

// eventually polls cond, syncing every member, until it holds or 20
// seconds pass (failure detection takes a few seconds).
func eventually(t *testing.T, what string, ms []member, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		for _, m := range ms {
			_ = m.s.Sync(context.Background())
		}
		time.Sleep(20 * time.Millisecond) // polling for the cluster, not for a limit
	}
}

// TestGossipSharesUsageAndForgetsTheDead: three members share a quota and
// requests in flight; one is killed (no leave message) and, once the
// failure detector says so, its requests in flight stop counting.
func TestGossipSharesUsageAndForgetsTheDead(t *testing.T) {
	a := start(t, "a")
	defer a.g.Close()
	b := start(t, "b", a.g.Addr())
	defer b.g.Close()
	c := start(t, "c", a.g.Addr())
	all := []member{a, b, c}
	eventually(t, "membership", all, func() bool {
		return len(a.g.Members()) == 3 && len(b.g.Members()) == 3 && len(c.g.Members()) == 3
	})
	ctx := context.Background()
	quota := &static.Policy{Algorithm: static.FixedWindow, Limit: 10, Window: time.Hour}
	q := []static.Limit{{RuleID: "q", Key: "q", Policy: quota, Cost: 1}}
	for range 4 {
		if res, _ := a.s.Check(ctx, q, nil); !res.Allowed {
			t.Fatal("a refused")
		}
	}
	peek := []static.Limit{{RuleID: "q", Key: "q", Policy: quota}}
	eventually(t, "usage reaches b and c", all, func() bool {
		rb, _ := b.s.Check(ctx, peek, nil)
		rc, _ := c.s.Check(ctx, peek, nil)
		return rb.Remaining == 6 && rc.Remaining == 6
	})
	conc := &static.Policy{Algorithm: static.Concurrency, Limit: 2}
	cl := []static.Limit{{RuleID: "c", Key: "c", Policy: conc, Cost: 1}}
	for range 2 {
		if res, _ := c.s.Check(ctx, cl, nil); !res.Allowed {
			t.Fatal("c refused a request in flight")
		}
	}
	eventually(t, "c's requests in flight count on a", all, func() bool {
		res, _ := a.s.Check(ctx, []static.Limit{{RuleID: "c", Key: "c", Policy: conc, Cost: 1, DryRun: true}}, nil)
		return !res.Allowed
	})
	// c dies without a word.
	if err := c.g.ml.Shutdown(); err != nil {
		t.Fatal(err)
	}
	live := []member{a, b}
	alive := func(name string) bool {
		for _, m := range a.g.Members() {
			if m.Name == name {
				return true
			}
		}
		return false
	}
	check := func() bool {
		for _, m := range live {
			res, _ := m.s.Check(ctx, []static.Limit{{RuleID: "c", Key: "c", Policy: conc, Cost: 1, DryRun: true}}, nil)
			if !res.Allowed {
				return false
			}
		}
		return true
	}
	eventually(t, "c declared dead", live, func() bool {
		if alive("c") {
			if check() {
				t.Fatal("c's requests forgotten while the failure detector still counts c alive")
			}
			return false
		}
		return true
	})
	eventually(t, "c's requests forgotten", live, check)
	// A graceful leave is seen at once.
	held, _ := b.s.Check(ctx, cl, nil)
	if !held.Allowed {
		t.Fatal("b refused")
	}
	eventually(t, "b's request counts on a", live, func() bool {
		res, _ := a.s.Check(ctx, []static.Limit{{RuleID: "c", Key: "c", Policy: conc, Cost: 2, DryRun: true}}, nil)
		return !res.Allowed
	})
	if err := b.g.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's leave frees its request", []member{a}, func() bool {
		res, _ := a.s.Check(ctx, []static.Limit{{RuleID: "c", Key: "c", Policy: conc, Cost: 2, DryRun: true}}, nil)
		return res.Allowed
	})
	held.Permit.Release(sluice.Success)
}
