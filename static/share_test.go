package static_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/statictest"
)

// drainInto moves what a drained since its last Drain into b.
func drainInto(a, b *static.Memory) []static.Usage {
	var us []static.Usage
	a.Drain(func(u static.Usage) { us = append(us, u) })
	for _, u := range us {
		b.Absorb(u)
	}
	return us
}

func TestAbsorbCarriesUsageBetweenStores(t *testing.T) {
	policies := []*static.Policy{
		{Algorithm: static.FixedWindow, Limit: 5, Window: time.Minute},
		{Algorithm: static.SlidingWindow, Limit: 5, Window: time.Minute},
		{Algorithm: static.SlidingLog, Limit: 5, Window: time.Minute},
		{Algorithm: static.TokenBucket, Limit: 5, Window: time.Minute},
		{Algorithm: static.TokenBucket, Limit: 5, Window: time.Minute, Warmup: time.Minute},
		{Algorithm: static.GCRA, Limit: 5, Window: time.Minute, Burst: 4},
		{Algorithm: static.LeakyBucket, Limit: 5, Window: time.Minute, Burst: 4, NoDelay: true},
		{Algorithm: static.Semaphore, Limit: 5, Window: time.Minute},
	}
	for _, p := range policies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			clock := sluice.NewFakeClock(statictest.Start)
			a := static.NewMemory(static.MemoryOptions{Sharing: true, Clock: clock})
			b := static.NewMemory(static.MemoryOptions{Sharing: true, Clock: clock})
			l := []static.Limit{{RuleID: "r", Key: "k", Policy: p, Cost: 1}}
			admitted := 0
			for range 3 {
				if res, _ := a.Check(context.Background(), l, nil); res.Allowed {
					admitted++
				}
			}
			us := drainInto(a, b)
			if len(us) != 1 || us[0].Cost != int64(admitted) {
				t.Fatalf("drained %+v, want one usage of %d", us, admitted)
			}
			// b now knows a's usage: together they admit no more than the
			// limit allows one store.
			byB := 0
			for range 10 {
				if res, _ := b.Check(context.Background(), l, nil); res.Allowed {
					byB++
				}
			}
			admitted += byB
			fresh := static.NewMemory(static.MemoryOptions{Clock: clock})
			alone := 0
			for range 13 {
				if res, _ := fresh.Check(context.Background(), l, nil); res.Allowed {
					alone++
				}
			}
			if admitted != alone {
				t.Errorf("two stores sharing usage admitted %d, one store alone %d", admitted, alone)
			}
			// Absorbed usage is not drained again (no echo between stores).
			var again []static.Usage
			b.Drain(func(u static.Usage) { again = append(again, u) })
			if got := int64(0); len(again) > 1 || func() bool {
				for _, u := range again {
					got += u.Cost
				}
				return got != int64(byB)
			}() {
				t.Errorf("b drained %+v: want only its own usage", again)
			}
		})
	}
}

