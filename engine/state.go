package engine

import (
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/zkrules"
)

// State is the admin port's /v1/state.
type State struct {
	// Time is when the snapshot was taken (the engine's clock): rates
	// between two snapshots divide by its difference.
	Time     time.Time      `json:"time"`
	Ready    bool           `json:"ready"`
	Config   string         `json:"config_file"`
	Store    StoreState     `json:"store"`
	Adaptive *AdaptiveState `json:"adaptive,omitempty"`
	Queue    *QueueState    `json:"queue,omitempty"`
	Rules    []RuleState    `json:"rules"`
	// RulesSource describes where the rules come from, when not the file.
	RulesSource *RulesSourceState `json:"rules_source,omitempty"`
}

// StoreState describes the static store.
type StoreState struct {
	// Type is memory or redis.
	Type string `json:"type"`
	// Healthy is true only while the store decides checks itself: for
	// Redis, once it has answered and while its circuit is closed.
	Healthy bool `json:"healthy"`
	// Status says what the store is doing: "up"; with Redis also
	// "starting" (not answered yet), "down" (circuit open: checks follow the
	// rules' on_error) or "probing" (circuit half-open: a few trial checks
	// go to Redis, the rest follow on_error).
	Status string `json:"status"`
	// Keys, MaxKeys and Evictions describe the memory store (with Redis, the
	// local fallback's).
	Keys      int    `json:"keys"`
	MaxKeys   int    `json:"max_keys"`
	Evictions uint64 `json:"evictions"`
	// Restored counts evicted keys that came back with their remembered
	// usage.
	Restored uint64 `json:"restored"`
	// Breaker, RoundTrips, Errors and Fallbacks describe Redis.
	Breaker    string `json:"breaker,omitempty"`
	RoundTrips uint64 `json:"round_trips,omitempty"`
	Errors     uint64 `json:"errors,omitempty"`
	Fallbacks  uint64 `json:"fallbacks,omitempty"`
	// Consistency is the Redis store's default mode: exact or eventual.
	Consistency string `json:"consistency,omitempty"`
	// DenyCacheHits counts exact-mode checks denied from memory (a key
	// known to be over its limit until its reset), with no round trip.
	DenyCacheHits uint64 `json:"deny_cache_hits,omitempty"`
	// Fleet describes the eventual store's syncs (eventual or gossip).
	Fleet *FleetState `json:"fleet,omitempty"`
	// Regions describes this region's budgets of the global rules.
	Regions *RegionsState `json:"regions,omitempty"`
}

// FleetState describes the fleet store: its syncs, the peers heard of and,
// with gossip, the members.
type FleetState struct {
	Node     string      `json:"node"`
	Syncs    uint64      `json:"syncs"`
	Errors   uint64      `json:"errors"`
	Sent     uint64      `json:"sent"`
	Received uint64      `json:"received"`
	Dropped  uint64      `json:"dropped"`
	Stale    bool        `json:"stale"`
	LastSync time.Time   `json:"last_sync"`
	Peers    []PeerState `json:"peers"`
	// Members is the gossip membership as this sidecar sees it.
	Members []MemberState `json:"members,omitempty"`
}

// PeerState is another sidecar as the fleet store knows it; LagMillis is
// how old its last batch was when absorbed.
type PeerState struct {
	Node      string    `json:"node"`
	LastSeen  time.Time `json:"last_seen"`
	LagMillis float64   `json:"sync_lag_ms"`
}

// MemberState is a gossip member: alive, suspect, dead or left.
type MemberState struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"`
}

// RegionsState describes the regional budgets.
type RegionsState struct {
	Region string        `json:"region"`
	Home   string        `json:"home"`
	Syncs  uint64        `json:"syncs"`
	Errors uint64        `json:"errors"`
	Rules  []BudgetState `json:"rules"`
}

// BudgetState is one global rule's budget in this region.
type BudgetState struct {
	RuleID string `json:"rule_id"`
	Limit  int64  `json:"limit"`
	Budget int64  `json:"budget"`
	// Used is the most of the budget a key used within the last window:
	// room the other regions cannot take until the window passes.
	Used   int64 `json:"used"`
	Synced bool  `json:"synced"`
}

