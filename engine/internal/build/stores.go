// Package build makes the parts an engine.Engine decides with from a
// validated configuration: the static stores (memory, Redis behind its
// failure policy, the deny cache, the fleet's eventual store over Redis or
// gossip, the regional budgets) and the adaptive gate (the limiter, its
// priority classes and the wait queue). It opens clients but does no I/O;
// the engine starts and stops the background work.
package build

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/fleet"
	"github.com/sluicehq/sluice/static/fleet/gossip"
	"github.com/sluicehq/sluice/static/fleet/redisbus"
	"github.com/sluicehq/sluice/static/redisstore"
	"github.com/sluicehq/sluice/static/region"
)

// Stores are the static stores of a configuration. Each part is nil when
// unused.
type Stores struct {
	// Store checks every rule: Memory, or Redis (through Deny and Fleet
	// when set) behind a static.Failover, or the gossip Fleet.
	Store static.Store
	// Memory is the embedded store, or Redis's local fallback.
	Memory *static.Memory
	// Redis is the Redis store, nil unless store.type is redis.
	Redis *redisstore.Store
	// Deny caches Redis's denials in process (deny_cache_keys).
	Deny *static.DenyCache
	// Fleet decides eventual rules locally and syncs over Redis or gossip.
	Fleet *fleet.Store
	// Gossip is the fleet's gossip transport (store.type gossip).
	Gossip *gossip.Gossip
	// Budgets are this region's budgets of the global rules.
	Budgets *region.Budgets

	closers []func() error
}

// NewStores makes cfg's stores. A non-nil store is used as given, with
// memory (made when nil and needed) behind it; on an error, whatever was
// opened is closed.
func NewStores(cfg *config.Config, store static.Store, memory *static.Memory, clock sluice.Clock, log *slog.Logger) (*Stores, error) {
	s := &Stores{Store: store, Memory: memory}
	if s.Memory == nil && (s.Store == nil || cfg.Store.Type != config.StoreMemory) {
		s.Memory = static.NewMemory(static.MemoryOptions{MaxKeys: cfg.Store.Memory.MaxKeys, Clock: clock})
	}
	if s.Store != nil {
		return s, nil
	}
	s.Store = s.Memory
	if err := s.build(cfg, clock, log); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the clients the stores opened, the gossip member first (it
// tells the others it leaves). It is safe on a nil Stores and to call
// twice.
func (s *Stores) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	s.closers = nil
	return errors.Join(errs...)
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

// build makes the stores of cfg's store section on s.Memory.
func (s *Stores) build(cfg *config.Config, clock sluice.Clock, log *slog.Logger) error {
	switch cfg.Store.Type {
	case config.StoreGossip:
		g := cfg.Store.Gossip
		gs, err := gossip.New(gossip.Config{Node: g.Node, Bind: g.Bind, Join: g.Join})
		if err != nil {
			return fmt.Errorf("%s: store.gossip: %w", cfg.File, err)
		}
		s.Gossip = gs
		s.closers = append(s.closers, gs.Close)
		// Requests in flight elsewhere count until the failure detector
		// says their member is gone (a few seconds), or a minute of silence.
		f, err := fleet.New(fleet.Config{Node: gs.Node(), Transport: gs, Interval: g.SyncInterval.D(),
			GaugeTTL: time.Minute, MaxKeys: cfg.Store.Memory.MaxKeys, Clock: clock})
		if err != nil {
			return err
		}
		s.Fleet, s.Store = f, f
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
	s.closers = append(s.closers, client.Close)
	s.Redis = redisstore.New(client, redisstore.Options{Prefix: r.Prefix, Timeout: r.Timeout.D(), Logger: log})
	var primary static.Store = s.Redis
	if n := *r.DenyCacheKeys; n > 0 {
		s.Deny = static.NewDenyCache(s.Redis, clock, n)
		primary = s.Deny
	}
	node := nodeName(cfg)
	if eventualUsed(cfg) {
		f, err := fleet.New(fleet.Config{Node: node, Transport: redisbus.New(client, r.Prefix, max(r.Timeout.D(), time.Second)),
			Interval: r.SyncInterval.D(), MaxKeys: cfg.Store.Memory.MaxKeys, Clock: clock})
		if err != nil {
			return err
		}
		s.Fleet = f
		primary = static.NewSplit(primary, f)
	}
	s.Store = static.NewFailover(primary, s.Memory, r.Instances)
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
			s.closers = append(s.closers, homeClient.Close)
		}
		s.Budgets, err = region.New(region.Config{Region: r.Region, Regions: names, Node: node, Home: homeClient,
			Prefix: r.Prefix, Interval: r.SyncInterval.D(), Clock: clock})
		if err != nil {
			return err
		}
	}
	return nil
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
