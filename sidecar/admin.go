package sidecar

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/static"
)

// AdminHandler serves the admin port: GET /metrics, /healthz, /readyz,
// /v1/state; POST /v1/reload (reload calls back), /v1/check.
//
// The admin port refuses what a browser could be tricked into sending it
// (CSRF, DNS rebinding): a request whose Host is a name other than
// localhost or one of allowedHosts (IP literals are always accepted: a
// rebinding attack needs a name) gets 421; a POST from another origin
// (an Origin header naming another host) gets 403; a POST whose body is
// not application/json gets 415.
func (e *Engine) AdminHandler(reload func() error, allowedHosts ...string) http.Handler {
	mux := http.NewServeMux()
	if g := e.metrics.Gatherer; g != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !e.Ready() {
			http.Error(w, "not ready: rules not loaded or the store has not answered yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, e.State()) })
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, _ *http.Request) {
		if reload == nil {
			writeJSON(w, 501, map[string]string{"error": "this engine has no configuration file to reload"})
			return
		}
		if err := reload(); err != nil {
			writeJSON(w, 400, map[string]string{"error": err.Error(), "result": "kept the previous rules"})
			return
		}
		writeJSON(w, 200, map[string]string{"result": "reloaded"})
	})
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Method     string            `json:"method"`
			Path       string            `json:"path"`
			RemoteAddr string            `json:"remote_addr"`
			Headers    map[string]string `json:"headers"`
			Consume    bool              `json:"consume"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			writeJSON(w, 400, map[string]string{"error": "body: " + err.Error()})
			return
		}
		if in.Method == "" {
			in.Method = "GET"
		}
		if !strings.HasPrefix(in.Path, "/") {
			writeJSON(w, 400, map[string]string{"error": "path: must start with /"})
			return
		}
		h := http.Header{}
		for k, v := range in.Headers {
			h.Set(k, v)
		}
		v, err := e.CheckStatic(r.Context(), &Request{Method: strings.ToUpper(in.Method), Path: in.Path, RemoteAddr: in.RemoteAddr, Header: h}, in.Consume)
		if err != nil {
			status := 503
			if errors.Is(err, ErrAmbiguousPath) {
				status = 400
			}
			writeJSON(w, status, map[string]string{"error": err.Error()})
			return
		}
		v.Done(sluice.Ignore)
		out := http.Header{}
		v.WriteHeaders(out)
		headers := map[string]string{}
		for k := range out {
			headers[k] = out.Get(k)
		}
		status := 200
		if !v.Allowed {
			status = v.Status
		}
		writeJSON(w, 200, map[string]any{
			"allowed": v.Allowed, "status": status, "rule_id": v.Decision.RuleID, "limit": v.Decision.Limit,
			"remaining": v.Decision.Remaining, "reset_after_ms": v.Decision.ResetAfter.Milliseconds(),
			"retry_after_ms": v.Decision.RetryAfter.Milliseconds(), "delay_ms": v.Decision.Delay.Milliseconds(),
			"consumed": in.Consume && v.Allowed, "violated_policies": v.Violated,
			"reason": v.Reason.String(), "headers": headers,
		})
	})
	hosts := map[string]bool{"localhost": true}
	for _, h := range allowedHosts {
		hosts[strings.ToLower(h)] = true
	}
	return adminGuard(mux, hosts)
}

// adminGuard refuses foreign hosts, cross-origin POSTs and non-JSON bodies.
func adminGuard(next http.Handler, hosts map[string]bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostOnly(r.Host)
		if !hosts[host] && !isIPLiteral(host) {
			http.Error(w, "admin: unknown host "+strconv.Quote(r.Host)+" (add it to admin_hosts)", http.StatusMisdirectedRequest)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if o := r.Header.Get("Origin"); o != "" {
				u, err := url.Parse(o)
				if err != nil || !strings.EqualFold(u.Host, r.Host) {
					http.Error(w, "admin: cross-origin request refused", http.StatusForbidden)
					return
				}
			}
			if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
				mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
				if err != nil || mt != "application/json" {
					http.Error(w, "admin: the body must be application/json", http.StatusUnsupportedMediaType)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostOnly returns the lower-case host of a Host header, without its port
// or IPv6 brackets.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

func isIPLiteral(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// State is the admin port's /v1/state.
type State struct {
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
	Synced bool   `json:"synced"`
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
	// BaselineMillis is the service's RTT without a queue, as measured;
	// Probes and Stalls count the limiter's probes and stalls.
	BaselineMillis float64 `json:"baseline_rtt_ms"`
	Probes         uint64  `json:"probes"`
	Stalls         uint64  `json:"stalls"`
	Probing        bool    `json:"probing"`
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
	st := State{Ready: e.Ready(), Config: rs.cfg.File, Store: StoreState{Type: string(rs.cfg.Store.Type), Healthy: true, Status: "up"}}
	if mem := e.memory; mem != nil || e.share.fleet != nil {
		if e.share.fleet != nil && e.redis == nil {
			mem = e.share.fleet.Memory() // gossip: the fleet's view is the store
		}
		ms := mem.Stats()
		st.Store.Keys, st.Store.MaxKeys, st.Store.Evictions = ms.Keys, ms.MaxKeys, ms.Evictions
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
			BaselineMillis: float64(ls.Baseline.Microseconds()) / 1000, Probes: ls.Probes, Stalls: ls.Stalls, Probing: ls.Probing}
		for i, c := range e.classStats() {
			st.Adaptive.Classes = append(st.Adaptive.Classes, ClassState{Name: c.Name, Share: c.Share, InFlight: c.InFlight,
				Admitted: c.Admitted, Shed: e.shedByClass[i].Load()})
		}
		qs := e.queue.Stats()
		st.Queue = &QueueState{Length: qs.Length, Served: qs.Served, Timeouts: qs.Timeouts, Full: qs.Full, Dropped: qs.Dropped, Cancelled: qs.Cancelled}
	}
	for _, r := range rs.rules {
		c := r.counters
		st.Rules = append(st.Rules, RuleState{RuleID: r.id, Algorithm: r.policy.Algorithm.String(), Limit: r.nominal,
			WindowMS: r.window.Milliseconds(), Mode: r.mode.String(), Priority: r.priority, Allowed: c.allowed.Load(),
			Denied: c.denied.Load(), WouldDeny: c.wouldDeny.Load(), NotCounted: c.notCounted.Load()})
	}
	return st
}
