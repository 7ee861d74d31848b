package engine

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/queue"
)

// Metrics are the sidecar's Prometheus metrics, on a registry of their own
// (never the global one). Labels are rule ids and fixed words: never a user
// id, an address or a key. Per-rule counts are atomics read at scrape time,
// so the request path touches no label map.
type Metrics struct {
	// Gatherer serves the metrics (promhttp.HandlerFor): the registry they
	// were registered on, when it is also a Gatherer, else nil.
	Gatherer prometheus.Gatherer

	reg prometheus.Registerer

	shed            atomic.Uint64
	storeErrors     prometheus.Counter
	storeLatency    *latencyHistogram
	upstreamLatency *latencyHistogram
	reloads         *prometheus.CounterVec
	// deadlineRefused counts requests refused for their client's deadline,
	// by where: arrival (it could not be served in time), queue (it
	// passed while waiting); deadlineSpared the service time they did not
	// take (the service's median each); deadlineBad header values that
	// could not be read (the request went on without a deadline).
	deadlineRefused *prometheus.CounterVec
	deadlineSpared  prometheus.Counter
	deadlineBad     prometheus.Counter

	collector prometheus.Collector // the engine's, once attached

	mu    sync.Mutex
	rules map[string]*ruleCounters
	order []*ruleCounters // in the order rules first appeared
}

// ruleCounters are one rule's counts, kept across reloads.
type ruleCounters struct {
	id                                                string
	allowed, denied, wouldDeny, notCounted, nearLimit atomic.Uint64
	// envoy, for a descriptor rule, counts hits as envoyproxy/ratelimit's
	// per-descriptor stats do, under its labels (nil for other rules).
	envoy atomic.Pointer[envoyStats]
	// costCharged is the cost charged from responses (cost_from), in the
	// rule's units; costUnread counts responses whose cost could not be
	// read, by reason (the rule's cost_default was charged).
	costCharged atomic.Uint64
	costUnread  [numCostReasons]atomic.Uint64
	costFrom    atomic.Bool // the rule reads its cost from responses: its cost series are exported
}

// envoyStats are a descriptor rule's hits, as envoyproxy/ratelimit counts
// them per descriptor (ratelimit.service.rate_limit.<domain>.<key1>...):
// total, over the limit, near it, within it, and refused in shadow mode,
// under the configured labels, and with detailed_metric or value_to_metric
// under the request's (series).
type envoyStats struct {
	domain, key1, key2 string
	envoyCounts
	// labels describes the first two entries' labels when they come from
	// the request; zero when they are the configured ones.
	labels envoyLabelSpec

	mu     sync.Mutex
	series map[[2]string]*envoyCounts // by key1, key2; at most config.MaxMetricSeries
}

// envoyCounts are one series' counters.
type envoyCounts struct {
	total, over, near, within, shadow atomic.Uint64
}

// envoyLabelSpec says, for the first two entries of a rule's descriptor,
// which take the request's value in the labels: all of them with
// detailed_metric (but a share_threshold pattern, which stays), those with
// value_to_metric otherwise.
type envoyLabelSpec struct {
	fromRequest [2]bool
}

func (l envoyLabelSpec) dynamic() bool { return l.fromRequest[0] || l.fromRequest[1] }