// AdaptiveState describes the adaptive limit.
type AdaptiveState struct {
	Algorithm string `json:"algorithm"`
	Limit     int    `json:"limit"`
	InFlight  int    `json:"inflight"`
	Admitted  uint64 `json:"admitted"`
	Rejected  uint64 `json:"rejected"`
	Dropped   uint64 `json:"dropped"`
	RTTMillis int64  `json:"last_window_rtt_ms"`
	// SelfDelayMillis is how much of the last window's round trips was
	// sluice's own wait for a CPU, taken out of its RTT (0 in a
	// middleware): a figure near the RTT says sluice, not the service, is
	// short of CPU.
	SelfDelayMillis float64 `json:"self_delay_ms"`
	// BaselineMillis is the service's RTT without a queue, as measured;
	// Probes and Stalls count the limiter's probes and stalls.
	BaselineMillis float64 `json:"baseline_rtt_ms"`
	Probes         uint64  `json:"probes"`
	Stalls         uint64  `json:"stalls"`
	Probing        bool    `json:"probing"`
	// Reason says why the limit last moved: grow, queue_in_service, drops,
	// stall, probe, sidecar_busy (cuts on latency cost goodput and were
	// undone), goodput_probe (a higher or lower limit was tried or kept),
	// start_gate (the first requests held to twice the concurrency the
	// service answered fast at), stall_over (the service answered what a
	// stall held: the limit is back where it stood), background_drops (cuts
	// on drops did not lower their share: the service's own failures).
	Reason string `json:"reason"`
	// Reverts counts runs of cuts on latency undone because they cost
	// goodput; UpProbes and UpGains count tries of a higher limit and those
	// kept; DownProbes and DownKept tries of a lower limit and those kept;
	// Floor is the limit goodput vouched for, Ceiling the one a down-probe
	// kept (0: none).
	Reverts    uint64 `json:"goodput_reverts"`
	UpProbes   uint64 `json:"up_probes"`
	UpGains    uint64 `json:"up_gains"`
	DownProbes uint64 `json:"down_probes"`
	DownKept   uint64 `json:"down_kept"`
	Floor      int    `json:"floor"`
	Ceiling    int    `json:"ceiling"`
	// Stuck counts requests in flight since before a stall, which no
	// longer count against the limit.
	Stuck int `json:"stuck"`
	// Classes describes the priority classes, highest first (none without).
	Classes []ClassState `json:"classes,omitempty"`
}

// ClassState describes one priority class.
type ClassState struct {
	Name     string  `json:"name"`
	Share    float64 `json:"share"`
	InFlight int     `json:"inflight"`
	// Admitted counts the class's requests admitted; Shed those answered
	// 503 (queue full, wait over, or pushed out by a higher class).
	Admitted uint64 `json:"admitted"`
	Shed     uint64 `json:"shed"`
}

// QueueState describes the wait queue.
type QueueState struct {
	Length    int    `json:"length"`
	Served    uint64 `json:"served"`
	Timeouts  uint64 `json:"timeouts"`
	Full      uint64 `json:"full"`
	Dropped   uint64 `json:"dropped"`
	Cancelled uint64 `json:"cancelled"`
	// ClosedLoop reports whether the queue holds a closed loop now (up to
	// queue.closed_loop_max_size); HoldTests counts the tests for one and
	// ClosedLoops those that found one.
	ClosedLoop  bool   `json:"closed_loop"`
	HoldTests   uint64 `json:"hold_tests"`
	ClosedLoops uint64 `json:"closed_loops"`
	// WaitingLoop reports whether the queue holds a closed loop within
	// queue.max_size now: clients that send again once answered, none
	// turned away, the loop not growing. While it is served 2,000 a
	// second or more, the adaptive limit judges it as a closed loop's.
	WaitingLoop bool `json:"waiting_loop"`
	// Pauses counts the service's pauses (nothing ended for far longer
	// than usual while requests waited) the queue held its arrivals
	// through instead of refusing them.
	Pauses uint64 `json:"pauses"`
}

// RuleState describes one rule and counts its decisions since start
// (counts survive reloads that keep the rule id).
type RuleState struct {
	RuleID     string `json:"rule_id"`
	Algorithm  string `json:"algorithm"`
	Limit      int64  `json:"limit"`
	WindowMS   int64  `json:"window_ms"`
	Mode       string `json:"mode"`
	Priority   int    `json:"priority"`
	Allowed    uint64 `json:"allowed"`
	Denied     uint64 `json:"denied"`
	WouldDeny  uint64 `json:"would_deny"`
	NotCounted uint64 `json:"not_counted"`
	// CostFrom is the rule's cost_from ("" without); CostCharged the cost
	// charged from responses so far, in the rule's units.
	CostFrom    string `json:"cost_from,omitempty"`
	CostCharged uint64 `json:"cost_charged,omitempty"`
}

// classStats returns the classes' states, nil without classes.
func (e *Engine) classStats() []adaptive.ClassStats {
	if e.part == nil {
		return nil
	}
	return e.part.Stats()
}

