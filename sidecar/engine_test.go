package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/internal/sidecartest"
	"github.com/sluicehq/sluice/static/statictest"
)

// The tests' shared helpers (see sidecartest).
var (
	newEngine = sidecartest.Engine
	ok        = sidecartest.OK
	do        = sidecartest.Do
)

const twoPerMinute = sidecartest.TwoPerMinute

func TestQuotaResponse(t *testing.T) {
	e := newEngine(t, twoPerMinute, sluice.NewFakeClock(statictest.Start))
	h := sidecar.Middleware(e, ok)
	w := do(h, "GET", "/a")
	if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"per_ip";q=2;w=60` || w.Header().Get("RateLimit") != `"per_ip";r=1;t=60` {
		t.Fatalf("first: %d %v", w.Code, w.Header())
	}
	do(h, "GET", "/a")
	w = do(h, "GET", "/a")
	if w.Code != 429 {
		t.Fatalf("third: %d, want 429", w.Code)
	}
	want := map[string]string{
		"Retry-After": "60", "RateLimit-Policy": `"per_ip";q=2;w=60`, "RateLimit": `"per_ip";r=0;t=60`,
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
		"Content-Type": "application/problem+json",
	}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(body["type"].(string), "#quota-exceeded") || body["status"].(float64) != 429 {
		t.Errorf("body %v", body)
	}
	if v := body["violated-policies"].([]any); len(v) != 1 || v[0] != "per_ip" {
		t.Errorf("violated-policies %v", v)
	}
	// Another client is not affected.
	r := httptest.NewRequest("GET", "/a", nil)
	r.RemoteAddr = "192.0.2.2:1"
	w2 := httptest.NewRecorder()
	h.ServeHTTP(w2, r)
	if w2.Code != 200 {
		t.Errorf("another client: %d", w2.Code)
	}
}

func TestModes(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: soft, identifier_type: global, algorithm: fixed_window, limit: 10, window: 1m, mode: soft, soft_percent: 20, match: {path_pattern: /soft}}
  - {rule_id: shadow, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1m, mode: shadow, match: {path_pattern: /shadow}}
`, sluice.NewFakeClock(statictest.Start))
	h := sidecar.Middleware(e, ok)
	admitted := 0
	var last *httptest.ResponseRecorder
	for i := 0; i < 15; i++ {
		if w := do(h, "GET", "/soft"); w.Code == 200 {
			admitted++
			last = w
		}
	}
	if admitted != 12 {
		t.Errorf("soft rule admitted %d, want 12 (10 + 20%%)", admitted)
	}
	if got := last.Header().Get("RateLimit-Policy"); got != `"soft";q=10;w=60` {
		t.Errorf("soft rule advertises %q, want its configured quota", got)
	}
	if got := last.Header().Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("soft rule over its quota reports remaining %q, want 0", got)
	}
	for i := 0; i < 5; i++ {
		if w := do(h, "GET", "/shadow"); w.Code != 200 {
			t.Fatalf("shadow rule denied: %d", w.Code)
		}
	}
	if got := ruleCount(e, "shadow", "would_deny"); got != 4 {
		t.Errorf("shadow would_deny %v, want 4", got)
	}
	if got := ruleCount(e, "soft", "denied"); got != 3 {
		t.Errorf("soft denied %v, want 3", got)
	}
}

func TestElastic(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: fixed, initial_limit: 10, elastic_headroom: 0.5}
queue: {max_size: 0}
rules:
  - {rule_id: el, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1m, mode: elastic}
`, sluice.NewFakeClock(statictest.Start))
	ctx := context.Background()
	req := &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: http.Header{}}
	var held []engine.Verdict
	for i := 0; i < 5; i++ { // over its quota of 1, admitted: in flight < 5 = 0.5 x 10
		v, err := e.Decide(ctx, req)
		if err != nil || !v.Allowed {
			t.Fatalf("request %d with spare capacity: %+v %v", i, v, err)
		}
		held = append(held, v)
	}
	if v, _ := e.Decide(ctx, req); v.Allowed {
		t.Fatal("elastic rule over quota admitted without spare capacity (5 of 10 in flight)")
	}
	for i := range held {
		held[i].Done(sluice.Success)
	}
}

func TestShedWhenAdaptiveLimitFull(t *testing.T) {
	e := newEngine(t, "adaptive: {algorithm: fixed, initial_limit: 1}\nqueue: {max_size: 0}\n", sluice.NewFakeClock(statictest.Start))
	ctx := context.Background()
	req := &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: http.Header{}}
	first, _ := e.Decide(ctx, req)
	w := httptest.NewRecorder()
	v, _ := e.Decide(ctx, req)
	if v.Allowed || v.Status != 503 {
		t.Fatalf("second in flight at limit 1: %+v", v)
	}
	sidecar.WriteResponse(w, &v)
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "#temporary-reduced-capacity") {
		t.Errorf("shed response %d %v %s", w.Code, w.Header(), w.Body)
	}
	first.Done(sluice.Success)
	if v, _ := e.Decide(ctx, req); !v.Allowed {
		t.Error("refused after the release")
	}
}

func TestLeakyBucketDelayIsHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: paced, identifier_type: global, algorithm: leaky_bucket, limit: 10, window: 1s, burst: 5}
`, nil)
		h := sidecar.Middleware(e, ok)
		start := time.Now()
		for i := 0; i < 3; i++ {
			if w := do(h, "GET", "/"); w.Code != 200 {
				t.Fatalf("request %d: %d", i, w.Code)
			}
		}
		// Sent one after another, they leave at their slots 100 ms apart:
		// 0, 100 and 200 ms.
		if got := time.Since(start); got != 200*time.Millisecond {
			t.Errorf("three paced requests took %v, want 200ms (slots at 0, 100, 200)", got)
		}
	})
}

