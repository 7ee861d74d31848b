package static

import (
	"context"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// DenyCache is a Store in front of another (Redis in exact mode) that
// remembers keys the store found over their limit, until the time their
// denial said a retry could pass, and denies them from memory until then:
// an attacker hammering one key costs the store nothing (Envoy ratelimit's
// local cache). Only denials that nothing but time can lift are cached:
// rate algorithms, not concurrency; not a sliding log that counts blocked
// attempts (they must be recorded), not a limit with a wait (Reserve, a
// semaphore's Timeout); and a cached denial answers only requests of at
// least the denied cost. It is safe for concurrent use.
type DenyCache struct {
	next   Store
	clock  sluice.Clock
	seed   maphash.Seed
	max    int
	shards [denyShards]denyShard
	hits   atomic.Uint64
}

const denyShards = 16

type denyShard struct {
	mu sync.Mutex
	m  map[string]denied
}

type denied struct {
	policy *Policy
	cost   int64
	until  int64 // Unix ns: a retry passes from here on
	reset  int64 // Unix ns: the quota is whole again
	limit  int64
}

var _ Store = (*DenyCache)(nil)

// NewDenyCache returns a DenyCache in front of next holding at most maxKeys
// keys (at least 1).
func NewDenyCache(next Store, clock sluice.Clock, maxKeys int) *DenyCache {
	c := &DenyCache{next: next, clock: clock, seed: maphash.MakeSeed(), max: max(1, maxKeys/denyShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]denied)
	}
	return c
}

// Hits counts the checks denied from memory.
func (c *DenyCache) Hits() uint64 { return c.hits.Load() }

// cacheable reports whether a denial of l can be answered from memory.
func cacheable(l *Limit) bool {
	p := l.Policy
	return !l.Shadow && !l.DryRun && l.Cost > 0 && l.Reserve <= 0 && p.Algorithm != Concurrency &&
		!p.CountBlocked && p.Timeout == 0
}

func (c *DenyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// Check implements Store.
func (c *DenyCache) Check(ctx context.Context, limits []Limit, each []sluice.Decision) (Result, error) {
	now := c.clock.Now().UnixNano()
	for i := range limits {
		l := &limits[i]
		if !cacheable(l) {
			continue
		}
		s := c.shard(l.Key)
		s.mu.Lock()
		d, ok := s.m[l.Key]
		if ok && now >= d.until {
			delete(s.m, l.Key)
			ok = false
		}
		s.mu.Unlock()
		if ok && l.Cost >= d.cost && *d.policy == *l.Policy {
			c.hits.Add(1)
			return c.deny(limits, each, i, &d, now), nil
		}
	}
	var buf [maxInline]sluice.Decision
	mine := each
	if len(mine) < len(limits) {
		if len(limits) > len(buf) {
			return c.next.Check(ctx, limits, each)
		}
		mine = buf[:len(limits)]
	}
	res, err := c.next.Check(ctx, limits, mine)
	if err != nil || res.Allowed {
		return res, err
	}
	for i := range limits {
		l := &limits[i]
		if d := &mine[i]; !d.Allowed && d.RetryAfter > 0 && d.Reason == sluice.ReasonQuota && cacheable(l) {
			c.remember(l, d, now)
		}
	}
	return res, nil
}

func (c *DenyCache) remember(l *Limit, d *sluice.Decision, now int64) {
	s := c.shard(l.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= c.max {
		for k, v := range s.m {
			if now >= v.until {
				delete(s.m, k)
			}
		}
		if len(s.m) >= c.max {
			return
		}
	}
	s.m[strings.Clone(l.Key)] = denied{policy: l.Policy, cost: l.Cost, until: now + int64(d.RetryAfter),
		reset: now + int64(d.ResetAfter), limit: d.Limit}
}

// deny answers a check from the cached denial of limits[i].
func (c *DenyCache) deny(limits []Limit, each []sluice.Decision, i int, d *denied, now int64) Result {
	dec := sluice.Decision{RuleID: limits[i].RuleID, Limit: d.limit, Remaining: 0, Reason: sluice.ReasonQuota,
		RetryAfter: time.Duration(d.until - now), ResetAfter: time.Duration(max(0, d.reset-now))}
	if len(each) >= len(limits) {
		for j := range limits {
			each[j] = sluice.Decision{Allowed: true, RuleID: limits[j].RuleID, Remaining: -1}
		}
		each[i] = dec
	}
	return Result{Decision: dec, Permit: sluice.NopPermit{}, At: time.Unix(0, now), Index: i}
}

// Charge implements Store. A key a charge takes past its limit is learned
// by the next check that the store denies, as any other.
func (c *DenyCache) Charge(ctx context.Context, limits []Limit, at time.Time) error {
	return c.next.Charge(ctx, limits, at)
}

// Undo implements Store.
func (c *DenyCache) Undo(ctx context.Context, limits []Limit, res Result) error {
	return c.next.Undo(ctx, limits, res)
}
