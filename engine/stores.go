package engine

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/fleet"
	"github.com/sluicehq/sluice/static/fleet/gossip"
	"github.com/sluicehq/sluice/static/fleet/redisbus"
	"github.com/sluicehq/sluice/static/redisstore"
	"github.com/sluicehq/sluice/static/region"
)

// sharing is how the engine shares limits beyond this process: the Redis
// store (exact), its deny cache, the fleet store (eventual, over a Redis
// stream or gossip) and the regional budgets. Each part is nil when unused.
type sharing struct {
	fleet   *fleet.Store
	gossip  *gossip.Gossip
	deny    *static.DenyCache
	budgets *region.Budgets
	closers []func() error
	cancel  context.CancelFunc
}

// nodeName names this sidecar in a fleet: host, process and listener, so
// that two sidecars on one host differ and a restart is a new member.
func nodeName(cfg *config.Config) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), cfg.Listen)
}

// eventualUsed reports whether any rule of cfg is decided eventually.
func eventualUsed(cfg *config.Config) bool {
	for i := range cfg.Rules {
		if cfg.Eventual(&cfg.Rules[i]) {
			return true
		}
	}
	return cfg.Store.Redis.Consistency == config.ConsistencyEventual
}

// buildStore makes the engine's store for cfg's store section.
func (e *Engine) buildStore(cfg *config.Config) error {
	switch cfg.Store.Type {
	case config.StoreGossip:
		g := cfg.Store.Gossip
		gs, err := gossip.New(gossip.Config{Node: g.Node, Bind: g.Bind, Join: g.Join})
		if err != nil {
			return fmt.Errorf("%s: store.gossip: %w", cfg.File, err)
		}
		e.share.gossip = gs
		e.share.closers = append(e.share.closers, gs.Close)
		// Requests in flight elsewhere count until the failure detector
		// says their member is gone (a few seconds), or a minute of silence.
		f, err := fleet.New(fleet.Config{Node: gs.Node(), Transport: gs, Interval: g.SyncInterval.D(),
			GaugeTTL: time.Minute, MaxKeys: cfg.Store.Memory.MaxKeys, Clock: e.clock})
		if err != nil {
			return err
		}
		e.share.fleet, e.store = f, f
		return nil
	case config.StoreRedis:
	default:
		return nil
	}
	r := cfg.Store.Redis
	tlsConf, err := redisTLS(cfg.File, r.TLS)
	if err != nil {
		return fmt.Errorf("%s: store.redis.tls: %w", cfg.File, err)
	}
	client, err := redisstore.NewClient(redisstore.Config{Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username,
		Password: r.Password, DB: r.DB, Timeout: r.Timeout.D(), TLS: tlsConf})
	if err != nil {
		return fmt.Errorf("%s: store.redis: %w", cfg.File, err)
	}
	e.share.closers = append(e.share.closers, client.Close)
	e.redis = redisstore.New(client, redisstore.WithPrefix(r.Prefix), redisstore.WithTimeout(r.Timeout.D()), redisstore.WithLogger(e.log))
	var primary static.Store = e.redis
	if n := *r.DenyCacheKeys; n > 0 {
		e.share.deny = static.NewDenyCache(e.redis, e.clock, n)
		primary = e.share.deny
	}
	node := nodeName(cfg)
	if eventualUsed(cfg) {
		f, err := fleet.New(fleet.Config{Node: node, Transport: redisbus.New(client, r.Prefix, max(r.Timeout.D(), time.Second)),
			Interval: r.SyncInterval.D(), MaxKeys: cfg.Store.Memory.MaxKeys, Clock: e.clock})
		if err != nil {
			return err
		}
		e.share.fleet = f
		primary = static.NewSplit(primary, f)
	}
	e.store = static.NewFailover(primary, e.memory, r.Instances)
	if r.Region != "" {
		names := make([]string, 0, len(r.Regions))
		for name := range r.Regions {
			names = append(names, name)
		}
		home := region.Home(names)
		var homeClient redis.UniversalClient = client
		if home != r.Region {
			h := r.Regions[home]
			homeTLS, err := redisTLS(cfg.File, h.TLS)
			if err != nil {
				return fmt.Errorf("%s: store.redis.regions.%s.tls: %w", cfg.File, home, err)
			}
			homeClient, err = redisstore.NewClient(redisstore.Config{Addrs: h.Addrs, MasterName: h.MasterName,
				Username: h.Username, Password: h.Password, DB: h.DB, Timeout: time.Second, TLS: homeTLS})
			if err != nil {
				return fmt.Errorf("%s: store.redis.regions.%s: %w", cfg.File, home, err)
			}
			e.share.closers = append(e.share.closers, homeClient.Close)
		}
		e.share.budgets, err = region.New(region.Config{Region: r.Region, Regions: names, Node: node, Home: homeClient,
			Prefix: r.Prefix, Interval: r.SyncInterval.D(), Clock: e.clock})
		if err != nil {
			return err
		}
	}
	return nil
}