func TestPathTricksStillMatch(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: orders, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1m, match: {path_pattern: /orders/*}}
`, sluice.NewFakeClock(statictest.Start))
	h := sidecar.Middleware(e, ok)
	do(h, "GET", "/orders/1")
	for _, p := range []string{"/x/../orders/1", "/orders//1", "/./orders/1"} {
		if w := do(h, "GET", p); w.Code != 429 {
			t.Errorf("%s: %d, want 429 (the rule must see through it)", p, w.Code)
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	for status, want := range map[int]sluice.Outcome{200: sluice.Success, 201: sluice.Success, 500: sluice.Success,
		404: sluice.Ignore, 400: sluice.Ignore, 429: sluice.Dropped, 503: sluice.Dropped, 504: sluice.Dropped, 502: sluice.Dropped} {
		if got := engine.OutcomeOf(status); got != want {
			t.Errorf("%d: %v, want %v", status, got, want)
		}
	}
}

func TestMetricsLint(t *testing.T) {
	e := newEngine(t, twoPerMinute, sluice.NewFakeClock(statictest.Start))
	do(sidecar.Middleware(e, ok), "GET", "/")
	problems, err := testutil.GatherAndLint(e.Metrics().Gatherer)
	if err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	names := map[string]bool{}
	mfs, _ := e.Metrics().Gatherer.Gather()
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"sluice_requests_total", "sluice_store_latency_seconds", "sluice_upstream_latency_seconds", "sluice_store_keys"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}
}

// TestManyMatchingRules: more matching rules than the engine keeps on the
// stack all apply, and the one that denies is reported.
func TestManyMatchingRules(t *testing.T) {
	var b strings.Builder
	b.WriteString("adaptive: {algorithm: off}\nrules:\n")
	for i := 0; i < 40; i++ {
		limit := 100
		if i == 33 {
			limit = 2
		}
		fmt.Fprintf(&b, "  - {rule_id: r%d, identifier_type: global, algorithm: fixed_window, limit: %d, window: 1m}\n", i, limit)
	}
	e := newEngine(t, b.String(), sluice.NewFakeClock(statictest.Start))
	h := sidecar.Middleware(e, ok)
	for i := 0; i < 2; i++ {
		if w := do(h, "GET", "/"); w.Code != 200 {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	w := do(h, "GET", "/")
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"violated-policies":["r33"]`) {
		t.Fatalf("third request: %d %s", w.Code, w.Body)
	}
	if got := ruleCount(e, "r0", "not_counted"); got != 1 {
		t.Errorf("r0 not_counted %d, want 1", got)
	}
}

// TestHeaderNamesAnyCase: header names in the config match whatever case
// the request uses, and a handler that appends to a quota header does not
// change its neighbours (they share one backing array).
func TestHeaderNamesAnyCase(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: off}
identity: {user_header: x-user-id}
rules:
  - {rule_id: tenant, identifier_type: "header:x-TENANT", algorithm: fixed_window, limit: 1, window: 1m, match: {required_headers: {x-client-type: mobile}}}
  - {rule_id: user, identifier_type: user_id, algorithm: fixed_window, limit: 5, window: 1m, match: {path_pattern: /u}}
`, sluice.NewFakeClock(statictest.Start))
	h := sidecar.Middleware(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("X-RateLimit-Limit", "appended")
	}))
	if w := do(h, "GET", "/", "X-Tenant", "a", "X-Client-Type", "mobile"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	if w := do(h, "GET", "/", "X-Tenant", "a", "X-Client-Type", "mobile"); w.Code != 429 {
		t.Fatalf("second request of tenant a: %d, want 429", w.Code)
	}
	if w := do(h, "GET", "/", "X-Tenant", "b", "X-Client-Type", "mobile"); w.Code != 200 {
		t.Fatalf("tenant b: %d", w.Code)
	}
	w := do(h, "GET", "/u", "X-User-Id", "u1")
	if w.Code != 200 || w.Header().Get("RateLimit") != `"user";r=4;t=60` {
		t.Fatalf("user rule: %d %v", w.Code, w.Header())
	}
	if got := w.Header().Values("X-RateLimit-Limit"); len(got) != 2 || got[0] != "5" {
		t.Errorf("X-RateLimit-Limit %q", got)
	}
	if got := w.Header().Get("X-RateLimit-Reset"); got != "60" {
		t.Errorf("X-RateLimit-Reset %q after a handler appended to its neighbour", got)
	}
}

// ruleCount returns a rule's count of one decision (allowed, denied,
// would_deny, not_counted) from the engine's state.
func ruleCount(e *engine.Engine, rule, decision string) uint64 {
	for _, r := range e.State().Rules {
		if r.RuleID != rule {
			continue
		}
		switch decision {
		case "allowed":
			return r.Allowed
		case "denied":
			return r.Denied
		case "would_deny":
			return r.WouldDeny
		case "not_counted":
			return r.NotCounted
		}
	}
	return 0
}