// countsFor returns the series of one call: the configured labels', or the
// one its entries name (created up to config.MaxMetricSeries, past which
// the configured labels' counts take it).
func (st *envoyStats) countsFor(entries []DescriptorEntry) *envoyCounts {
	if !st.labels.dynamic() || len(entries) == 0 {
		return &st.envoyCounts
	}
	k := [2]string{st.key1, st.key2}
	for i := range k {
		if i < len(entries) && st.labels.fromRequest[i] {
			k[i] = entries[i].Key + "_" + metricValue(entries[i].Value)
		}
	}
	if k[0] == st.key1 && k[1] == st.key2 {
		return &st.envoyCounts
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	c := st.series[k]
	if c == nil {
		if len(st.series) >= config.MaxMetricSeries {
			return &st.envoyCounts
		}
		if st.series == nil {
			st.series = make(map[[2]string]*envoyCounts)
		}
		c = new(envoyCounts)
		st.series[k] = c
	}
	return c
}

// metricValue is a request's value as a label: itself, or, past
// MaxIdentifierBytes, its digest (as in keys), so that a client cannot make
// a series' labels, and the 1,000 series of a rule, large.
func metricValue(v string) string {
	if len(v) > MaxIdentifierBytes {
		return hashIdentifier(v)
	}
	return v
}

// countEnvoy adds one descriptor's hits to r's envoy stats: within the
// limit (and the part past the near threshold, near), or over it (in
// shadow mode, shadow too). used is the quota used after the hits when
// admitted; ratio is rls.near_limit_ratio; entries are the request's
// descriptor (its values label the series with detailed_metric or
// value_to_metric).
func (r *ruleCounters) countEnvoy(hits, limit, used int64, allowed, shadowDenied bool, ratio float64, entries []DescriptorEntry) {
	stats := r.envoy.Load()
	if stats == nil || hits <= 0 {
		return
	}
	st := stats.countsFor(entries)
	st.total.Add(uint64(hits))
	switch {
	case allowed:
		st.within.Add(uint64(hits))
		nearT := int64(math.Floor(float64(limit) * ratio))
		if past := used - max(nearT, used-hits); past > 0 {
			st.near.Add(uint64(past))
		}
	default:
		st.over.Add(uint64(hits))
		if shadowDenied {
			st.shadow.Add(uint64(hits))
		}
	}
}

// envoyLabels are envoyproxy/ratelimit's Prometheus labels (its default
// statsd mapping): the domain and the first two entries of the descriptor
// ("key" or "key_value").
var envoyLabels = []string{"domain", "key1", "key2"}

// newMetrics registers the sidecar's metrics on reg (a new registry of
// their own when nil). A name reg already holds (another engine's, or the
// application's own sluice_* metric) is an error, not a panic.
func newMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		reg: reg,
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Checks the store could not decide (Redis down, timed out, circuit open); decided by the rules' failure policies.",
		}),
		storeLatency: newLatencyHistogram("sluice_store_latency_seconds", "Time to check a request's static limits.",
			[]float64{.00001, .00005, .0001, .0005, .001, .0025, .005, .01, .025, .05, .1}),
		upstreamLatency: newLatencyHistogram("sluice_upstream_latency_seconds", "Time from admission to the end of the upstream's response.",
			prometheus.DefBuckets),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Configuration reloads by result: success, failure (the old rules stay).",
		}, []string{"result"}),
		deadlineRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_deadline_refused_total",
			Help: "Requests refused (503, reason deadline) because their client's deadline would pass first, by where: arrival (the expected wait plus the service's median exceeded it), queue (it passed while waiting).",
		}, []string{"where"}),
		deadlineSpared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_deadline_spared_seconds_total",
			Help: "Service time not spent on requests refused for their deadline: the service's median round trip for each.",
		}),
		deadlineBad: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_deadline_invalid_total",
			Help: "Deadline header values that could not be read (the request went on without that deadline).",
		}),
		rules: map[string]*ruleCounters{},
	}
	// Both results exist from the start, at 0: a rate over them needs no
	// first reload.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.deadlineRefused.WithLabelValues("arrival")
	m.deadlineRefused.WithLabelValues("queue")
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.Gatherer = g
	}
	if err := register(reg, m.storeErrors, m.storeLatency, m.upstreamLatency, m.reloads, m.deadlineRefused, m.deadlineSpared, m.deadlineBad); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers every collector or, on the first failure, none.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return fmt.Errorf("metrics: the registry already holds sluice's metrics (another engine, or a sluice_* metric of its own): %w", err)
			}
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// unregister removes the metrics from their registry (when New fails after
// registering them).
func (m *Metrics) unregister() {
	m.reg.Unregister(m.storeErrors)
	m.reg.Unregister(m.storeLatency)
	m.reg.Unregister(m.upstreamLatency)
	m.reg.Unregister(m.reloads)
	if m.collector != nil {
		m.reg.Unregister(m.collector)
	}
}

func (m *Metrics) ruleCounters(id string) *ruleCounters {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.rules[id]; ok {
		return c
	}
	c := &ruleCounters{id: id}
	m.rules[id] = c
	m.order = append(m.order, c)
	return c
}

func (m *Metrics) allRules() []*ruleCounters {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*ruleCounters(nil), m.order...)
}

