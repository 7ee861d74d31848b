package rls_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/envoyconf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rls"
)

// serve starts an engine for yaml and the service on a loopback port, and
// returns Envoy's generated client for it.
func serve(t testing.TB, yaml string) (rlsv3.RateLimitServiceClient, *engine.Engine) {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte("adaptive: {algorithm: off}\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	return serveConfig(t, cfg)
}

func serveConfig(t testing.TB, cfg *config.Config) (rlsv3.RateLimitServiceClient, *engine.Engine) {
	t.Helper()
	e, err := engine.New(cfg, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	srv, err := rls.Listen("127.0.0.1:0", e)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Shutdown(context.Background())
		_ = e.Close()
	})
	return rlsv3.NewRateLimitServiceClient(conn), e
}

type desc struct {
	kv     []string
	hits   *uint64
	refund bool
}

func d(kv ...string) desc { return desc{kv: kv} }

func call(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...desc) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), request(domain, 0, ds...))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

func request(domain string, hits uint32, ds ...desc) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, x := range ds {
		rd := &commonv3.RateLimitDescriptor{IsNegativeHits: x.refund}
		if x.hits != nil {
			rd.HitsAddend = wrapperspb.UInt64(*x.hits)
		}
		for i := 0; i+1 < len(x.kv); i += 2 {
			rd.Entries = append(rd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: x.kv[i], Value: x.kv[i+1]})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}

func codesOf(resp *rlsv3.RateLimitResponse) string {
	out := resp.OverallCode.String() + ":"
	for _, s := range resp.Statuses {
		out += " " + s.Code.String()
	}
	return out
}