// startSharing begins the syncs.
func (e *Engine) startSharing() {
	if e.share.fleet == nil && e.share.budgets == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.share.cancel = cancel
	if f := e.share.fleet; f != nil {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); f.Run(ctx) }()
	}
	if b := e.share.budgets; b != nil {
		// One sync before serving: a sidecar started within a window takes
		// its region's budget (what the others left) rather than the even
		// split, unless the home region does not answer within its timeout.
		if err := b.Sync(ctx); err != nil {
			e.log.Warn("regions: no budget from the home region yet; the even split holds until one comes", "err", err)
		}
		e.wg.Add(1)
		go func() { defer e.wg.Done(); b.Run(ctx) }()
	}
}

// bindSharing gives rs's rules their store and budget: eventual rules go to
// the fleet store when there is one, global rules get their region's budget.
func (e *Engine) bindSharing(rs *ruleSet) {
	ids := map[string]bool{}
	for _, r := range rs.rules {
		if r.local && e.share.fleet == nil {
			r.local = false
			e.log.Warn("reload: eventual consistency takes effect at restart; the rule stays exact until then", "rule", r.id)
		}
		if r.global {
			if e.share.budgets == nil {
				e.log.Warn("reload: regions take effect at restart; the rule holds in this region only until then", "rule", r.id)
				continue
			}
			r.budget = e.share.budgets.Rule(r.id, r.policy)
			ids[r.id] = true
		}
	}
	if e.share.budgets != nil {
		e.share.budgets.Retain(ids)
	}
}

// shareState fills the sharing parts of the store's state.
func (e *Engine) shareState(st *StoreState, cfg *config.Config) {
	if cfg.Store.Type == config.StoreRedis {
		st.Consistency = string(cfg.Store.Redis.Consistency)
	}
	if e.share.deny != nil {
		st.DenyCacheHits = e.share.deny.Hits()
	}
	if f := e.share.fleet; f != nil {
		fs := f.Stats()
		st.Fleet = &FleetState{Node: f.Node(), Syncs: fs.Syncs, Errors: fs.Errors, Sent: fs.Sent, Received: fs.Received,
			Dropped: fs.Dropped, Stale: fs.Stale, LastSync: fs.LastSync, Peers: []PeerState{}}
		for _, p := range fs.Peers {
			st.Fleet.Peers = append(st.Fleet.Peers, PeerState{Node: p.Node, LastSeen: p.LastSeen,
				LagMillis: float64(p.Lag.Microseconds()) / 1000})
		}
		if fs.Stale {
			st.Status, st.Healthy = "down", false
		}
		if e.share.gossip != nil {
			for _, m := range e.share.gossip.Members() {
				st.Fleet.Members = append(st.Fleet.Members, MemberState(m))
			}
		}
	}
	if b := e.share.budgets; b != nil {
		bs := b.Stats()
		st.Regions = &RegionsState{Region: bs.Region, Home: bs.Home, Syncs: bs.Syncs, Errors: bs.Errors, Rules: []BudgetState{}}
		for _, r := range bs.Rules {
			st.Regions.Rules = append(st.Regions.Rules, BudgetState{RuleID: r.ID, Limit: r.Limit, Budget: r.Budget, Used: r.Used, Synced: r.Synced})
		}
	}
}

// redisTLS reads a Redis TLS block, its paths relative to the
// configuration file; nil for none.
func redisTLS(file string, t *config.RedisTLS) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) || file == "" {
			return p
		}
		return filepath.Join(filepath.Dir(file), p)
	}
	return redisstore.TLSConfig(redisstore.TLSFiles{CAFile: rel(t.CAFile), CertFile: rel(t.CertFile),
		KeyFile: rel(t.KeyFile), ServerName: t.ServerName})
}
