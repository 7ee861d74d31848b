package config

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/static"
)

// This file fills the defaults of everything optional.

// Clone returns a copy of c that SetDefaults can fill without touching c:
// the rules are copied; what they point to is shared and never written.
func (c *Config) Clone() *Config {
	n := *c
	n.Rules = append([]Rule(nil), c.Rules...)
	n.Adaptive.Classes = append([]Class(nil), c.Adaptive.Classes...)
	if z := c.RulesSource.ZooKeeper; z != nil {
		cp := *z
		n.RulesSource.ZooKeeper = &cp
	}
	if n.File == "" {
		n.File = "config"
	}
	return &n
}

// setDefault sets *s to v when it is empty.
func setDefault[T ~string](s *T, v T) {
	if *s == "" {
		*s = v
	}
}

// SetDefaults fills every optional field left empty.
func (c *Config) SetDefaults() {
	def := setDefault[string]
	def(&c.Listen, "127.0.0.1:8080")
	def(&c.Admin, "127.0.0.1:9901")
	setDefault(&c.Proxy.Engine, ProxyFast)
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(10 * time.Second)
	}
	if c.Deadlines.From == nil {
		c.Deadlines.From = slices.Clone(DefaultDeadlineHeaders)
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = Duration(30 * time.Second)
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = Duration(60 * time.Second)
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = Duration(30 * time.Second)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = Duration(75 * time.Second)
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.RequestBuffer == 0 {
		c.RequestBuffer = 16 << 10
	}
	if c.RLS.NearLimitRatio == 0 {
		c.RLS.NearLimitRatio = 0.8
	}
	if c.UploadMinRate == nil {
		n := DefaultUploadMinRate
		c.UploadMinRate = &n
	}
	setDefault(&c.Store.Type, StoreMemory)
	if c.Store.Memory.MaxKeys == 0 {
		c.Store.Memory.MaxKeys = static.DefaultMaxKeys
	}
	r := &c.Store.Redis
	def(&r.Prefix, "sluice")
	setDefault(&r.OnError, "local")
	if r.Timeout == 0 {
		r.Timeout = Duration(50 * time.Millisecond)
	}
	if r.Instances == 0 {
		r.Instances = 1
	}
	setDefault(&r.Consistency, ConsistencyExact)
	if r.SyncInterval == 0 {
		r.SyncInterval = Duration(100 * time.Millisecond)
	}
	if r.DenyCacheKeys == nil {
		n := 100_000
		r.DenyCacheKeys = &n
	}
	if r.Region != "" && len(r.Addrs) == 0 {
		if rr, ok := r.Regions[r.Region]; ok {
			r.Addrs, r.MasterName, r.Username, r.Password, r.DB = rr.Addrs, rr.MasterName, rr.Username, rr.Password, rr.DB
		}
	}
	g := &c.Store.Gossip
	def(&g.Bind, "127.0.0.1:7946")
	if g.SyncInterval == 0 {
		g.SyncInterval = Duration(100 * time.Millisecond)
	}
	for i := range c.Rules {
		setDefault(&c.Rules[i].Scope, ScopeRegion)
	}
	c.RulesSource.setDefaults()
	def(&c.Identity.UserHeader, "X-User-ID")
	if c.Identity.UserFrom == "" {
		c.Identity.UserFrom = "header"
		if c.Identity.UserFromJWT {
			c.Identity.UserFrom = "jwt"
		}
	}
	if c.Identity.IPv4Prefix == 0 {
		c.Identity.IPv4Prefix = 32
	}
	if c.Identity.IPv6Prefix == 0 {
		c.Identity.IPv6Prefix = 64
	}
	def(&c.Identity.APIKeyHeader, "X-API-Key")
	a := &c.Adaptive
	setDefault(&a.Algorithm, "gradient2")
	if a.MinLimit == 0 {
		a.MinLimit = 1
	}
	if a.MaxLimit == 0 {
		a.MaxLimit = 1000
	}
	if a.InitialLimit == 0 {
		// 20, within the bounds set: max_limit: 16 alone is no error.
		a.InitialLimit = max(min(20, a.MaxLimit), a.MinLimit)
	}
	if a.ElasticHeadroom == 0 {
		a.ElasticHeadroom = 0.8
	}
	if a.DefaultClass == "" && len(a.Classes) > 0 {
		a.DefaultClass = a.Classes[len(a.Classes)-1].Name
	}
	q := &c.Queue
	if q.MaxSize == nil {
		n := 100
		q.MaxSize = &n
	}
	if q.ClosedLoopMaxSize == nil {
		n := 4096
		q.ClosedLoopMaxSize = &n
	}
	if q.MaxWait == 0 {
		q.MaxWait = Duration(500 * time.Millisecond)
	}
	if q.ClosedLoopMaxWait == nil {
		d := Duration(time.Second)
		q.ClosedLoopMaxWait = &d
	}
	setDefault(&q.Order, "adaptive_lifo")
	setDefault(&q.Fairness, FairnessNone)
	for i := range c.Rules {
		rl := &c.Rules[i]
		setDefault(&rl.Mode, ModeHard)
		if rl.SoftPercent == nil {
			v := 10.0
			rl.SoftPercent = &v
		}
		if rl.CostFrom != nil && rl.CostDefault == nil {
			one := int64(1)
			rl.CostDefault = &one
		}
	}
}