// The seed's two envoyproxy/ratelimit examples, loaded as they are: per
// database, and per phone number with a nested marketing limit; several
// descriptors in one call are all-or-nothing.
func TestEnvoyExamples(t *testing.T) {
	mongo := `domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: default
    rate_limit: {unit: second, requests_per_unit: 500}
`
	messaging := `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`
	var rules []config.Rule
	for name, text := range map[string]string{"mongo.yaml": mongo, "messaging.yaml": messaging} {
		rs, _, err := envoyconf.Parse(name, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, rs...)
	}
	base, err := config.Parse("t.yaml", []byte("adaptive: {algorithm: off}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := base.WithRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := serveConfig(t, cfg)

	resp := call(t, c, "mongo_cps", d("database", "users"), d("database", "other"))
	if codesOf(resp) != "OK: OK OK" || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 500 ||
		resp.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || resp.Statuses[0].LimitRemaining != 499 {
		t.Fatalf("mongo: %v", resp)
	}
	if resp.Statuses[1].CurrentLimit != nil {
		t.Errorf("an unconfigured value got a limit: %v", resp.Statuses[1])
	}

	marketing := d("message_type", "marketing", "to_number", "2061111111")
	number := d("to_number", "2061111111")
	for i := range 5 {
		if resp := call(t, c, "messaging", marketing, number); codesOf(resp) != "OK: OK OK" {
			t.Fatalf("message %d: %s", i, codesOf(resp))
		}
	}
	resp = call(t, c, "messaging", marketing, number)
	if codesOf(resp) != "OVER_LIMIT: OVER_LIMIT OK" {
		t.Fatalf("6th marketing message: %s", codesOf(resp))
	}
	// As envoyproxy/ratelimit counts: the refused call counted on the
	// per-number limit too (imported rules count blocked hits).
	if got := resp.Statuses[1].LimitRemaining; got != 94 {
		t.Errorf("per-number remaining %d after 6 calls, want 94", got)
	}
	if u := resp.Statuses[0].CurrentLimit.GetUnit(); u != rlsv3.RateLimitResponse_RateLimit_DAY || resp.Statuses[0].DurationUntilReset.AsDuration() <= 0 {
		t.Errorf("marketing status %v", resp.Statuses[0])
	}
	// Another number has its own counters.
	if resp := call(t, c, "messaging", d("message_type", "marketing", "to_number", "2062222222")); codesOf(resp) != "OK: OK" {
		t.Errorf("another number: %s", codesOf(resp))
	}
	// An unknown domain limits nothing.
	if resp := call(t, c, "nope", d("a", "b")); codesOf(resp) != "OK: OK" {
		t.Errorf("unknown domain: %s", codesOf(resp))
	}
}

// Every rate algorithm answers Envoy: two admitted, the third over the
// limit, with the limit and the headers.
func TestEveryAlgorithm(t *testing.T) {
	algos := []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket, nodelay: true, burst: 1", "gcra, burst: 1", "semaphore"}
	var yaml strings.Builder
	yaml.WriteString("rules:\n")
	for i, a := range algos {
		fmt.Fprintf(&yaml, "  - {rule_id: r%d, algorithm: %s, limit: 2, window: 1m, descriptor: {domain: d, entries: [{key: alg, value: %q}, {key: user}]}}\n",
			i, a, strings.Split(a, ",")[0])
	}
	c, _ := serve(t, yaml.String())
	for i, a := range algos {
		name := strings.Split(a, ",")[0]
		t.Run(name, func(t *testing.T) {
			for n := range 2 {
				if resp := call(t, c, "d", d("alg", name, "user", "u1")); codesOf(resp) != "OK: OK" {
					t.Fatalf("call %d: %s", n, codesOf(resp))
				}
			}
			resp := call(t, c, "d", d("alg", name, "user", "u1"))
			if codesOf(resp) != "OVER_LIMIT: OVER_LIMIT" {
				t.Fatalf("third call: %s", codesOf(resp))
			}
			st := resp.Statuses[0]
			if st.CurrentLimit.GetName() != fmt.Sprintf("r%d", i) || st.CurrentLimit.GetRequestsPerUnit() != 2 ||
				st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 0 {
				t.Errorf("status %v", st)
			}
			headers := map[string]string{}
			for _, h := range resp.ResponseHeadersToAdd {
				headers[h.Key] = h.Value
			}
			if headers["Ratelimit-Policy"] != fmt.Sprintf(`"r%d";q=2;w=60`, i) || headers["Retry-After"] == "" || headers["X-Ratelimit-Remaining"] != "0" {
				t.Errorf("headers %v", headers)
			}
			// Another user is not limited.
			if resp := call(t, c, "d", d("alg", name, "user", "u2")); codesOf(resp) != "OK: OK" {
				t.Errorf("another user: %s", codesOf(resp))
			}
		})
	}
}

// hits_addend is the cost, per request or per descriptor; is_negative_hits
// gives hits back.
func TestHitsAndRefunds(t *testing.T) {
	c, _ := serve(t, "rules:\n  - {rule_id: q, algorithm: fixed_window, limit: 10, window: 1m, descriptor: {domain: d, entries: [{key: k}]}}\n")
	ctx := context.Background()
	resp, err := c.ShouldRateLimit(ctx, request("d", 4, d("k", "a")))
	if err != nil || resp.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("request hits 4: %v %v", resp, err)
	}
	seven := uint64(7)
	resp, err = c.ShouldRateLimit(ctx, request("d", 4, desc{kv: []string{"k", "a"}, hits: &seven}))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("descriptor hits 7 over 6 left: %v %v", resp, err)
	}
	five := uint64(5)
	resp, err = c.ShouldRateLimit(ctx, request("d", 0, desc{kv: []string{"k", "a"}, hits: &five, refund: true}))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 10 {
		t.Fatalf("refund of 5 (4 taken): %v %v", resp, err)
	}
	zero := uint64(0)
	resp, err = c.ShouldRateLimit(ctx, request("d", 0, desc{kv: []string{"k", "a"}, hits: &zero}))
	if err != nil || resp.Statuses[0].LimitRemaining != 10 {
		t.Fatalf("hits 0 asks without taking: %v %v", resp, err)
	}
}

