// Package region splits a global limit among regions. Each region decides
// on its own Redis (exact or eventual), enforcing its budget: a share of the
// global limit that follows the regions' demand. Budgets are allocated on
// the home region's Redis (the first region by name) by one atomic script,
// so that they never add up to more than the global limit: a region's
// budget falls at once, and rises only into room that no other region holds
// or may still be enforcing. Every sidecar reports its demand and reads its
// region's budget there every sync interval, in the background: no request
// waits on another region. When the home region cannot be reached the last
// budget stands (Doorman's safe capacity), and a region that cannot reach
// the home keeps its budget there too, since the others only ever take room
// a region gave up.
package region

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
)

//go:embed alloc.lua
var allocSource string

var allocScript = redis.NewScript(allocSource)

// Config configures Budgets.
type Config struct {
	// Region is this sidecar's region; one of Regions.
	Region string
	// Regions are every region's names.
	Regions []string
	// Node names this sidecar, unique among the region's sidecars.
	Node string
	// Home is a client of the home region's Redis (the first of Regions by
	// name).
	Home redis.UniversalClient
	// Prefix starts the budget keys; default "sluice".
	Prefix string
	// Interval is how often budgets are rebalanced; default 100ms.
	Interval time.Duration
	// Timeout bounds a round trip to the home region; default a second.
	Timeout time.Duration
	// Clock is read for demand rates; default the system clock.
	Clock sluice.Clock
}

// Home returns the home region of regions: the first by name.
func Home(regions []string) string {
	if len(regions) == 0 {
		return ""
	}
	return sortedCopy(regions)[0]
}

func sortedCopy(xs []string) []string {
	ys := append([]string(nil), xs...)
	sort.Strings(ys)
	return ys
}

// Budgets holds this region's budget of every global rule.
type Budgets struct {
	cfg Config

	mu    sync.Mutex
	rules map[string]*Rule

	syncs, errs atomic.Uint64
}

// New returns Budgets for cfg.
func New(cfg Config) (*Budgets, error) {
	if cfg.Region == "" || cfg.Node == "" || cfg.Home == nil {
		return nil, errors.New("region: region, node and a home client are required")
	}
	cfg.Regions = sortedCopy(cfg.Regions)
	found := false
	for _, r := range cfg.Regions {
		found = found || r == cfg.Region
	}
	if !found {
		return nil, fmt.Errorf("region: %q is not one of the regions %v", cfg.Region, cfg.Regions)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "sluice"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = sluice.NewSystemClock()
	}
	return &Budgets{cfg: cfg, rules: make(map[string]*Rule)}, nil
}

// Rule is one global rule's budget in this region.
type Rule struct {
	id     string
	global *static.Policy
	cur    atomic.Pointer[static.Policy]
	budget atomic.Int64
	demand atomic.Int64 // cost asked for since the last sync
	since  time.Time    // the last sync (guarded by Budgets.mu)
	synced atomic.Bool
}

// Rule returns the budget of the global rule id with policy p, registering
// it (at an even split of p's limit until the first sync) or keeping the
// one registered when its policy shares state with p.
func (b *Budgets) Rule(id string, p *static.Policy) *Rule {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.rules[id]; r != nil && *r.global == *p {
		return r
	}
	r := &Rule{id: id, global: p, since: b.cfg.Clock.Now()}
	r.set(p.Limit / int64(len(b.cfg.Regions)))
	b.rules[id] = r
	return r
}

// Retain forgets the rules not in ids (after a reload).
func (b *Budgets) Retain(ids map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.rules {
		if !ids[id] {
			delete(b.rules, id)
		}
	}
}

// Policy returns the policy this region enforces now: the global one with
// its limit (and burst, in proportion) at the region's budget.
func (r *Rule) Policy() *static.Policy { return r.cur.Load() }

// Note counts cost asked of the rule here (admitted or not): the demand the
// budgets follow.
func (r *Rule) Note(cost int64) { r.demand.Add(cost) }

