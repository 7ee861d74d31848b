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
//
// What a region admitted stays counted in its own store for the rest of the
// window, whatever its budget becomes. So each sidecar also reports its
// region's use: the most of the budget a key was seen to hold within the
// last window. Room another region may take is the limit less, for every
// other region, the most of its budget, the budget its sidecars enforce and
// its use: demand that moves from one region to another within a window
// finds only what the first left unused.
package region

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
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
	epoch time.Time // slot numbers of use count from here

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
	return &Budgets{cfg: cfg, rules: make(map[string]*Rule), epoch: cfg.Clock.Now()}, nil
}

// Rule is one global rule's budget in this region.
type Rule struct {
	id     string
	global *static.Policy
	cur    atomic.Pointer[static.Policy]
	budget atomic.Int64
	demand atomic.Int64 // cost asked for since the last sync
	peak   atomic.Int64 // the most a key was seen to use since the last sync
	since  time.Time    // the last sync (guarded by Budgets.mu)
	synced atomic.Bool

	used int64 // the use reported at the last sync (guarded by Budgets.mu)
	// uses holds the peak use of each slot of the last window, a ring
	// (guarded by Budgets.mu).
	uses [useSlots + 2]useSlot
}

// useSlots is how many slots a window's use is kept in: a peak seen leaves
// the report between one and 1+1/useSlots windows after it was seen.
const useSlots = 16

type useSlot struct {
	n    int64 // the slot's number since the epoch; 0 = never used
	peak int64
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

// Admitted records what an admission under policy p (the region's policy
// when the request was decided) left of its key's quota: the key's use
// counts against the room other regions may take for the rest of the
// window. A decision without a known remainder records nothing.
func (r *Rule) Admitted(p *static.Policy, d sluice.Decision) {
	if d.Remaining < 0 || d.Limit <= 0 || p == nil {
		return
	}
	u := d.Limit - d.Remaining
	if d.Limit != p.Limit {
		// A bucket's capacity (its burst): its use, in the limit's units.
		u = int64(math.Ceil(float64(u) * float64(p.Limit) / float64(d.Limit)))
	}
	for {
		old := r.peak.Load()
		if u <= old || r.peak.CompareAndSwap(old, u) {
			return
		}
	}
}

// use folds the peak since the last sync into the ring and returns the
// region's use over the last window as this sidecar saw it. Called under
// Budgets.mu.
func (r *Rule) use(now, epoch time.Time, interval time.Duration) int64 {
	w := r.global.Window
	slot := max(w/useSlots, interval, time.Millisecond)
	n := int64(now.Sub(epoch)/slot) + 1
	s := &r.uses[n%int64(len(r.uses))]
	if s.n != n {
		*s = useSlot{n: n}
	}
	s.peak = max(s.peak, r.peak.Swap(0))
	span := int64((w + slot - 1) / slot) // slots a window covers
	used := int64(0)
	for _, u := range r.uses {
		if u.n != 0 && u.n <= n && n-u.n <= span {
			used = max(used, u.peak)
		}
	}
	return used
}

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
		used   int64
		cmd    *redis.Cmd
	}
	calls := make([]call, 0, len(b.rules))
	for _, r := range b.rules {
		r.used = r.use(now, b.epoch, b.cfg.Interval)
		calls = append(calls, call{r: r, demand: r.demand.Swap(0), used: r.used})
	}
	send := func() error {
		pipe := b.cfg.Home.Pipeline()
		for i := range calls {
			c := &calls[i]
			secs := max(now.Sub(c.r.since).Seconds(), 1e-3)
			args := []any{c.r.global.Limit, b.cfg.Region, b.cfg.Node, float64(c.demand) / secs, c.r.budget.Load(),
				stale.Microseconds(), max(10*stale, c.r.global.Window).Microseconds(), c.used}
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
	// Used is the most of the budget a key was seen to use within the
	// last window: what other regions cannot take until it ends.
	Used int64
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
		st.Rules = append(st.Rules, RuleStats{ID: r.id, Limit: r.global.Limit, Budget: r.budget.Load(), Used: r.used, Synced: r.synced.Load()})
	}
	sort.Slice(st.Rules, func(i, j int) bool { return st.Rules[i].ID < st.Rules[j].ID })
	return st
}
