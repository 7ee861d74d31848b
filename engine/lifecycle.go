package engine

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine/internal/build"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
)

// Engine decides requests. It is safe for concurrent use; Reload swaps its
// rules while requests are in flight. Start begins its background work (the
// sweep of idle keys, waiting for Redis to answer) and Close ends it.
type Engine struct {
	store static.Store
	// observe is Options.Observe (nil: nothing observes decisions).
	observe func(Observations)
	// chargeFails counts failed charges since the last log line about
	// them, chargeLogged is when that was (Unix ns).
	chargeFails  atomic.Int64
	chargeLogged atomic.Int64
	memory       *static.Memory // the embedded store (or the local fallback)
	// storeReadsClock: the store is the memory store on the engine's
	// clock, so a check's result tells when it was made (static.Result.At)
	// and timing it takes one reading of the clock, not two.
	storeReadsClock bool
	redis           *redisstore.Store // nil unless the store is Redis
	share           *build.Stores     // every store, with the deny cache, fleet, gossip and regions
	// shareCancel ends the fleet's and the regions' syncs.
	shareCancel context.CancelFunc
	limiter     *adaptive.Limiter // nil when adaptive is off
	// minLimit and maxLimit are the limiter's bounds as built (a reload
	// does not change them).
	minLimit, maxLimit int
	part               *adaptive.Partitioned // the classes' view of limiter; nil without classes
	classes            []string              // the classes the limiter was partitioned into, highest first
	// shedByClass counts the requests of each class shed.
	shedByClass []atomic.Uint64
	queue       *queue.Queue[adaptive.Permit]
	quota       quotaLines // requests waiting for a rule's quota (max_wait)
	rules       atomic.Pointer[ruleSet]
	metrics     *Metrics
	log         *slog.Logger
	clock       sluice.Clock
	ready       atomic.Bool
	// pendingRules holds readiness back while the rules source has not
	// delivered a rule set (and no cache stood in for it).
	pendingRules atomic.Bool
	// sourceState describes the rules source, nil without one; set
	// before the engine serves.
	sourceState func() *RulesSourceState

	scratch sync.Pool // *scratch

	stop      chan struct{}
	started   atomic.Bool
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Options are the parts an Engine is built from; New fills the missing ones.
type Options struct {
	// Store checks static limits. Default: what cfg.Store says, the embedded
	// memory store or Redis behind a static.Failover that applies each
	// rule's on_error.
	Store static.Store
	// Memory is the embedded store behind Store (for Sweep and stats).
	Memory *static.Memory
	// Logger logs decisions worth logging (shadow denials, reloads).
	Logger *slog.Logger
	// Registerer receives the engine's metrics, e.g. the application's own
	// registry; default a registry of the engine's own. A registry that
	// already holds sluice's metric names makes New fail.
	Registerer prometheus.Registerer
	// Clock is read for latencies; default the system clock.
	Clock sluice.Clock
	// SelfDelay, when set, is taken out of the adaptive limit's round trips
	// as the process's own wait for a CPU (adaptive.Config.SelfDelay): set
	// it in a proxy whose service runs apart (sluice run does), not in a
	// middleware in front of a handler of the same process.
	SelfDelay func() time.Duration
	// Observe, when set, is called once on each request the engine decides
	// (not dry runs) with the matching rules' own decisions, on the
	// request's goroutine: what `sluice replay` reports per rule and key.
	// It must be quick and must not keep the Observations past the call.
	Observe func(Observations)
}

// Observations are the matching rules' own decisions on one request, for
// Options.Observe, valid only during the call: views of the request's
// working memory, so that observing copies nothing.
type Observations struct {
	// Admitted: the request passed every rule (all-or-nothing: when not,
	// no rule's quota was taken).
	Admitted  bool
	rules     []*rule
	limits    []static.Limit
	decisions []sluice.Decision
}

// Len is the number of matching rules.
func (o Observations) Len() int { return len(o.rules) }

// Rule is the id of matching rule i.
func (o Observations) Rule(i int) string { return o.rules[i].id }

// Index is rule i's position in the configuration's rules
// (Config().Rules): an observer's index of its rules.
func (o Observations) Index(i int) int { return o.rules[i].index }

// Key is rule i's limit's key, "{<identifier>}:<rule id>"; valid only
// during the call (strings.Clone it to keep it).
func (o Observations) Key(i int) string { return o.limits[i].Key }

// Decision is rule i's own decision: allowed or not, its limit and what
// it left. It points into the request's working memory.
func (o Observations) Decision(i int) *sluice.Decision { return &o.decisions[i] }

// Shadow reports whether rule i was advisory for this request (mode
// shadow, or elastic while the service had room): a denial did not
// refuse it.
func (o Observations) Shadow(i int) bool { return o.limits[i].Shadow }

// sameClock reports whether a and b are one clock (a Clock of a type that
// cannot be compared is never the same as another).
func sameClock(a, b sluice.Clock) bool {
	t := reflect.TypeOf(a)
	return t != nil && t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// New builds an Engine for cfg from opts. cfg may come from config.Load or
// be built in Go: New works on a copy with the defaults filled in and
// validates it, so a bad or incomplete configuration is an error, never a
// panic. With a Redis store it opens the client (no round trip yet); the
// engine is ready once Start has seen Redis answer.
func New(cfg *config.Config, opts Options) (*Engine, error) {
	if cfg == nil {
		return nil, errors.New("sidecar: nil configuration")
	}
	cfg = cfg.Clone()
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{log: opts.Logger, clock: opts.Clock, stop: make(chan struct{}), observe: opts.Observe}
	e.scratch.New = newScratch
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.clock == nil {
		e.clock = sluice.NewSystemClock()
	}
	stores, err := build.NewStores(cfg, opts.Store, opts.Memory, e.clock, e.log)
	if err != nil {
		return nil, err
	}
	e.share, e.store, e.memory, e.redis = stores, stores.Store, stores.Memory, stores.Redis
	e.storeReadsClock = e.memory != nil && e.store == static.Store(e.memory) && sameClock(e.memory.Clock(), e.clock)
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, e.closeOnError(err)
	}
	e.metrics = m
	busySaid := false // guarded by the limiter's lock
	gate, err := build.NewGate(cfg, build.GateOptions{Clock: e.clock, SelfDelay: opts.SelfDelay,
		OnReason: func(why adaptive.Reason, limit int) {
			if why == adaptive.ReasonBusy && !busySaid {
				busySaid = true
				e.log.Warn("adaptive: cuts of the limit on latency cost goodput and were undone: the latency rose outside the service "+
					"(sluice, its clients or a CPU they share with the service are short of CPU), so the limit holds instead of refusing; "+
					"said once, see /v1/state adaptive.reason and goodput_reverts", "limit", limit)
			}
		}})
	if err != nil {
		m.unregister()
		return nil, e.closeOnError(err)
	}
	if gate != nil {
		e.limiter, e.part, e.classes, e.queue = gate.Limiter, gate.Part, gate.Classes, gate.Queue
		e.minLimit, e.maxLimit = cfg.Adaptive.MinLimit, cfg.Adaptive.MaxLimit
		e.shedByClass = make([]atomic.Uint64, len(gate.Classes))
	}
	if err := e.Reload(cfg); err != nil {
		m.unregister()
		return nil, e.closeOnError(err)
	}
	if err := e.metrics.attach(e); err != nil {
		m.unregister()
		return nil, e.closeOnError(err)
	}
	return e, nil
}

func (e *Engine) closeOnError(err error) error {
	_ = e.closeShared()
	return err
}

// closeShared closes what the stores opened.
func (e *Engine) closeShared() error { return e.share.Close() }

// SweepInterval is how often a started Engine drops idle keys from its
// memory store.
const SweepInterval = 10 * time.Second

// Start begins the engine's background work: a periodic sweep of idle keys
// and, with Redis, loading the scripts until Redis answers (then the engine
// is ready). It returns at once, but for one round trip to the home region
// (bounded by a second) when there are global rules, so that their first
// budgets are their region's; calling it twice does nothing.
func (e *Engine) Start() {
	if !e.started.CompareAndSwap(false, true) {
		return
	}
	e.wg.Add(1)
	go e.sweep()
	if e.redis != nil {
		e.wg.Add(1)
		go e.waitForRedis()
	}
	e.startSharing()
}

// Close stops the background work and closes the Redis client the engine
// opened. Requests still in flight may finish; new ones keep working on the
// memory store or the failure policy. It is safe to call more than once and
// from several goroutines: every call waits for the first to finish and
// returns its result.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.stop)
		if e.shareCancel != nil {
			e.shareCancel()
		}
		e.wg.Wait()
		e.closeErr = e.closeShared()
	})
	return e.closeErr
}