// Budget returns the region's budget.
func (r *Rule) Budget() int64 { return r.budget.Load() }

func (r *Rule) set(budget int64) {
	g := r.global
	budget = max(0, min(budget, g.Limit))
	if cur := r.cur.Load(); cur != nil && cur.Limit == budget {
		return
	}
	p := *g
	p.Limit = budget
	if g.Burst > 0 && g.Limit > 0 {
		p.Burst = max(1, g.Burst*budget/g.Limit)
	}
	if budget == 0 {
		p.Burst = 0
	}
	if p.Validate() != nil {
		// A rate finer than the stores keep: round the budget down to one
		// they can, never up.
		p.Limit, p.Burst = 0, 0
	}
	r.cur.Store(&p)
	r.budget.Store(p.Limit)
}

// Run rebalances every Interval until ctx ends.
func (b *Budgets) Run(ctx context.Context) {
	t := time.NewTicker(b.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = b.Sync(ctx)
		}
	}
}

// Sync reports this sidecar's demand of every global rule to the home
// region and takes the budgets it answers, in one pipelined round trip. On
// error the budgets stand.
func (b *Budgets) Sync(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.rules) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	now := b.cfg.Clock.Now()
	stale := 3*b.cfg.Interval + time.Second
	type call struct {
		r      *Rule
		demand int64
		cmd    *redis.Cmd
	}
	calls := make([]call, 0, len(b.rules))
	for _, r := range b.rules {
		calls = append(calls, call{r: r, demand: r.demand.Swap(0)})
	}
	send := func() error {
		pipe := b.cfg.Home.Pipeline()
		for i := range calls {
			c := &calls[i]
			secs := max(now.Sub(c.r.since).Seconds(), 1e-3)
			args := []any{c.r.global.Limit, b.cfg.Region, b.cfg.Node, float64(c.demand) / secs, c.r.budget.Load(),
				stale.Microseconds(), (10 * stale).Microseconds()}
			for _, name := range b.cfg.Regions {
				args = append(args, name)
			}
			c.cmd = pipe.EvalSha(ctx, allocScript.Hash(), []string{b.cfg.Prefix + ":budget:{" + c.r.id + "}"}, args...)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := send()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		// A new or flushed server: load the script once, then again.
		if err = allocScript.Load(ctx, b.cfg.Home).Err(); err == nil {
			err = send()
		}
	}
	b.syncs.Add(1)
	if err != nil {
		b.errs.Add(1)
		for _, c := range calls {
			c.r.demand.Add(c.demand) // reported next time
		}
		return fmt.Errorf("region: home %s: %w", Home(b.cfg.Regions), err)
	}
	for _, c := range calls {
		v, err := c.cmd.Int64()
		if err != nil {
			continue
		}
		c.r.since = now
		c.r.set(v)
		c.r.synced.Store(true)
	}
	return nil
}

// Stats is a snapshot of the budgets.
type Stats struct {
	// Region and Home name this region and the home region.
	Region, Home string
	// Syncs and Errors count rebalancing round trips and the failed ones.
	Syncs, Errors uint64
	// Rules are the global rules' budgets here.
	Rules []RuleStats
}

// RuleStats is one global rule's budget.
type RuleStats struct {
	ID            string
	Limit, Budget int64
	// Synced is false until the home region first answered (the budget is
	// then the even split).
	Synced bool
}

// Stats returns the budgets.
func (b *Budgets) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Stats{Region: b.cfg.Region, Home: Home(b.cfg.Regions), Syncs: b.syncs.Load(), Errors: b.errs.Load()}
	for _, r := range b.rules {
		st.Rules = append(st.Rules, RuleStats{ID: r.id, Limit: r.global.Limit, Budget: r.budget.Load(), Synced: r.synced.Load()})
	}
	sort.Slice(st.Rules, func(i, j int) bool { return st.Rules[i].ID < st.Rules[j].ID })
	return st
}
