package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/fleet"
	"github.com/sluicehq/sluice/static/fleet/redisbus"
)

func newStore(t testing.TB, client redis.UniversalClient, node string, interval time.Duration) *fleet.Store {
	t.Helper()
	s, err := fleet.New(fleet.Config{Node: node, Transport: redisbus.New(client, "t", time.Second), Interval: interval,
		StaleAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func client(t testing.TB, srv *redistest.Server) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEventualWithinBound: four stores on one Redis, each hammered by
// eight goroutines, admit at least the limit and at most the limit plus
// what the others admit within a sync lag.
func TestEventualWithinBound(t *testing.T) {
	srv := redistest.Start(t)
	const (
		nodes    = 4
		workers  = 8
		limit    = 400
		interval = 20 * time.Millisecond
		perNode  = 1500 // attempts per node, at about perNodeRate
	)
	// A token bucket refilling at 400 an hour: the test's second adds
	// nothing, so the fleet should admit 400.
	p := &static.Policy{Algorithm: static.TokenBucket, Limit: limit, Window: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stores []*fleet.Store
	for i := range nodes {
		s := newStore(t, client(t, srv), fmt.Sprintf("n%d", i), interval)
		stores = append(stores, s)
		go s.Run(ctx)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, s := range stores {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := []static.Limit{{RuleID: "r", Key: "{k}:r", Policy: p, Cost: 1}}
				for range perNode / workers {
					res, err := s.Check(ctx, l, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
					time.Sleep(5 * time.Millisecond) // pacing the load, not waiting for a limit
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	got := admitted.Load()
	// Each node's rate; the bound is what the others admit over two sync
	// intervals (push, then the reader's next pull), with a generous
	// allowance for a machine busy with the race detector.
	rate := float64(perNode) / elapsed.Seconds()
	bound := rate * (2 * interval).Seconds() * (nodes - 1)
	t.Logf("admitted %d of limit %d; node rate %.0f/s, bound %.0f", got, limit, rate, bound)
	if got < limit {
		t.Errorf("admitted %d, under the limit %d: usage was counted twice", got, limit)
	}
	if float64(got) > limit+5*bound {
		t.Errorf("admitted %d, over limit %d + 5 x bound %.0f", got, limit, bound)
	}
}

// TestEventualSurvivesRedisRestart: with Redis gone, checks go on locally
// (then, past StaleAfter, report ErrStale for the failure policy); when it
// comes back the usage kept meanwhile reaches the others.
func TestEventualSurvivesRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	clock := sluice.NewFakeClock(time.Now())
	mk := func(node string) *fleet.Store {
		s, err := fleet.New(fleet.Config{Node: node, Transport: redisbus.New(client(t, srv), "t", 500*time.Millisecond),
			Interval: 100 * time.Millisecond, StaleAfter: time.Second, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := mk("a"), mk("b")
	ctx := context.Background()
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 10, Window: time.Hour}
	l := []static.Limit{{RuleID: "r", Key: "k", Policy: p, Cost: 1}}
	for _, s := range []*fleet.Store{a, b} {
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	for range 6 {
		if res, err := a.Check(ctx, l, nil); err != nil || !res.Allowed {
			t.Fatalf("a with Redis down, before stale: %+v %v", res.Decision, err)
		}
	}
	if err := a.Sync(ctx); err == nil {
		t.Fatal("a synced with Redis down")
	}
	clock.Advance(2 * time.Second)
	if err := a.Sync(ctx); err == nil {
		t.Fatal("a synced with Redis down")
	}
	if _, err := a.Check(ctx, l, nil); !errors.Is(err, fleet.ErrStale) {
		t.Fatalf("a stale: err %v, want ErrStale", err)
	}
	if !a.Stats().Stale {
		t.Error("stats do not say stale")
	}
	srv.Restart()
	if err := a.Sync(ctx); err != nil {
		t.Fatalf("a after restart: %v", err)
	}
	if _, err := a.Check(ctx, l, []sluice.Decision{{}}); err != nil {
		t.Fatalf("a still stale after a sync: %v", err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// a used 6 while Redis was down (and 1 since its last sync, not yet
	// sent); b sees the 6.
	if res, err := b.Check(ctx, []static.Limit{{RuleID: "r", Key: "k", Policy: p}}, nil); err != nil || res.Remaining != 4 {
		t.Errorf("b after reconverging: remaining %d (%v), want 4", res.Remaining, err)
	}
	if st := b.Stats(); len(st.Peers) != 1 || st.Peers[0].Node != "a" {
		t.Errorf("b's peers %+v, want a", st.Peers)
	}
}

// TestConcurrencyAcrossFleet: requests in flight on one node count on the
// others until released.
func TestConcurrencyAcrossFleet(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newStore(t, client(t, srv), "a", time.Second), newStore(t, client(t, srv), "b", time.Second)
	ctx := context.Background()
	p := &static.Policy{Algorithm: static.Concurrency, Limit: 2}
	l := []static.Limit{{RuleID: "c", Key: "c", Policy: p, Cost: 1}}
	var held []sluice.Permit
	for range 2 {
		res, err := a.Check(ctx, l, nil)
		if err != nil || !res.Allowed {
			t.Fatalf("a: %+v %v", res.Decision, err)
		}
		held = append(held, res.Permit)
	}
	sync2 := func() {
		for _, s := range []*fleet.Store{a, b} {
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	sync2()
	if res, _ := b.Check(ctx, l, nil); res.Allowed {
		t.Fatal("b admitted while a holds the whole limit")
	}
	for _, h := range held {
		h.Release(sluice.Success)
	}
	sync2()
	if res, _ := b.Check(ctx, l, nil); !res.Allowed {
		t.Fatal("b refused after a released")
	}
}

func TestDecodeRefusesGarbage(t *testing.T) {
	var d fleet.Decoder
	p := &static.Policy{Algorithm: static.GCRA, Limit: 5, Window: time.Second, Burst: 2}
	b := fleet.Batch{Node: "n", Sent: time.Unix(1, 0), Usages: []static.Usage{{Key: "k", Policy: p, At: 5, Cost: 3}}}
	buf := fleet.Encode(nil, &b)
	got, err := d.Decode(buf)
	if err != nil || got.Node != "n" || len(got.Usages) != 1 || *got.Usages[0].Policy != *p || got.Usages[0].Cost != 3 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for i := range buf {
		if _, err := d.Decode(buf[:i]); err == nil {
			t.Errorf("a batch cut at %d decoded", i)
		}
	}
	bad := *p
	bad.Limit = 0
	bad.Window = 0
	b.Usages[0].Policy = &bad
	if _, err := d.Decode(fleet.Encode(nil, &b)); err == nil {
		t.Error("a batch with an invalid policy decoded")
	}
}

func FuzzDecode(f *testing.F) {
	p := &static.Policy{Algorithm: static.SlidingLog, Limit: 5, Window: time.Second}
	f.Add(fleet.Encode(nil, &fleet.Batch{Node: "n", Usages: []static.Usage{{Key: "k", Policy: p, Cost: 1}}}))
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 15})
	f.Fuzz(func(t *testing.T, buf []byte) {
		var d fleet.Decoder
		b, err := d.Decode(buf)
		if err != nil {
			return
		}
		for _, u := range b.Usages {
			if u.Policy.Validate() != nil || len(u.Key) > fleet.MaxKeyLen {
				t.Fatalf("decoded an invalid usage %+v", u)
			}
		}
		// What decodes survives a round trip.
		if _, err := d.Decode(fleet.Encode(nil, &b)); err != nil {
			t.Fatalf("re-encoded batch: %v", err)
		}
	})
}
