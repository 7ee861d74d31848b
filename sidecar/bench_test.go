package sidecar_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gcl "github.com/platinummonkey/go-concurrency-limits/core"
	gcllimit "github.com/platinummonkey/go-concurrency-limits/limit"
	gcllimiter "github.com/platinummonkey/go-concurrency-limits/limiter"
	gclstrategy "github.com/platinummonkey/go-concurrency-limits/strategy"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar"
)

// tenRules is the benchmark's configuration: ten rules of every kind of
// identifier and most algorithms, all matching the benchmark's request,
// with quotas large enough that every request is admitted (the common case;
// the bucket algorithms at one per microsecond, the fastest rate that validates).
const tenRules = `
adaptive: {algorithm: gradient2, initial_limit: 1000, max_limit: 10000}
identity: {trusted_proxies: [10.0.0.0/8]}
rules:
  - {rule_id: ip_tb,      identifier_type: ip_address, algorithm: token_bucket,   limit: 1000000,    window: 1s}
  - {rule_id: ip_sw,      identifier_type: ip_address, algorithm: sliding_window, limit: 1000000000, window: 1m}
  - {rule_id: user_fw,    identifier_type: user_id,    algorithm: fixed_window,   limit: 1000000000, window: 1h, match: {requires_authentication: true}}
  - {rule_id: user_gcra,  identifier_type: user_id,    algorithm: gcra,           limit: 1000000,    window: 1s, burst: 1000}
  - {rule_id: key_tb,     identifier_type: api_key,    algorithm: token_bucket,   limit: 1000000,    window: 1s}
  - {rule_id: orders,     identifier_type: user_id,    algorithm: sliding_window, limit: 1000000000, window: 1m, match: {path_pattern: /api/orders/*, methods: [GET]}}
  - {rule_id: api_tail,   identifier_type: ip_address, algorithm: fixed_window,   limit: 1000000000, window: 1s, match: {path_pattern: /api/**}}
  - {rule_id: mobile,     identifier_type: header:X-Client-Type, algorithm: token_bucket, limit: 1000000,    window: 1s, match: {required_headers: {X-Client-Type: mobile}}}
  - {rule_id: subnet,     identifier_type: ip_address, algorithm: gcra,           limit: 1000000,    window: 1s, burst: 1000, match: {ip_subnet: 192.0.2.0/24}}
  - {rule_id: global,     identifier_type: global,     algorithm: token_bucket,   limit: 1000000,    window: 1s, priority: 5}
`

// benchEngine builds an engine from yaml, closed when the benchmark ends.
func benchEngine(b *testing.B, yaml string) *engine.Engine {
	b.Helper()
	cfg, err := config.Parse("bench.yaml", []byte(yaml))
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(cfg, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// discard is a ResponseWriter that keeps nothing but a reused header map.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func benchRequest(i int) *http.Request {
	r, _ := http.NewRequestWithContext(context.Background(), "GET", "http://svc/api/orders/42", nil)
	r.RemoteAddr = "192.0.2." + strconv.Itoa(1+i%200) + ":5555"
	r.Header.Set("X-User-ID", "user-"+strconv.Itoa(i%1000))
	r.Header.Set("X-API-Key", "key-"+strconv.Itoa(i%100))
	r.Header.Set("X-Client-Type", "mobile")
	return r
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })

func runParallel(b *testing.B, h http.Handler) {
	b.ReportAllocs()
	var n sync.Mutex
	next := 0
	b.RunParallel(func(pb *testing.PB) {
		n.Lock()
		r := benchRequest(next)
		next += 37
		n.Unlock()
		w := &discard{h: http.Header{}}
		for pb.Next() {
			h.ServeHTTP(w, r)
			clear(w.h)
		}
	})
}

// BenchmarkMiddleware measures the whole middleware path per request: the
// bare handler, sluice with ten matching rules on the memory store and the
// adaptive gate, and the peer a Go developer would compose from libraries:
// ten x/time/rate limiters per key (a mutex-guarded map each, as tollbooth
// and most middlewares do) and go-concurrency-limits' DefaultLimiter.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("bare", func(b *testing.B) { runParallel(b, okHandler) })
	b.Run("sluice_10_rules", func(b *testing.B) {
		runParallel(b, sidecar.Middleware(benchEngine(b, tenRules), okHandler))
	})
	b.Run("peer_xrate_10_gcl", func(b *testing.B) { runParallel(b, peerMiddleware(b, okHandler)) })
}

// costRules is tenRules with one rule charged the cost its response
// states in a header (cost_from).
var costRules = strings.Replace(tenRules, "algorithm: token_bucket,   limit: 1000000,    window: 1s}",
	"algorithm: token_bucket,   limit: 1000000,    window: 1s, cost_from: {header: X-Tokens-Used}}", 1)

// tokensHandler answers 200 stating a cost of 3 in X-Tokens-Used.
var tokensHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header()["X-Tokens-Used"] = []string{"3"}
	w.WriteHeader(200)
})

// BenchmarkMiddlewareCostFromHeader is BenchmarkMiddleware's ten rules, a
// handler that states a cost in a header, and one of the rules reading it
// (cost_from) or not: what charging the stated cost adds per request.
func BenchmarkMiddlewareCostFromHeader(b *testing.B) {
	b.Run("fixed_cost", func(b *testing.B) {
		runParallel(b, sidecar.Middleware(benchEngine(b, tenRules), tokensHandler))
	})
	b.Run("cost_from_header", func(b *testing.B) {
		runParallel(b, sidecar.Middleware(benchEngine(b, costRules), tokensHandler))
	})
}