func (e *Engine) sweep() {
	defer e.wg.Done()
	t := time.NewTicker(SweepInterval)
	defer t.Stop()
	warned := false // warnSelfDelay logs once
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.Sweep()
			if !warned {
				warned = e.warnSelfDelay()
			}
		}
	}
}

// warnSelfDelay logs, and reports, when sluice's own wait for a CPU made up
// at least half of the latest window's round trips (and a millisecond):
// sluice, not the service, is the bottleneck. The adaptive limit already
// takes that wait out of what it measures; the log tells the operator that
// sluice needs more CPU.
func (e *Engine) warnSelfDelay() bool {
	if e.limiter == nil {
		return false
	}
	last := e.limiter.Stats().Last
	if last.SelfDelay < time.Millisecond || last.SelfDelay < last.RTT {
		return false
	}
	e.log.Warn("sluice is short of CPU: its own wait for a CPU is half or more of each upstream round trip; give it more CPU (its own core, a higher quota). The adaptive limit takes the wait out of its measurements, so it does not shed for it.",
		"self_delay", last.SelfDelay, "upstream_rtt", last.RTT+last.SelfDelay)
	return true
}

// waitForRedis loads the scripts (which proves Redis answers) and marks the
// engine ready, retrying every second until it works or the engine closes.
func (e *Engine) waitForRedis() {
	defer e.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := e.redis.Load(ctx)
		cancel()
		if err == nil {
			e.ready.Store(true)
			e.log.Info("redis answered; ready")
			return
		}
		e.log.Warn("redis not answering yet; checks use the failure policy", "error", err.Error())
		select {
		case <-e.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// Reload fills cfg's defaults (on a copy), validates it, compiles its rules
// and swaps them in atomically; a bad cfg is an error and changes nothing. Rules that did not change keep their counters:
// their keys and policies are the same. Changes to the store, adaptive or
// queue sections need a restart and are reported in the returned error's
// absence only as a log line.
func (e *Engine) Reload(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("sidecar: nil configuration")
	}
	cfg = cfg.Clone()
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	rs, err := compile(cfg, e.metrics)
	if err != nil {
		return err
	}
	old := e.rules.Load()
	if old != nil {
		o, n := old.cfg, cfg
		if o.Store.Type != n.Store.Type || !o.Adaptive.Equal(n.Adaptive) || o.Queue.Order != n.Queue.Order ||
			o.Queue.MaxWait != n.Queue.MaxWait || *o.Queue.MaxSize != *n.Queue.MaxSize ||
			(o.Queue.Fairness == config.FairnessNone) != (n.Queue.Fairness == config.FairnessNone) {
			e.log.Warn("reload: store, adaptive and queue settings take effect at restart; rules, identity, class matches and the fairness key reloaded")
		}
		if !slices.Equal(n.Adaptive.ClassNames(), e.classes) {
			// The limiter keeps the classes it was partitioned into:
			// requests are still sorted into those.
			rs.classes, rs.defaultClass = old.classes, old.defaultClass
		}
	}
	e.bindSharing(rs)
	e.rules.Store(rs)
	if f, ok := e.store.(*static.Failover); ok {
		f.ForgetShares() // the old rules' policies are gone
	}
	if e.redis == nil {
		e.ready.Store(true) // with Redis: once Redis answered (Start)
	}
	return nil
}

// Ready reports whether rules are loaded and the store answered once.
func (e *Engine) Ready() bool { return e.ready.Load() && !e.pendingRules.Load() }

// Sweep drops idle keys from the embedded store; the sidecar calls it
// periodically.
func (e *Engine) Sweep() {
	if e.memory != nil {
		e.memory.Sweep()
	}
	if e.share.Fleet != nil {
		e.share.Fleet.Memory().Sweep()
	}
}

// Metrics returns the engine's metrics.
func (e *Engine) Metrics() *Metrics { return e.metrics }

// Config returns the configuration in force (defaults filled). It is
// shared: callers must not modify it.
func (e *Engine) Config() *config.Config { return e.rules.Load().cfg }

// Logger returns the engine's logger.
func (e *Engine) Logger() *slog.Logger { return e.log }

// CountReload counts a reload of the rules, successful or not
// (sluice_config_reloads_total), for the faces that reload.
func (e *Engine) CountReload(ok bool) {
	result := "failure"
	if ok {
		result = "success"
	}
	e.metrics.reloads.WithLabelValues(result).Inc()
}

// SetRulesSource tells the engine its rules come from a source described
// by state (for /v1/state and the metrics); with pending, the engine is
// not ready until RulesLoaded. Call it before the engine serves.
func (e *Engine) SetRulesSource(state func() *RulesSourceState, pending bool) {
	e.sourceState = state
	e.pendingRules.Store(pending)
}

// RulesLoaded tells the engine its rules source delivered a rule set.
func (e *Engine) RulesLoaded() { e.pendingRules.Store(false) }

// startSharing begins the syncs.
func (e *Engine) startSharing() {
	if e.share.Fleet == nil && e.share.Budgets == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.shareCancel = cancel
	if f := e.share.Fleet; f != nil {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); f.Run(ctx) }()
	}
	if b := e.share.Budgets; b != nil {
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