// engineCollector exports state held elsewhere, read at scrape time.
type engineCollector struct {
	e                                                     *Engine
	requests, nearLimit                                   *prometheus.Desc
	costCharged, costUnread                               *prometheus.Desc
	envoy                                                 [5]*prometheus.Desc // total_hits, over, near, within, shadow
	limit, inflight, queueLen, queueWait, keys, evict     *prometheus.Desc
	restored                                              *prometheus.Desc
	classRequests, classInflight                          *prometheus.Desc
	denyHits, fleetSyncs, fleetPeers, fleetLag            *prometheus.Desc
	fleetStale, budget, budgetUsed                        *prometheus.Desc
	srcConnected, srcRefused, srcUpdates                  *prometheus.Desc
	minLimit, maxLimit                                    *prometheus.Desc
	limitReason, goodputReverts, upProbes, downProbes     *prometheus.Desc
	selfDelay, closedLoop, waitingLoop, holdTests, pauses *prometheus.Desc
}

func (m *Metrics) attach(e *Engine) error {
	c := &engineCollector{
		e: e,
		requests: prometheus.NewDesc("sluice_requests_total",
			"Requests by rule and decision: allowed, denied, would_deny (shadow or elastic rule over its quota, admitted), not_counted (the rule allowed but another denied), shed (rule adaptive_concurrency).",
			[]string{"rule", "decision"}, nil),
		nearLimit: prometheus.NewDesc("sluice_rule_near_limit_total", "Admissions that left a rule with less than 10% of its quota.", []string{"rule"}, nil),
		costCharged: prometheus.NewDesc("sluice_cost_charged_total",
			"Cost charged to a cost_from rule's keys from its responses (or its cost_default), in the rule's units.", []string{"rule"}, nil),
		costUnread: prometheus.NewDesc("sluice_cost_unread_total",
			"Responses whose cost a cost_from rule could not read, by reason: missing, invalid, too_large, cut (charged cost_default instead).", []string{"rule", "reason"}, nil),
		envoy: [5]*prometheus.Desc{
			prometheus.NewDesc("ratelimit_service_rate_limit_total_hits", "envoyproxy/ratelimit's name: hits of a descriptor rule.", envoyLabels, nil),
			prometheus.NewDesc("ratelimit_service_rate_limit_over_limit", "envoyproxy/ratelimit's name: hits of a descriptor rule over its limit.", envoyLabels, nil),
			prometheus.NewDesc("ratelimit_service_rate_limit_near_limit", "envoyproxy/ratelimit's name: admitted hits past rls.near_limit_ratio of the limit.", envoyLabels, nil),
			prometheus.NewDesc("ratelimit_service_rate_limit_within_limit", "envoyproxy/ratelimit's name: hits of a descriptor rule within its limit.", envoyLabels, nil),
			prometheus.NewDesc("ratelimit_service_rate_limit_shadow_mode", "envoyproxy/ratelimit's name: hits over the limit of a shadow descriptor rule (not refused).", envoyLabels, nil),
		},
		limit:    prometheus.NewDesc("sluice_adaptive_limit", "The adaptive concurrency limit.", nil, nil),
		minLimit: prometheus.NewDesc("sluice_adaptive_min_limit", "The adaptive limit's lower bound (adaptive.min_limit): a limit held there means the service is overloaded at its floor.", nil, nil),
		maxLimit: prometheus.NewDesc("sluice_adaptive_max_limit", "The adaptive limit's upper bound (adaptive.max_limit).", nil, nil),
		limitReason: prometheus.NewDesc("sluice_adaptive_limit_reason",
			"1 for why the adaptive limit last moved: grow, queue_in_service, drops, stall, probe, sidecar_busy (cuts on latency cost goodput and were undone), goodput_probe, start_gate (the first requests held to what the service answered fast at), stall_over (the service answered what a stall held), background_drops (cuts on drops did not lower their share: the service's own failures); 0 for the others.", []string{"reason"}, nil),
		goodputReverts: prometheus.NewDesc("sluice_adaptive_goodput_reverts_total",
			"Runs of cuts on latency undone because they cost goodput: the latency rose outside the service (a busy sidecar or client, a CPU shared with the service).", nil, nil),
		upProbes: prometheus.NewDesc("sluice_adaptive_up_probes_total",
			"Tries of a higher adaptive limit, by result: kept (goodput rose with it, or demand fit under it) or undone.", []string{"result"}, nil),
		downProbes: prometheus.NewDesc("sluice_adaptive_down_probes_total",
			"Tries of a lower adaptive limit while demand exceeded it, by result: kept (goodput rose at it: what it cut was a queue in the service, and it stands as a ceiling for a while) or undone.", []string{"result"}, nil),
		selfDelay: prometheus.NewDesc("sluice_adaptive_self_delay_seconds",
			"How long sluice's own work waited for a CPU, on average, in the last sample window: taken out of the round trips the adaptive limit measures (sluice run only). Near the round trip itself, sluice, not the service, is short of CPU.", nil, nil),
		closedLoop: prometheus.NewDesc("sluice_queue_closed_loop",
			"1 while the queue holds a closed loop (clients that send again as soon as they are answered) up to queue.closed_loop_max_size instead of refusing it.", nil, nil),
		waitingLoop: prometheus.NewDesc("sluice_queue_waiting_loop",
			"1 while the queue holds a closed loop within queue.max_size (clients that send again as soon as they are answered, none turned away, the loop not growing); served 2,000 a second or more, the adaptive limit judges it as a closed loop's.", nil, nil),
		holdTests: prometheus.NewDesc("sluice_queue_hold_tests_total",
			"Tests of whether a queue that sheds more than it serves holds a closed loop, by result: closed_loop, open_loop.", []string{"result"}, nil),
		pauses: prometheus.NewDesc("sluice_queue_pauses_total",
			"Pauses of the service (nothing ended for far longer than usual while requests waited) that the queue held its arrivals through, up to queue.closed_loop_max_size and each within max_wait, instead of refusing them or dropping them after.", nil, nil),
		inflight:  prometheus.NewDesc("sluice_inflight", "Requests admitted by the adaptive limit and not yet finished.", nil, nil),
		queueLen:  prometheus.NewDesc("sluice_queue_length", "Requests waiting for the adaptive limit.", nil, nil),
		queueWait: prometheus.NewDesc("sluice_queue_wait_seconds", "Time requests waited in the queue.", nil, nil),
		keys:      prometheus.NewDesc("sluice_store_keys", "Keys held by the in-memory store.", nil, nil),
		evict:     prometheus.NewDesc("sluice_store_evictions_total", "Keys the in-memory store evicted at its cap while still in use.", nil, nil),
		restored: prometheus.NewDesc("sluice_store_restored_total",
			"Evicted keys that came back and started from their remembered usage, not afresh.", nil, nil),
		classRequests: prometheus.NewDesc("sluice_class_requests_total",
			"Requests that reached the adaptive gate, by priority class (adaptive.classes) and decision: admitted, shed.", []string{"class", "decision"}, nil),
		classInflight: prometheus.NewDesc("sluice_class_inflight", "Requests admitted and not yet finished, by priority class.", []string{"class"}, nil),
		denyHits: prometheus.NewDesc("sluice_store_deny_cache_hits_total",
			"Exact-mode checks denied from memory, with no round trip: the key was known to be over its limit until its reset.", nil, nil),
		fleetSyncs: prometheus.NewDesc("sluice_fleet_syncs_total",
			"Syncs of the eventual store with the fleet (Redis stream or gossip), by result: ok, error.", []string{"result"}, nil),
		fleetPeers: prometheus.NewDesc("sluice_fleet_peers", "Other sidecars whose usage this one absorbed.", nil, nil),
		fleetLag: prometheus.NewDesc("sluice_fleet_sync_lag_seconds",
			"How old the oldest peer's last batch was when absorbed: how far behind the fleet this sidecar's view can be.", nil, nil),
		fleetStale: prometheus.NewDesc("sluice_fleet_stale",
			"1 while the eventual store has not synced for too long and checks follow the rules' on_error.", nil, nil),
		budget: prometheus.NewDesc("sluice_region_budget",
			"This region's share of a global rule's limit (scope: global).", []string{"rule"}, nil),
		budgetUsed: prometheus.NewDesc("sluice_region_used",
			"The most of its budget a key of a global rule used here within the last window: room other regions cannot take until it passes.", []string{"rule"}, nil),
		srcConnected: prometheus.NewDesc("sluice_rules_source_connected",
			"1 while the rules source (ZooKeeper) has a session; 0 while the last good rules stay in force without one.", nil, nil),
		srcRefused: prometheus.NewDesc("sluice_rules_source_refused",
			"Rules (znodes) the source holds now that were refused as invalid; a refused rule's last good version stays in force.", nil, nil),
		srcUpdates: prometheus.NewDesc("sluice_rules_source_updates_total", "Rule sets from the rules source applied.", nil, nil),
	}
	if err := register(m.reg, c); err != nil {
		return err
	}
	m.collector = c
	return nil
}