// keyedRate is the usual per-key x/time/rate middleware state.
type keyedRate struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (k *keyedRate) allow(key string) bool {
	k.mu.Lock()
	l, ok := k.m[key]
	if !ok {
		l = rate.NewLimiter(1e9, 1e9)
		k.m[key] = l
	}
	k.mu.Unlock()
	return l.Allow()
}

func peerMiddleware(b *testing.B, next http.Handler) http.Handler {
	reg := gcl.EmptyMetricRegistryInstance
	g, err := gcllimit.NewGradient2Limit("bench", 1000, 10000, 1, nil, 0.2, 600, gcllimit.NoopLimitLogger{}, reg)
	if err != nil {
		b.Fatal(err)
	}
	lim, err := gcllimiter.NewDefaultLimiter(g, int64(time.Millisecond), int64(time.Second), int64(time.Millisecond), 10,
		gclstrategy.NewSimpleStrategy(1000), gcllimit.NoopLimitLogger{}, reg)
	if err != nil {
		b.Fatal(err)
	}
	var rules [10]keyedRate
	for i := range rules {
		rules[i].m = map[string]*rate.Limiter{}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := r.RemoteAddr
		user := r.Header.Get("X-User-ID")
		key := r.Header.Get("X-API-Key")
		ids := [10]string{ip, ip, user, user, key, user, ip, r.Header.Get("X-Client-Type"), ip, "global"}
		for i := range rules {
			if !rules[i].allow(ids[i]) {
				w.WriteHeader(429)
				return
			}
		}
		l, ok := lim.Acquire(context.Background())
		if !ok {
			w.WriteHeader(503)
			return
		}
		next.ServeHTTP(w, r)
		l.OnSuccess()
	})
}

// BenchmarkShed measures a request the adaptive gate sheds (the limit is
// full, no queue): what overload costs the sidecar per refused request, in
// process, with and without classes.
func BenchmarkShed(b *testing.B) {
	for name, yaml := range map[string]string{
		"one_class":    "adaptive: {algorithm: fixed, initial_limit: 1}\nqueue: {max_size: 0}\n",
		"four_classes": "adaptive: {algorithm: fixed, initial_limit: 1, classes: [{name: critical, share: 0.4, match: {required_headers: {X-Priority: critical}}}, {name: degraded, share: 0.3, match: {path_pattern: /api/orders/*}}, {name: best_effort, share: 0.2}, {name: bulk, share: 0.1}]}\nqueue: {max_size: 0, fairness: user_id}\n",
	} {
		b.Run(name, func(b *testing.B) {
			e := benchEngine(b, yaml)
			ctx := context.Background()
			req := &engine.Request{Method: "GET", Path: "/api/orders/42", RemoteAddr: "192.0.2.1:5555", Header: http.Header{"X-User-Id": {"u1"}}}
			held, _ := e.Decide(ctx, &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.9:1", Header: http.Header{"X-Priority": {"critical"}}})
			defer held.Done(0)
			b.ReportAllocs()
			for b.Loop() {
				if v, _ := e.Decide(ctx, req); v.Allowed {
					b.Fatal("admitted over a full limit")
				}
			}
		})
	}
}

// BenchmarkCheckDescriptors is the engine's side of one Envoy rate limit
// call with three descriptors (no gRPC): lookup, keys, one store check.
func BenchmarkCheckDescriptors(b *testing.B) {
	e := benchEngine(b, `adaptive: {algorithm: off}
rules:
  - {rule_id: per_ip, algorithm: token_bucket, limit: 1000000, window: 1s, descriptor: {domain: edge, entries: [{key: remote_address}]}}
  - {rule_id: per_path, algorithm: sliding_window, limit: 1000000000, window: 1m, descriptor: {domain: edge, entries: [{key: path, value: /api/*}]}}
  - {rule_id: per_user, algorithm: gcra, limit: 1000000, window: 1s, burst: 1000, descriptor: {domain: edge, entries: [{key: tenant, value: acme}, {key: user}]}}
`)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			req := engine.DescriptorRequest{Domain: "edge", Descriptors: []engine.Descriptor{
				{Entries: []engine.DescriptorEntry{{Key: "remote_address", Value: "10.0.0." + strconv.Itoa(i%200)}}, Hits: 1},
				{Entries: []engine.DescriptorEntry{{Key: "path", Value: "/api/orders"}}, Hits: 1},
				{Entries: []engine.DescriptorEntry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "u" + strconv.Itoa(i%1000)}}, Hits: 1},
			}}
			v, _, err := e.CheckDescriptors(ctx, req)
			if err != nil || !v.Allowed {
				b.Errorf("%v %v", v, err)
				return
			}
		}
	})
}

// BenchmarkRefusal is the engine's decision for a request it refuses, no
// HTTP: a 429 (the one rule's quota is spent) and a 503 (the adaptive
// limit is full and nothing may wait). Goal: under 1 us each.
func BenchmarkRefusal(b *testing.B) {
	for _, c := range []struct{ name, yaml string }{
		{"429", "adaptive: {algorithm: off}\nrules:\n  - {rule_id: none_left, identifier_type: ip_address, algorithm: token_bucket, limit: 1, window: 1h}\n"},
		{"503", "adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}\nqueue: {max_size: 0}\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := benchEngine(b, c.yaml)
			req := &engine.Request{Method: "GET", Path: "/x", RemoteAddr: "192.0.2.1:1234", Header: http.Header{}}
			hold, err := e.Decide(context.Background(), req) // spends the quota, or takes the one slot
			if err != nil || !hold.Allowed {
				b.Fatal("the first request was not admitted")
			}
			defer hold.Done(sluice.Success)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				v, err := e.Decide(ctx, req)
				if err != nil || v.Allowed {
					b.Fatal("admitted")
				}
			}
		})
	}
}
