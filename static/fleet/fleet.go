// Package fleet holds the local-first store that many sidecars use to share
// one limit without a round trip per request: each decides from its own view
// (its own usage plus the fleet's usage up to the last sync) and, every sync
// interval, sends what it used and absorbs what the others used, through a
// Transport (a Redis stream, or gossip between the sidecars).
//
// The price is a bounded over-admission: what the others admitted since the
// last sync is not yet seen here. With N sidecars each admitting at rate r
// on a key and a sync interval I, the fleet admits at most about
// r x I x (N-1) over the limit per window (twice that with a transport that
// relays through a store, which adds up to one interval of delay).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
)

// Batch is one sidecar's usage since its previous batch.
type Batch struct {
	// Node names the sidecar that sent it.
	Node string
	// Sent is when it was sent, by the sender's clock.
	Sent time.Time
	// Usages are its keys' usage (static.Memory.Drain).
	Usages []static.Usage
	// Gone, set by a transport, says that Node left the fleet or was found
	// dead: its requests in flight no longer count. Usages is then empty.
	Gone bool
}

// Transport carries batches between the sidecars of a fleet.
type Transport interface {
	// Exchange publishes out and returns the other sidecars' batches that
	// arrived since the previous call, oldest first. An error means out may
	// not have been published; the store sends its usage again next time.
	Exchange(ctx context.Context, out Batch) ([]Batch, error)
}

// Config configures a Store.
type Config struct {
	// Node names this sidecar in the fleet; required and unique.
	Node string
	// Transport carries the batches; required.
	Transport Transport
	// Interval is how often Run syncs; default 100ms.
	Interval time.Duration
	// StaleAfter is how long after its last successful sync the store stops
	// deciding and reports ErrStale, so that static.Failover applies each
	// limit's failure policy; default 3 x Interval plus a second. A
	// transport that never fails (gossip) never makes the store stale.
	StaleAfter time.Duration
	// GaugeTTL is how long another sidecar's requests in flight count
	// after its last report of them (it reports them every sync while they
	// are held); default StaleAfter. With a transport that reports members
	// gone (gossip), make it longer than failure detection takes.
	GaugeTTL time.Duration
	// MaxKeys bounds the keys held locally; default static.DefaultMaxKeys.
	MaxKeys int
	// Clock is read for times; default the system clock.
	Clock sluice.Clock
}

// ErrStale is the error of a check while the store has not synced for
// longer than Config.StaleAfter.
var ErrStale = errors.New("fleet: not synced with the fleet")

// maxPending bounds the usage kept for a transport that keeps failing: past
// it, the oldest is dropped (and counted in Stats().Dropped).
const maxPending = 100_000

// maxPeers bounds the peers whose requests in flight are tracked.
const maxPeers = 4096

// Store is a static.Store that decides locally and syncs with a fleet. Call
// Run (or Sync) for the syncs. It is safe for concurrent use.
type Store struct {
	cfg   Config
	mem   *static.Memory
	clock sluice.Clock

	lastOK atomic.Int64 // Unix ns of the last successful sync
	stale  atomic.Bool

	mu      sync.Mutex // serializes syncs and guards what follows
	pending []static.Usage
	peers   map[string]*peer
	lastErr error
	stats   Stats
}

// peer is what the store knows of another sidecar.
type peer struct {
	seen, sent time.Time
	gauges     map[string]gauge // concurrency keys: requests in flight there
}

type gauge struct {
	n      int64
	policy *static.Policy
	seen   time.Time
}

var _ static.Store = (*Store)(nil)

// New returns a Store for cfg.
func New(cfg Config) (*Store, error) {
	if cfg.Node == "" {
		return nil, errors.New("fleet: a node name is required")
	}
	if cfg.Transport == nil {
		return nil, errors.New("fleet: a transport is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 3*cfg.Interval + time.Second
	}
	if cfg.GaugeTTL <= 0 {
		cfg.GaugeTTL = cfg.StaleAfter
	}
	if cfg.Clock == nil {
		cfg.Clock = sluice.NewSystemClock()
	}
	s := &Store{cfg: cfg, clock: cfg.Clock, peers: make(map[string]*peer),
		mem: static.NewMemory(static.MemoryOptions{Sharing: true, Clock: cfg.Clock, MaxKeys: cfg.MaxKeys})}
	s.lastOK.Store(cfg.Clock.Now().UnixNano())
	return s, nil
}

// Node returns this sidecar's name in the fleet.
func (s *Store) Node() string { return s.cfg.Node }

// Memory returns the store's local view (for Sweep and its stats).
func (s *Store) Memory() *static.Memory { return s.mem }

// Check implements static.Store: it decides from the local view, with no
// round trip. While the store is stale it returns ErrStale.
func (s *Store) Check(ctx context.Context, limits []static.Limit, each []sluice.Decision) (static.Result, error) {
	if s.stale.Load() && s.checkStale() {
		return static.Result{}, s.staleErr()
	}
	return s.mem.Check(ctx, limits, each)
}

// checkStale re-reads staleness from the clock (the flag is only a hint set
// by Sync, so that a store whose syncs stopped is noticed).
func (s *Store) checkStale() bool {
	return s.clock.Now().UnixNano()-s.lastOK.Load() > int64(s.cfg.StaleAfter)
}

func (s *Store) staleErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr != nil {
		return fmt.Errorf("%w: %w", ErrStale, s.lastErr)
	}
	return ErrStale
}