// Describe implements prometheus.Collector.
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.envoy {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.requests, c.nearLimit, c.costCharged, c.costUnread, c.limit, c.inflight, c.queueLen, c.queueWait, c.keys, c.evict, c.restored,
		c.classRequests, c.classInflight, c.denyHits, c.fleetSyncs, c.fleetPeers, c.fleetLag, c.fleetStale, c.budget,
		c.srcConnected, c.srcRefused, c.srcUpdates, c.minLimit, c.maxLimit, c.limitReason, c.goodputReverts, c.upProbes, c.downProbes,
		c.selfDelay, c.closedLoop, c.waitingLoop, c.holdTests, c.pauses} {
		ch <- d
	}
}

// collectEnvoy sends one envoyproxy/ratelimit series.
func (c *engineCollector) collectEnvoy(ch chan<- prometheus.Metric, domain, key1, key2 string, st *envoyCounts) {
	for i, v := range []uint64{st.total.Load(), st.over.Load(), st.near.Load(), st.within.Load(), st.shadow.Load()} {
		ch <- prometheus.MustNewConstMetric(c.envoy[i], prometheus.CounterValue, float64(v), domain, key1, key2)
	}
}

// Collect implements prometheus.Collector.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	count := func(v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(v), labels...)
	}
	for _, r := range e.metrics.allRules() {
		count(r.allowed.Load(), r.id, "allowed")
		count(r.denied.Load(), r.id, "denied")
		count(r.wouldDeny.Load(), r.id, "would_deny")
		count(r.notCounted.Load(), r.id, "not_counted")
		ch <- prometheus.MustNewConstMetric(c.nearLimit, prometheus.CounterValue, float64(r.nearLimit.Load()), r.id)
		if r.costFrom.Load() {
			ch <- prometheus.MustNewConstMetric(c.costCharged, prometheus.CounterValue, float64(r.costCharged.Load()), r.id)
			for reason := costMissing; reason < numCostReasons; reason++ {
				ch <- prometheus.MustNewConstMetric(c.costUnread, prometheus.CounterValue, float64(r.costUnread[reason].Load()), r.id, costReasonNames[reason])
			}
		}
		if st := r.envoy.Load(); st != nil {
			c.collectEnvoy(ch, st.domain, st.key1, st.key2, &st.envoyCounts)
			st.mu.Lock()
			for k, counts := range st.series {
				c.collectEnvoy(ch, st.domain, k[0], k[1], counts)
			}
			st.mu.Unlock()
		}
	}
	count(e.metrics.shed.Load(), config.ReservedRuleID, "shed")
	c.collectSharing(ch)
	if e.sourceState != nil {
		st := e.sourceState()
		ch <- prometheus.MustNewConstMetric(c.srcConnected, prometheus.GaugeValue, oneIf(st.Connected))
		ch <- prometheus.MustNewConstMetric(c.srcRefused, prometheus.GaugeValue, float64(len(st.Refused)))
		ch <- prometheus.MustNewConstMetric(c.srcUpdates, prometheus.CounterValue, float64(st.Updates))
	}
	if e.limiter != nil {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(e.limiter.Limit()))
		ch <- prometheus.MustNewConstMetric(c.minLimit, prometheus.GaugeValue, float64(e.minLimit))
		ch <- prometheus.MustNewConstMetric(c.maxLimit, prometheus.GaugeValue, float64(e.maxLimit))
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(e.limiter.InFlight()))
		ls := e.limiter.Stats()
		for _, r := range adaptive.Reasons() {
			ch <- prometheus.MustNewConstMetric(c.limitReason, prometheus.GaugeValue, oneIf(r == ls.Reason), r.String())
		}
		ch <- prometheus.MustNewConstMetric(c.goodputReverts, prometheus.CounterValue, float64(ls.Reverts))
		ch <- prometheus.MustNewConstMetric(c.upProbes, prometheus.CounterValue, float64(ls.UpGains), "kept")
		ch <- prometheus.MustNewConstMetric(c.upProbes, prometheus.CounterValue, float64(ls.UpUndone), "undone")
		ch <- prometheus.MustNewConstMetric(c.downProbes, prometheus.CounterValue, float64(ls.DownKept), "kept")
		ch <- prometheus.MustNewConstMetric(c.downProbes, prometheus.CounterValue, float64(ls.DownUndone), "undone")
		ch <- prometheus.MustNewConstMetric(c.selfDelay, prometheus.GaugeValue, ls.Last.SelfDelay.Seconds())
		qs := e.queue.Stats()
		ch <- prometheus.MustNewConstMetric(c.queueLen, prometheus.GaugeValue, float64(qs.Length))
		ch <- prometheus.MustNewConstMetric(c.closedLoop, prometheus.GaugeValue, oneIf(qs.ClosedLoop))
		ch <- prometheus.MustNewConstMetric(c.waitingLoop, prometheus.GaugeValue, oneIf(qs.WaitingLoop))
		ch <- prometheus.MustNewConstMetric(c.holdTests, prometheus.CounterValue, float64(qs.ClosedLoops), "closed_loop")
		ch <- prometheus.MustNewConstMetric(c.holdTests, prometheus.CounterValue, float64(qs.HoldTests-qs.ClosedLoops), "open_loop")
		ch <- prometheus.MustNewConstMetric(c.pauses, prometheus.CounterValue, float64(qs.Pauses))
		buckets := map[float64]uint64{}
		var cum uint64
		for i, b := range queue.WaitBuckets {
			cum += qs.Wait.Counts[i]
			buckets[b.Seconds()] = cum
		}
		ch <- prometheus.MustNewConstHistogram(c.queueWait, qs.Wait.Total(), qs.Wait.Sum.Seconds(), buckets)
		for i, cs := range e.classStats() {
			ch <- prometheus.MustNewConstMetric(c.classRequests, prometheus.CounterValue, float64(cs.Admitted), cs.Name, "admitted")
			ch <- prometheus.MustNewConstMetric(c.classRequests, prometheus.CounterValue, float64(e.shedByClass[i].Load()), cs.Name, "shed")
			ch <- prometheus.MustNewConstMetric(c.classInflight, prometheus.GaugeValue, float64(cs.InFlight), cs.Name)
		}
	}
	if e.memory != nil {
		st := e.memory.Stats()
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys))
		ch <- prometheus.MustNewConstMetric(c.evict, prometheus.CounterValue, float64(st.Evictions))
		ch <- prometheus.MustNewConstMetric(c.restored, prometheus.CounterValue, float64(st.Restored))
	}
}