// Unlimited, shadow, replaces, wildcard values and the most specific
// match, as envoyproxy/ratelimit has them.
func TestMatchingSemantics(t *testing.T) {
	c, _ := serve(t, `rules:
  - {rule_id: per_ip, algorithm: fixed_window, limit: 10, window: 1s, descriptor: {domain: edge, entries: [{key: remote_address}]}}
  - {rule_id: blocked, algorithm: fixed_window, limit: 0, window: 1s, descriptor: {domain: edge, entries: [{key: remote_address, value: 50.0.0.5}]}}
  - {rule_id: trusted, descriptor: {domain: edge, entries: [{key: remote_address, value: 10.0.0.1}], unlimited: true}}
  - {rule_id: api, algorithm: gcra, limit: 1, window: 1h, descriptor: {domain: edge, entries: [{key: path, value: /api/*}]}}
  - {rule_id: soft_launch, algorithm: fixed_window, limit: 1, window: 1h, mode: shadow, descriptor: {domain: edge, entries: [{key: user, value: a}]}}
  - {rule_id: specific, algorithm: fixed_window, limit: 1, window: 1h, descriptor: {domain: edge, entries: [{key: k1, value: v1}, {key: user}]}}
  - {rule_id: broader, algorithm: fixed_window, limit: 5, window: 1h, replaces: [specific], descriptor: {domain: edge, entries: [{key: k2, value: v2}, {key: user}]}}
`)
	if resp := call(t, c, "edge", d("remote_address", "50.0.0.5")); codesOf(resp) != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("blocked address: %s", codesOf(resp))
	}
	if resp := call(t, c, "edge", d("remote_address", "50.0.0.6")); codesOf(resp) != "OK: OK" || resp.Statuses[0].CurrentLimit.GetName() != "per_ip" {
		t.Errorf("another address: %v", resp)
	}
	resp := call(t, c, "edge", d("remote_address", "10.0.0.1"))
	if codesOf(resp) != "OK: OK" || resp.Statuses[0].LimitRemaining != math.MaxUint32 || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("unlimited: %v", resp)
	}
	// A wildcard value matches by prefix and, as in envoyproxy/ratelimit,
	// each value has its own quota.
	for _, path := range []string{"/api/x", "/api/y"} {
		if resp := call(t, c, "edge", d("path", path)); codesOf(resp) != "OK: OK" || resp.Statuses[0].CurrentLimit.GetName() != "api" {
			t.Errorf("wildcard %s, first: %v", path, resp)
		}
		if resp := call(t, c, "edge", d("path", path)); codesOf(resp) != "OVER_LIMIT: OVER_LIMIT" {
			t.Errorf("wildcard %s, second: %s", path, codesOf(resp))
		}
	}
	if resp := call(t, c, "edge", d("path", "/other")); codesOf(resp) != "OK: OK" || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("outside the wildcard: %v", resp)
	}
	for i := range 3 {
		if resp := call(t, c, "edge", d("user", "a")); codesOf(resp) != "OK: OK" {
			t.Errorf("shadow rule call %d: %s", i, codesOf(resp))
		}
	}
	// Both apply: broader replaces specific, so 5 pass, not 1.
	for i := range 5 {
		if resp := call(t, c, "edge", d("k1", "v1", "user", "bk"), d("k2", "v2", "user", "bk")); codesOf(resp) != "OK: OK OK" {
			t.Fatalf("replaced, call %d: %s", i, codesOf(resp))
		}
	}
	if resp := call(t, c, "edge", d("k1", "v1", "user", "bk"), d("k2", "v2", "user", "bk")); codesOf(resp) != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Errorf("replaced, 6th: %s", codesOf(resp))
	}
	// Alone, specific still applies.
	if resp := call(t, c, "edge", d("k1", "v1", "user", "other")); codesOf(resp) != "OK: OK" {
		t.Errorf("specific alone: %s", codesOf(resp))
	}
	if resp := call(t, c, "edge", d("k1", "v1", "user", "other")); codesOf(resp) != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("specific alone, 2nd: %s", codesOf(resp))
	}
}

// A request sluice cannot decide as sent is refused with InvalidArgument:
// no domain, too many descriptors, none at all (as envoyproxy/ratelimit
// refuses it), a limit override without a unit.
func TestBadRequests(t *testing.T) {
	c, _ := serve(t, "rules:\n  - {rule_id: q, algorithm: fixed_window, limit: 10, window: 1m, descriptor: {domain: d, entries: [{key: k}]}}\n")
	many := make([]desc, 65)
	for i := range many {
		many[i] = d("k", "v")
	}
	override := request("d", 0, d("k", "v"))
	override.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1} // no unit
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"no domain":                  request("", 0, d("k", "v")),
		"too many":                   request("d", 0, many...),
		"no descriptors":             request("d", 0),
		"an override without a unit": override,
	} {
		_, err := c.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	// A descriptor without entries matches no rule: OK, without a limit,
	// as envoyproxy/ratelimit answers (it was InvalidArgument).
	resp := call(t, c, "d", desc{}, d("k", "v"))
	if codesOf(resp) != "OK: OK OK" || resp.Statuses[0].CurrentLimit != nil || resp.Statuses[1].CurrentLimit == nil {
		t.Errorf("an entry-less descriptor beside a limited one: %v", resp)
	}
}