// Charge implements static.Store; the charged usage is synced too.
func (s *Store) Charge(ctx context.Context, limits []static.Limit, at time.Time) error {
	return s.mem.Charge(ctx, limits, at)
}

// Undo implements static.Store; the given-back usage is synced too.
func (s *Store) Undo(ctx context.Context, limits []static.Limit, res static.Result) error {
	return s.mem.Undo(ctx, limits, res)
}

// Run syncs every Interval until ctx ends.
func (s *Store) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.Sync(ctx)
		}
	}
}

// Sync sends this sidecar's usage since the last sync and absorbs the
// others'. On error the usage is kept for the next sync.
func (s *Store) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	out := s.pending
	s.mem.Drain(func(u static.Usage) { out = append(out, u) })
	if len(out) > maxPending {
		s.stats.Dropped += uint64(len(out) - maxPending)
		out = append(out[:0], out[len(out)-maxPending:]...)
	}
	in, err := s.cfg.Transport.Exchange(ctx, Batch{Node: s.cfg.Node, Sent: now, Usages: out})
	s.stats.Syncs++
	if err != nil {
		s.stats.Errors++
		s.lastErr = err
		s.pending = out
		s.stale.Store(s.checkStale())
		return err
	}
	s.stats.Sent += uint64(len(out))
	s.pending = out[:0:0]
	s.lastErr = nil
	s.lastOK.Store(now.UnixNano())
	s.stale.Store(false)
	for i := range in {
		s.absorb(&in[i], now)
	}
	s.expireGauges(now)
	s.stats.LastSync = now
	return nil
}

// absorb applies one batch of another sidecar.
func (s *Store) absorb(b *Batch, now time.Time) {
	if b.Node == s.cfg.Node {
		return
	}
	p := s.peers[b.Node]
	if b.Gone {
		if p != nil {
			s.dropPeer(b.Node, p)
		}
		return
	}
	if p == nil {
		if len(s.peers) >= maxPeers {
			s.stats.Dropped += uint64(len(b.Usages))
			return
		}
		p = &peer{gauges: make(map[string]gauge)}
		s.peers[b.Node] = p
	}
	p.seen, p.sent = now, b.Sent
	for _, u := range b.Usages {
		if u.Policy == nil {
			continue
		}
		if u.Policy.Algorithm == static.Concurrency {
			g := p.gauges[u.Key]
			delta := u.InFlight - g.n
			if u.InFlight == 0 {
				delete(p.gauges, u.Key)
			} else {
				p.gauges[u.Key] = gauge{n: u.InFlight, policy: u.Policy, seen: now}
			}
			if delta != 0 {
				s.mem.Absorb(static.Usage{Key: u.Key, Policy: u.Policy, At: now.UnixNano(), Cost: delta})
			}
			continue
		}
		// Usage is placed at the sender's time, never in this clock's future.
		u.At = min(u.At, now.UnixNano())
		s.mem.Absorb(u)
		s.stats.Received++
	}
}

// dropPeer forgets a sidecar that left: its requests in flight stop
// counting.
func (s *Store) dropPeer(node string, p *peer) {
	for key, g := range p.gauges {
		s.mem.Absorb(static.Usage{Key: key, Policy: g.policy, At: s.clock.Now().UnixNano(), Cost: -g.n})
	}
	delete(s.peers, node)
}

// expireGauges forgets requests in flight that their sidecar stopped
// reporting (it reports them every sync while they are held), and peers not
// heard of for long.
func (s *Store) expireGauges(now time.Time) {
	ttl := s.cfg.GaugeTTL
	for node, p := range s.peers {
		if now.Sub(p.seen) > max(10*s.cfg.StaleAfter, ttl) {
			s.dropPeer(node, p)
			continue
		}
		for key, g := range p.gauges {
			if now.Sub(g.seen) > ttl {
				s.mem.Absorb(static.Usage{Key: key, Policy: g.policy, At: now.UnixNano(), Cost: -g.n})
				delete(p.gauges, key)
			}
		}
	}
}

// Stats is a snapshot of a Store's sync counters.
type Stats struct {
	// Syncs and Errors count syncs and the failed ones.
	Syncs, Errors uint64
	// Sent and Received count key usages sent and absorbed.
	Sent, Received uint64
	// Dropped counts usages dropped at a bound (a transport failing for
	// long, too many peers).
	Dropped uint64
	// LastSync is the time of the last successful sync.
	LastSync time.Time
	// Stale is set while checks report ErrStale.
	Stale bool
	// Peers are the other sidecars heard of, by name.
	Peers []Peer
}

// Peer is what a Store knows of another sidecar.
type Peer struct {
	// Node names it.
	Node string
	// LastSeen is when its last batch was absorbed here.
	LastSeen time.Time
	// Lag is how old its last batch was when absorbed (by the two clocks).
	Lag time.Duration
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Stale = s.stale.Load() && s.checkStale()
	for node, p := range s.peers {
		st.Peers = append(st.Peers, Peer{Node: node, LastSeen: p.seen, Lag: max(0, p.seen.Sub(p.sent))})
	}
	sort.Slice(st.Peers, func(i, j int) bool { return st.Peers[i].Node < st.Peers[j].Node })
	return st
}