// collectSharing collects the deny cache's, the fleet's and the regions'
// metrics, for the parts in use.
func (c *engineCollector) collectSharing(ch chan<- prometheus.Metric) {
	e := c.e
	if d := e.share.Deny; d != nil {
		ch <- prometheus.MustNewConstMetric(c.denyHits, prometheus.CounterValue, float64(d.Hits()))
	}
	if f := e.share.Fleet; f != nil {
		fs := f.Stats()
		ch <- prometheus.MustNewConstMetric(c.fleetSyncs, prometheus.CounterValue, float64(fs.Syncs-fs.Errors), "ok")
		ch <- prometheus.MustNewConstMetric(c.fleetSyncs, prometheus.CounterValue, float64(fs.Errors), "error")
		ch <- prometheus.MustNewConstMetric(c.fleetPeers, prometheus.GaugeValue, float64(len(fs.Peers)))
		var lag time.Duration
		for _, p := range fs.Peers {
			lag = max(lag, p.Lag)
		}
		ch <- prometheus.MustNewConstMetric(c.fleetLag, prometheus.GaugeValue, lag.Seconds())
		ch <- prometheus.MustNewConstMetric(c.fleetStale, prometheus.GaugeValue, oneIf(fs.Stale))
	}
	if b := e.share.Budgets; b != nil {
		for _, r := range b.Stats().Rules {
			ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, float64(r.Budget), r.ID)
			ch <- prometheus.MustNewConstMetric(c.budgetUsed, prometheus.GaugeValue, float64(r.Used), r.ID)
		}
	}
}

// oneIf is a gauge's value for a condition: 1 when it holds, else 0.
func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