// On Redis, a call's descriptors are checked in one round trip, whatever
// their number.
func TestRedisOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c, e := serve(t, fmt.Sprintf(`store: {type: redis, redis: {addrs: [%q]}}
rules:
  - {rule_id: a, algorithm: sliding_window, limit: 3, window: 1m, descriptor: {domain: d, entries: [{key: user}]}}
  - {rule_id: b, algorithm: token_bucket, limit: 100, window: 1m, descriptor: {domain: d, entries: [{key: path}]}}
  - {rule_id: c, algorithm: fixed_window, limit: 100, window: 1m, descriptor: {domain: d, entries: [{key: user}, {key: path}]}}
`, srv.Addr()))
	deadline := time.Now().Add(10 * time.Second)
	for !e.Ready() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	before := e.State().Store.RoundTrips
	for i := range 3 {
		if resp := call(t, c, "d", d("user", "u"), d("path", "/x"), d("user", "u", "path", "/x")); codesOf(resp) != "OK: OK OK OK" {
			t.Fatalf("call %d: %s %v", i, codesOf(resp), resp)
		}
	}
	if resp := call(t, c, "d", d("user", "u"), d("path", "/x"), d("user", "u", "path", "/x")); codesOf(resp) != "OVER_LIMIT: OVER_LIMIT OK OK" {
		t.Fatalf("4th: %s", codesOf(resp))
	}
	if got := e.State().Store.RoundTrips - before; got != 4 {
		t.Errorf("%d Redis round trips for 4 calls of 3 descriptors, want 4", got)
	}
}

// A soft rule admits up to soft_percent over its limit and reports its
// configured limit; hard, soft and shadow rules answer as over HTTP.
func TestSoftMode(t *testing.T) {
	c, _ := serve(t, "rules:\n  - {rule_id: soft, algorithm: fixed_window, limit: 10, window: 1m, mode: soft, soft_percent: 20, descriptor: {domain: d, entries: [{key: k}]}}\n")
	for i := range 12 {
		resp := call(t, c, "d", d("k", "v"))
		if codesOf(resp) != "OK: OK" {
			t.Fatalf("call %d: %s", i, codesOf(resp))
		}
		if got := resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 10 {
			t.Fatalf("reported limit %d, want the configured 10", got)
		}
	}
	if resp := call(t, c, "d", d("k", "v")); codesOf(resp) != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("13th call: %s", codesOf(resp))
	}
}

// On Redis Cluster, a call's descriptors hash to different slots; the
// check stays all-or-nothing: when one is over its limit, the others are
// given back.
func TestRedisClusterAllOrNothing(t *testing.T) {
	cl := redistest.StartCluster(t)
	addrs := `["` + strings.Join(cl.Addrs(), `", "`) + `"]`
	c, e := serve(t, `store: {type: redis, redis: {addrs: `+addrs+`}}
rules:
  - {rule_id: tight, algorithm: fixed_window, limit: 1, window: 1h, descriptor: {domain: d, entries: [{key: tight}]}}
  - {rule_id: wide, algorithm: fixed_window, limit: 100, window: 1h, descriptor: {domain: d, entries: [{key: wide}]}}
`)
	deadline := time.Now().Add(20 * time.Second)
	for !e.Ready() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Values chosen to land in different slots (the braced part differs).
	if resp := call(t, c, "d", d("tight", "a"), d("wide", "zz-9")); codesOf(resp) != "OK: OK OK" {
		t.Fatalf("first: %s", codesOf(resp))
	}
	for range 3 {
		if resp := call(t, c, "d", d("tight", "a"), d("wide", "zz-9")); codesOf(resp) != "OVER_LIMIT: OVER_LIMIT OK" {
			t.Fatalf("over the tight limit: %s", codesOf(resp))
		}
	}
	resp := call(t, c, "d", d("wide", "zz-9"))
	if codesOf(resp) != "OK: OK" || resp.Statuses[0].LimitRemaining != 98 {
		t.Fatalf("wide after 1 admitted call and 3 refused: remaining %d, want 98 (the refused calls gave theirs back)", resp.Statuses[0].LimitRemaining)
	}
}

