package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
	"github.com/sluicehq/sluice/static/statictest"
)

// TestDenyCacheSparesRedisUntilReset: a key over its limit is denied from
// memory, with no round trip, until exactly the time its denial named; then
// Redis decides again.
func TestDenyCacheSparesRedisUntilReset(t *testing.T) {
	srv := redistest.Start(t)
	client, err := redisstore.NewClient(redisstore.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	clock := sluice.NewFakeClock(statictest.Start)
	rs := redisstore.New(client, redisstore.Options{Clock: clock, Prefix: t.Name()})
	c := static.NewDenyCache(rs, clock, 100)
	ctx := context.Background()
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 2, Window: time.Minute}
	l := []static.Limit{{RuleID: "r", Key: "hot", Policy: p, Cost: 1}}
	for range 2 {
		if res, err := c.Check(ctx, l, nil); err != nil || !res.Allowed {
			t.Fatalf("%+v %v", res.Decision, err)
		}
	}
	first, _ := c.Check(ctx, l, nil)
	if first.Allowed || first.RetryAfter <= 0 {
		t.Fatalf("over the limit: %+v", first.Decision)
	}
	trips := rs.Stats().RoundTrips
	for range 50 {
		res, err := c.Check(ctx, l, nil)
		if err != nil || res.Allowed || res.Reason != sluice.ReasonQuota || res.RuleID != "r" {
			t.Fatalf("cached denial: %+v %v", res.Decision, err)
		}
	}
	if got := rs.Stats().RoundTrips - trips; got != 0 {
		t.Errorf("%d round trips for a key known to be over its limit", got)
	}
	if c.Hits() != 50 {
		t.Errorf("hits %d, want 50", c.Hits())
	}
	// A second before the reset: still from memory, with the time left.
	clock.Advance(first.RetryAfter - time.Second)
	if res, _ := c.Check(ctx, l, nil); res.Allowed || res.RetryAfter != time.Second {
		t.Errorf("a second before reset: %+v", res.Decision)
	}
	// At the reset exactly, Redis decides: a new window admits.
	clock.Advance(time.Second)
	if res, _ := c.Check(ctx, l, nil); !res.Allowed {
		t.Errorf("at the reset: %+v", res.Decision)
	}
	if rs.Stats().RoundTrips == trips {
		t.Error("the check at the reset did not reach Redis")
	}
	// A request of lower cost than the cached denial, another policy, a
	// dry run or a shadow limit are not answered from memory.
	big := []static.Limit{{RuleID: "r", Key: "big", Policy: p, Cost: 2}}
	c.Check(ctx, big, nil)
	if res, _ := c.Check(ctx, big, nil); res.Allowed {
		t.Fatal("cost 2 twice admitted")
	}
	small := []static.Limit{{RuleID: "r", Key: "big", Policy: p, Cost: 1}}
	before := rs.Stats().RoundTrips
	c.Check(ctx, small, nil)
	if rs.Stats().RoundTrips == before {
		t.Error("a cheaper request was denied from the cache of a costlier one")
	}
}