func TestAbsorbUndoAndConcurrency(t *testing.T) {
	clock := sluice.NewFakeClock(statictest.Start)
	a := static.NewMemory(static.MemoryOptions{Sharing: true, Clock: clock})
	b := static.NewMemory(static.MemoryOptions{Sharing: true, Clock: clock})
	fixed := &static.Policy{Algorithm: static.FixedWindow, Limit: 2, Window: time.Minute}
	l := []static.Limit{{RuleID: "r", Key: "k", Policy: fixed, Cost: 1}}
	res, _ := a.Check(context.Background(), l, nil)
	_ = a.Undo(context.Background(), l, res)
	if us := drainInto(a, b); len(us) != 1 || us[0].Cost != 0 {
		t.Fatalf("a check and its undo drained %+v, want a net cost of 0", us)
	}
	conc := &static.Policy{Algorithm: static.Concurrency, Limit: 3}
	c := []static.Limit{{RuleID: "c", Key: "c", Policy: conc, Cost: 1}}
	var permits []sluice.Permit
	for range 2 {
		res, _ := a.Check(context.Background(), c, nil)
		permits = append(permits, res.Permit)
	}
	us := drainInto(a, b)
	if len(us) != 1 || us[0].InFlight != 2 {
		t.Fatalf("drained %+v, want 2 in flight", us)
	}
	// The fleet layer turns gauges into changes: +2 elsewhere.
	b.Absorb(static.Usage{Key: "c", Policy: conc, At: clock.Now().UnixNano(), Cost: us[0].InFlight})
	third, _ := b.Check(context.Background(), c, nil)
	if !third.Allowed {
		t.Fatal("b refused the third request in flight")
	}
	if res, _ := b.Check(context.Background(), c, nil); res.Allowed {
		t.Error("b admitted a fourth request in flight across the two stores")
	}
	b.Absorb(static.Usage{Key: "c", Policy: conc, At: clock.Now().UnixNano(), Cost: -2})
	if res, _ := b.Check(context.Background(), c, nil); !res.Allowed {
		t.Error("b refused after the others' requests ended")
	}
	// A concurrency key still held is reported at every drain.
	var held []static.Usage
	a.Drain(func(u static.Usage) { held = append(held, u) })
	if len(held) != 1 || held[0].InFlight != 2 {
		t.Errorf("second drain %+v, want the held key again", held)
	}
	for _, p := range permits {
		p.Release(sluice.Success)
	}
	held = held[:0]
	a.Drain(func(u static.Usage) { held = append(held, u) })
	if len(held) != 1 || held[0].InFlight != 0 {
		t.Errorf("drain after release %+v, want 0 in flight once", held)
	}
	held = held[:0]
	a.Drain(func(u static.Usage) { held = append(held, u) })
	if len(held) != 0 {
		t.Errorf("drain of an idle key %+v, want none", held)
	}
}

func TestAbsorbDropsUsageOfAPastWindow(t *testing.T) {
	clock := sluice.NewFakeClock(statictest.Start)
	m := static.NewMemory(static.MemoryOptions{Sharing: true, Clock: clock})
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 2, Window: time.Minute}
	l := []static.Limit{{RuleID: "r", Key: "k", Policy: p, Cost: 1}}
	m.Check(context.Background(), l, nil)
	clock.Advance(time.Minute)
	m.Check(context.Background(), l, nil)
	// Usage reported late, from the window that has passed.
	m.Absorb(static.Usage{Key: "k", Policy: p, At: clock.Now().Add(-time.Minute).UnixNano(), Cost: 5})
	if res, _ := m.Check(context.Background(), l, nil); !res.Allowed {
		t.Error("usage of a past window counted in the current one")
	}
}

// A charge (a cost learned from a response) is this store's usage: it is
// drained to the fleet as any other, and so is a charge given back.
func TestChargeIsShared(t *testing.T) {
	clock := sluice.NewFakeClock(statictest.Start)
	a := static.NewMemory(static.MemoryOptions{Sharing: true, Clock: clock})
	b := static.NewMemory(static.MemoryOptions{Sharing: true, Clock: clock})
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 10, Window: time.Minute}
	l := []static.Limit{{RuleID: "r", Key: "k", Policy: p, Cost: 7}}
	if err := a.Charge(context.Background(), l, clock.Now()); err != nil {
		t.Fatal(err)
	}
	drainInto(a, b)
	l[0].Cost = 4
	if res, _ := b.Check(context.Background(), l, nil); res.Allowed {
		t.Fatalf("the other store admits 4 after a charge of 7 of 10: %+v", res.Decision)
	}
	l[0].Cost = -5
	if err := a.Charge(context.Background(), l, clock.Now()); err != nil {
		t.Fatal(err)
	}
	drainInto(a, b)
	l[0].Cost = 4
	if res, _ := b.Check(context.Background(), l, nil); !res.Allowed {
		t.Fatalf("the other store denies 4 after 5 of the 7 came back: %+v", res.Decision)
	}
}