// One counter named by several descriptors of a call is checked once with
// the summed hits, whether the call has a few descriptors or many (past
// sixteen counters the engine indexes them by key).
func TestRepeatedCountersSummed(t *testing.T) {
	c, _ := serve(t, "rules:\n  - {rule_id: q, algorithm: fixed_window, limit: 100, window: 1m, descriptor: {domain: d, entries: [{key: k}]}}\n")
	for _, distinct := range []int{3, 40} {
		var ds []desc
		for i := range distinct {
			ds = append(ds, d("k", fmt.Sprintf("v%d-%d", distinct, i)))
		}
		ds = append(ds, d("k", fmt.Sprintf("v%d-0", distinct)), d("k", fmt.Sprintf("v%d-%d", distinct, distinct-1)))
		resp := call(t, c, "d", ds...)
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%d counters: %s", distinct, codesOf(resp))
		}
		for i, st := range resp.Statuses {
			want := uint32(99) // one hit
			if i == 0 || i == distinct-1 || i >= distinct {
				want = 98 // named twice: two hits on one counter
			}
			if st.LimitRemaining != want {
				t.Fatalf("%d counters: descriptor %d remaining %d, want %d", distinct, i, st.LimitRemaining, want)
			}
		}
	}
}

// serveEnvoy serves the rules of one envoyproxy/ratelimit file.
func serveEnvoy(t *testing.T, text string) rlsv3.RateLimitServiceClient {
	t.Helper()
	c, _ := serveEnvoyWith(t, "", text)
	return c
}