// State returns a snapshot of the engine.
func (e *Engine) State() State {
	rs := e.rules.Load()
	st := State{Time: e.clock.Now(), Ready: e.Ready(), Config: rs.cfg.File, Store: StoreState{Type: string(rs.cfg.Store.Type), Healthy: true, Status: "up"}}
	if mem := e.memory; mem != nil || e.share.Fleet != nil {
		if e.share.Fleet != nil && e.redis == nil {
			mem = e.share.Fleet.Memory() // gossip: the fleet's view is the store
		}
		ms := mem.Stats()
		st.Store.Keys, st.Store.MaxKeys, st.Store.Evictions, st.Store.Restored = ms.Keys, ms.MaxKeys, ms.Evictions, ms.Restored
	}
	if e.redis != nil {
		rst := e.redis.Stats()
		st.Store.Breaker, st.Store.RoundTrips, st.Store.Errors = rst.Breaker, rst.RoundTrips, rst.Errors
		switch {
		case !e.Ready():
			st.Store.Status = "starting"
		case rst.Breaker == "open":
			st.Store.Status = "down"
		case rst.Breaker == "half-open":
			st.Store.Status = "probing"
		}
		st.Store.Healthy = st.Store.Status == "up"
		if f, ok := e.store.(*static.Failover); ok {
			st.Store.Fallbacks = f.Fallbacks()
		}
	}
	e.shareState(&st.Store, rs.cfg)
	if e.sourceState != nil {
		st.RulesSource = e.sourceState()
	}
	if e.limiter != nil {
		ls := e.limiter.Stats()
		st.Adaptive = &AdaptiveState{Algorithm: ls.Algorithm, Limit: ls.Limit, InFlight: ls.InFlight, Admitted: ls.Admitted,
			Rejected: ls.Rejected, Dropped: ls.Dropped, RTTMillis: ls.Last.RTT.Milliseconds(),
			SelfDelayMillis: float64(ls.Last.SelfDelay.Microseconds()) / 1000,
			BaselineMillis:  float64(ls.Baseline.Microseconds()) / 1000, Probes: ls.Probes, Stalls: ls.Stalls, Probing: ls.Probing,
			Reason: ls.Reason.String(), Reverts: ls.Reverts, UpProbes: ls.UpProbes, UpGains: ls.UpGains,
			DownProbes: ls.DownProbes, DownKept: ls.DownKept, Floor: ls.Floor, Ceiling: ls.Ceiling, Stuck: ls.Stuck}
		for i, c := range e.classStats() {
			st.Adaptive.Classes = append(st.Adaptive.Classes, ClassState{Name: c.Name, Share: c.Share, InFlight: c.InFlight,
				Admitted: c.Admitted, Shed: e.shedByClass[i].Load()})
		}
		qs := e.queue.Stats()
		st.Queue = &QueueState{Length: qs.Length, Served: qs.Served, Timeouts: qs.Timeouts, Full: qs.Full, Dropped: qs.Dropped, Cancelled: qs.Cancelled,
			ClosedLoop: qs.ClosedLoop, HoldTests: qs.HoldTests, ClosedLoops: qs.ClosedLoops, Pauses: qs.Pauses, WaitingLoop: qs.WaitingLoop}
	}
	for _, r := range rs.rules {
		c := r.counters
		st.Rules = append(st.Rules, RuleState{RuleID: r.id, Algorithm: r.policy.Algorithm.String(), Limit: r.nominal,
			WindowMS: r.window.Milliseconds(), Mode: r.mode.String(), Priority: r.priority, Allowed: c.allowed.Load(),
			Denied: c.denied.Load(), WouldDeny: c.wouldDeny.Load(), NotCounted: c.notCounted.Load()})
		if r.cost != nil {
			last := &st.Rules[len(st.Rules)-1]
			last.CostFrom, last.CostCharged = r.cost.from.String(), c.costCharged.Load()
		}
	}
	return st
}

// RulesSourceState is /v1/state's rules_source: where the rules come from
// and how that source is doing.
type RulesSourceState struct {
	// Type is "zookeeper".
	Type    string   `json:"type"`
	Servers []string `json:"servers"`
	Path    string   `json:"path"`
	// Cache is the cache file, "" when none; FromCache is true while the
	// rules in force are the cache's (ZooKeeper has not answered since
	// start).
	Cache     string `json:"cache,omitempty"`
	FromCache bool   `json:"from_cache,omitempty"`
	zkrules.State
}

// shareState fills the sharing parts of the store's state.
func (e *Engine) shareState(st *StoreState, cfg *config.Config) {
	if cfg.Store.Type == config.StoreRedis {
		st.Consistency = string(cfg.Store.Redis.Consistency)
	}
	if e.share.Deny != nil {
		st.DenyCacheHits = e.share.Deny.Hits()
	}
	if f := e.share.Fleet; f != nil {
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
		if e.share.Gossip != nil {
			for _, m := range e.share.Gossip.Members() {
				st.Fleet.Members = append(st.Fleet.Members, MemberState(m))
			}
		}
	}
	if b := e.share.Budgets; b != nil {
		bs := b.Stats()
		st.Regions = &RegionsState{Region: bs.Region, Home: bs.Home, Syncs: bs.Syncs, Errors: bs.Errors, Rules: []BudgetState{}}
		for _, r := range bs.Rules {
			st.Regions.Rules = append(st.Regions.Rules, BudgetState{RuleID: r.ID, Limit: r.Limit, Budget: r.Budget, Used: r.Used, Synced: r.Synced})
		}
	}
}