// serveEnvoyWith serves the rules of one envoyproxy/ratelimit file with
// more sluice settings (YAML lines), and returns the engine too.
func serveEnvoyWith(t *testing.T, settings, text string) (rlsv3.RateLimitServiceClient, *engine.Engine) {
	t.Helper()
	rules, _, err := envoyconf.Parse("envoy.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	base, err := config.Parse("t.yaml", []byte("adaptive: {algorithm: off}\n"+settings))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := base.WithRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	return serveConfig(t, cfg)
}

// Wildcards anywhere in a value, as envoyproxy/ratelimit matches them (each
// "*" any run of characters, the first pattern in file order after an
// exact value): each matching value has its own counter, or, with
// share_threshold, all share the pattern's (issue 26).
func TestEnvoyWildcardsAndShareThreshold(t *testing.T) {
	c := serveEnvoy(t, `domain: w
descriptors:
  - key: path
    value: /api/v1
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /api*v1
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: route
    value: svc*ep*rpc
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: file
    value: files/*
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	over := func(kv ...string) string {
		return codesOf(call(t, c, "w", d(kv...)))
	}
	// A middle wildcard: each value its own counter of 2.
	for _, v := range []string{"/api/x/v1", "/api/y/v1"} {
		for i, want := range []string{"OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
			if got := over("path", v); got != want {
				t.Errorf("%s, call %d: %s, want %s", v, i+1, got, want)
			}
		}
	}
	// The exact value wins over the pattern that also matches it.
	for i := range 5 {
		if got := over("path", "/api/v1"); got != "OK: OK" {
			t.Errorf("/api/v1 (exact, 5 a minute), call %d: %s", i+1, got)
		}
	}
	// Several wildcards, shared: three calls across three values use it up.
	for i, v := range []string{"svc-a-ep-1-rpc", "svcXepYrpc", "svc--ep--rpc"} {
		if got := over("route", v); got != "OK: OK" {
			t.Errorf("shared pattern, %s (call %d): %s", v, i+1, got)
		}
	}
	if got := over("route", "svc-z-ep-z-rpc"); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("the shared pattern's fourth call: %s, want OVER_LIMIT", got)
	}
	// Not matching: no rule, OK.
	if got := over("route", "svc-ep"); got != "OK: OK" {
		t.Errorf("a value the pattern does not match: %s", got)
	}
	// A trailing wildcard, not shared: one a minute per value.
	if over("file", "files/a") != "OK: OK" || over("file", "files/b") != "OK: OK" || over("file", "files/a") != "OVER_LIMIT: OVER_LIMIT" {
		t.Error("files/* is not one counter per value")
	}
}

// A value listed without a rate_limit (and nothing below it) is
// envoyproxy/ratelimit's whitelist: never limited, though a key-only
// sibling limits every other value (issue 26: it got the sibling's limit).
func TestEnvoyWhitelistedValue(t *testing.T) {
	c := serveEnvoy(t, `domain: wl
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    value: 10.0.0.1
`)
	for i := range 5 {
		if got := codesOf(call(t, c, "wl", d("remote_address", "10.0.0.1"))); got != "OK: OK" {
			t.Fatalf("the whitelisted value, call %d: %s", i+1, got)
		}
	}
	if codesOf(call(t, c, "wl", d("remote_address", "10.0.0.2"))) != "OK: OK" ||
		codesOf(call(t, c, "wl", d("remote_address", "10.0.0.2"))) != "OVER_LIMIT: OVER_LIMIT" {
		t.Error("another value is not limited to 1 a minute")
	}
}

// A descriptor's limit override is its limit, in place of the rules', as
// the peer honours it (issue 26: sluice refused the call): a fixed window
// of the override, on the descriptor's own counter.
func TestLimitOverride(t *testing.T) {
	c, _ := serve(t, "rules:\n  - {rule_id: q, algorithm: fixed_window, limit: 100, window: 1m, descriptor: {domain: d, entries: [{key: k}]}}\n")
	withOverride := func(v string) *rlsv3.RateLimitRequest {
		req := request("d", 0, d("k", v))
		req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
		return req
	}
	for i, want := range []string{"OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
		resp, err := c.ShouldRateLimit(context.Background(), withOverride("v"))
		if err != nil {
			t.Fatal(err)
		}
		if got := codesOf(resp); got != want {
			t.Errorf("call %d with a 2-per-hour override: %s, want %s", i+1, got, want)
		}
		if l := resp.Statuses[0].CurrentLimit; l.GetRequestsPerUnit() != 2 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("call %d: current_limit %v, want 2 per hour", i+1, l)
		}
	}
	// The rule's own limit, without an override, is untouched.
	if resp := call(t, c, "d", d("k", "v")); codesOf(resp) != "OK: OK" || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 100 {
		t.Errorf("without the override: %v", resp)
	}
}

// An imported file counts as envoyproxy/ratelimit does (issue 26): on 20 a
// minute, hits_addend 15 then 10 answers OVER_LIMIT with 0 left, the next
// hit is refused too, and a hits_addend of 0 afterwards (Envoy's
// apply_on_stream_done pattern asks without consuming) sees OVER_LIMIT.
func TestEnvoyImportedCounting(t *testing.T) {
	c := serveEnvoy(t, `domain: q
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 20}
`)
	hits := func(n uint64) *rlsv3.RateLimitResponse {
		return call(t, c, "q", desc{kv: []string{"user", "u"}, hits: &n})
	}
	if r := hits(15); codesOf(r) != "OK: OK" || r.Statuses[0].LimitRemaining != 5 {
		t.Fatalf("15 of 20: %v", r)
	}
	for i, n := range []uint64{10, 1, 0} {
		if r := hits(n); codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || r.Statuses[0].LimitRemaining != 0 {
			t.Errorf("step %d (%d hits) after 15: %v, want OVER_LIMIT with 0 left", i+2, n, r)
		}
	}
}

// A call whose other descriptor is over its limit still counts an
// imported descriptor, and says so: the peer answers 20 a minute with 9,
// 8, 7 left while key3 refuses, as its basic integration test asserts
// (sluice answered the remaining from before the call, as if nothing had
// been taken).
func TestEnvoyCountedBesideADenial(t *testing.T) {
	c := serveEnvoy(t, `domain: another
descriptors:
  - {key: key2, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: key3, rate_limit: {unit: hour, requests_per_unit: 1}}
`)
	for i := range 4 {
		r := call(t, c, "another", d("key2", "v"), d("key3", "v"))
		wantCode := "OVER_LIMIT: OK OVER_LIMIT"
		if i == 0 {
			wantCode = "OK: OK OK"
		}
		if codesOf(r) != wantCode || r.Statuses[0].LimitRemaining != uint32(19-i) {
			t.Fatalf("call %d: %s, key2 remaining %d, want %s with %d", i+1, codesOf(r), r.Statuses[0].LimitRemaining, wantCode, 19-i)
		}
	}
}

// The peer answers the time to the unit's end in every status with a
// limit: also for hits_addend 0 on a key nothing has counted yet (Envoy's
// token-quota check) and for a limit of 0; sluice answered 0 s for both.
func TestEnvoyResetOfUntouchedCounters(t *testing.T) {
	c := serveEnvoy(t, `domain: r
descriptors:
  - {key: quota, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: banned, rate_limit: {unit: hour, requests_per_unit: 0}}
`)
	zero := uint64(0)
	for _, tc := range []struct {
		what string
		desc desc
		unit time.Duration
	}{
		{"hits 0 on a fresh key", desc{kv: []string{"quota", "fresh"}, hits: &zero}, time.Minute},
		{"a limit of 0", d("banned", "x"), time.Hour},
	} {
		st := call(t, c, "r", tc.desc).Statuses[0]
		got := st.GetDurationUntilReset().AsDuration()
		if got < time.Second || got > tc.unit || got%time.Second != 0 {
			t.Errorf("%s: duration_until_reset %v, want whole seconds up to %v", tc.what, got, tc.unit)
		}
	}
}

// Descriptor rules are counted under envoyproxy/ratelimit's Prometheus
// names and labels (its default statsd mapping), so its users' alerts
// keep working (issue 26): 12 hits on 10 a minute with the near ratio at
// 0.8 are 12 total, 10 within, 2 over, and 2 near (the 9th and 10th).
func TestEnvoyMetricNames(t *testing.T) {
	c, e := serveEnvoyWith(t, "rls: {near_limit_ratio: 0.8}\n",
		"domain: m\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	for range 12 {
		call(t, c, "m", d("user", "u"))
	}
	mfs, err := e.Metrics().Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "ratelimit_service_rate_limit_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["domain"] != "m" || labels["key1"] != "user" || labels["key2"] != "" {
				t.Errorf("%s labels %v", mf.GetName(), labels)
			}
			got[strings.TrimPrefix(mf.GetName(), "ratelimit_service_rate_limit_")] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"total_hits": 12, "within_limit": 10, "over_limit": 2, "near_limit": 2, "shadow_mode": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// Rules imported from envoyproxy/ratelimit answer as it does (issue 26):
// current_limit.name only when the rate_limit has a name,
// duration_until_reset in whole seconds, no response headers; a sluice
// rule in the same call brings sluice's headers back.
func TestEnvoyCompatibleAnswer(t *testing.T) {
	c := serveEnvoy(t, `domain: e
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 5, name: bee}
`)
	resp := call(t, c, "e", d("a", "1"), d("b", "1"))
	if codesOf(resp) != "OK: OK OK" {
		t.Fatalf("%v", resp)
	}
	if n := resp.Statuses[0].CurrentLimit.GetName(); n != "" {
		t.Errorf("an unnamed rate_limit reports name %q", n)
	}
	if n := resp.Statuses[1].CurrentLimit.GetName(); n != "bee" {
		t.Errorf("a named rate_limit reports name %q, want bee", n)
	}
	for i, st := range resp.Statuses {
		if d := st.GetDurationUntilReset(); d.GetNanos() != 0 || d.GetSeconds() <= 0 {
			t.Errorf("status %d: duration_until_reset %v, want whole seconds", i, d)
		}
	}
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers added to the peer's answer: %v", resp.ResponseHeadersToAdd)
	}
}

// A peer file's descriptor metadata loads, and with
// rls.response_dynamic_metadata the answer carries the peer's dynamic
// metadata: domain, entries, and the metadata of the descriptors that
// passed, merged (issue 26: metadata.yaml was refused).
func TestEnvoyDynamicMetadata(t *testing.T) {
	c, _ := serveEnvoyWith(t, "rls: {response_dynamic_metadata: true}\n", `domain: md
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      service: {name: one, tier: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata:
      blocked: true
`)
	resp := call(t, c, "md", d("a", "x"), d("b", "y"))
	md := resp.GetDynamicMetadata().AsMap()
	if md["domain"] != "md" {
		t.Errorf("domain %v", md["domain"])
	}
	descs, _ := md["descriptors"].([]any)
	if len(descs) != 2 || fmt.Sprint(descs[0]) != "map[entries:[a=x]]" {
		t.Errorf("descriptors %v", descs)
	}
	meta, _ := md["metadata"].(map[string]any)
	if fmt.Sprint(meta) != "map[service:map[name:one tier:1]]" {
		t.Errorf("metadata of the passed descriptors %v, want only a's (b is over its limit)", meta)
	}
}

// The peer's quota_mode: a quota-mode descriptor over its limit has status
// OVER_LIMIT, but the answer is OVER_LIMIT only when every quota-mode
// descriptor of the call is over (issue 26: quota_mode was refused).
func TestEnvoyQuotaMode(t *testing.T) {
	c := serveEnvoy(t, `domain: qm
descriptors:
  - key: small
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: big
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`)
	if got := codesOf(call(t, c, "qm", d("small", "s"), d("big", "b"))); got != "OK: OK OK" {
		t.Fatalf("first call: %s", got)
	}
	if got := codesOf(call(t, c, "qm", d("small", "s"), d("big", "b"))); got != "OK: OVER_LIMIT OK" {
		t.Errorf("one quota descriptor over, another within: %s, want OK overall", got)
	}
	if got := codesOf(call(t, c, "qm", d("small", "s"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("every quota descriptor over: %s, want OVER_LIMIT", got)
	}
}

// envoySeries gathers the envoyproxy/ratelimit metric name (without its
// prefix) for every series: key "key1|key2" -> counter.
func envoySeries(t *testing.T, e *engine.Engine, metric string) map[string]float64 {
	t.Helper()
	mfs, err := e.Metrics().Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_service_rate_limit_"+metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["key1"]+"|"+labels["key2"]] = m.GetCounter().GetValue()
		}
	}
	return got
}

// detailed_metric and value_to_metric label the peer's metrics with the
// request's values, as envoyproxy/ratelimit names its stats: a series per
// value of a key-only or wildcard entry, a share_threshold pattern kept as
// the pattern, and at most config.MaxMetricSeries series per rule (later
// values count under the configured labels), so that clients cannot grow
// the metrics without bound.
func TestEnvoyDetailedAndValueToMetric(t *testing.T) {
	c, e := serveEnvoyWith(t, "", `domain: dm
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    descriptors:
      - key: file
        value: f*
        share_threshold: true
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
`)
	for range 3 {
		call(t, c, "dm", d("user", "alice"))
	}
	call(t, c, "dm", d("user", "bob"))
	call(t, c, "dm", d("path", "/api/v1"))
	call(t, c, "dm", d("path", "/api/v2"))
	call(t, c, "dm", d("tenant", "t1", "file", "f1"))
	call(t, c, "dm", d("tenant", "t1", "file", "f2"))
	call(t, c, "dm", d("plain", "x"))
	call(t, c, "dm", d("plain", "y"))
	total, over := envoySeries(t, e, "total_hits"), envoySeries(t, e, "over_limit")
	for k, want := range map[string]float64{
		"user_alice|": 3, "user_bob|": 1, // detailed: the request's value
		"path_/api/v1|": 1, "path_/api/v2|": 1, // value_to_metric on a wildcard entry
		"tenant_t1|file_f*": 2, // detailed, the share_threshold pattern kept
		"plain|":            2, // neither: the configured key, one series
	} {
		if total[k] != want {
			t.Errorf("total_hits{%s} = %v, want %v (all: %v)", k, total[k], want, total)
		}
	}
	if over["user_alice|"] != 1 || over["user_bob|"] != 0 {
		t.Errorf("over_limit %v: want alice's third hit over, bob's none", over)
	}
	if _, ok := total["plain_x|"]; ok {
		t.Errorf("a rule without the flags got per-value series: %v", total)
	}
	// A long value is labelled by its digest, not carried whole.
	call(t, c, "dm", d("user", strings.Repeat("v", 10000)))
	for k := range envoySeries(t, e, "total_hits") {
		if len(k) > 200 {
			t.Errorf("a label of %d bytes: a request's value must not size the metrics", len(k))
		}
	}
	// The series of one rule are bounded.
	for i := range config.MaxMetricSeries + 50 {
		call(t, c, "dm", d("user", fmt.Sprintf("u%d", i)))
	}
	n := 0
	for k := range envoySeries(t, e, "total_hits") {
		if strings.HasPrefix(k, "user") {
			n++
		}
	}
	if n > config.MaxMetricSeries+1 {
		t.Errorf("%d series for one rule, want at most %d and the configured one", n, config.MaxMetricSeries)
	}
	if got := envoySeries(t, e, "total_hits")["user|"]; got < 50 {
		t.Errorf("total_hits{user} = %v: the values past the bound must count under the configured labels", got)
	}
}

// A detailed metric is labelled with its own descriptor's values when a
// limit of the same call was replaced (dropped) before it: the series
// took the dropped descriptor's values.
func TestDetailedMetricAfterAReplacedLimit(t *testing.T) {
	c, e := serveEnvoyWith(t, "", `domain: rp
descriptors:
  - key: a
    rate_limit: {name: per_a, unit: minute, requests_per_unit: 5}
  - key: b
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: per_a}]}
`)
	call(t, c, "rp", d("a", "x"), d("b", "y"))
	total := envoySeries(t, e, "total_hits")
	if total["b_y|"] != 1 {
		t.Errorf("total_hits %v, want b_y counted once", total)
	}
	if _, ok := total["a_x|"]; ok {
		t.Errorf("the replaced descriptor's values labelled another's series: %v", total)
	}
}
