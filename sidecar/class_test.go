package sidecar_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sidecar"
)

const classesYAML = `
adaptive:
  algorithm: fixed
  initial_limit: 4
  classes:
    - {name: critical, share: 0.5, match: {required_headers: {X-Priority: critical}}}
    - {name: browse, share: 0.25, match: {path_pattern: /products/**}}
    - {name: bulk, share: 0.25}
  default_class: bulk
queue: {max_size: 2, max_wait: 1m, order: fifo}
`

func classReq(path string, hdr ...string) *engine.Request {
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	return &engine.Request{Method: "GET", Path: path, RemoteAddr: "192.0.2.1:1", Header: h}
}

// TestClassesShareTheLimit: bulk borrows the whole idle limit; critical
// requests that come then wait and get the slots bulk frees first; a full
// queue pushes out bulk's waiter for a critical one; a shed 503 names its
// class; /v1/state and the metrics count per class.
func TestClassesShareTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, classesYAML, nil)
		ctx := context.Background()
		bulk, crit := classReq("/batch/1"), classReq("/checkout", "X-Priority", "critical")
		var held []engine.Verdict
		for range 4 {
			v, _ := e.Decide(ctx, bulk)
			if !v.Allowed || v.Class != "bulk" {
				t.Fatalf("bulk within the idle limit: %+v", v)
			}
			held = append(held, v)
		}
		type result struct {
			v     engine.Verdict
			class string
		}
		done := make(chan result, 3)
		decide := func(r *engine.Request, class string) {
			go func() {
				v, _ := e.Decide(ctx, r)
				done <- result{v, class}
			}()
			synctest.Wait()
		}
		decide(bulk, "bulk")     // waits
		decide(crit, "critical") // waits: the queue (2) is full
		decide(crit, "critical") // pushes out the bulk waiter
		r := <-done
		if r.class != "bulk" || r.v.Allowed || r.v.Status != 503 || r.v.Class != "bulk" {
			t.Fatalf("first answer: %s %+v, want the bulk waiter shed for a critical one", r.class, r.v)
		}
		w := httptest.NewRecorder()
		sidecar.WriteResponse(w, &r.v)
		var body struct{ Class string }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Class != "bulk" {
			t.Errorf("shed body %s: class %q, want bulk", w.Body, body.Class)
		}
		// Two bulk requests end: both slots go to the critical waiters.
		for i := range 2 {
			held[i].Done(sluice.Success)
			r := <-done
			if r.class != "critical" || !r.v.Allowed {
				t.Fatalf("slot %d went to %s %+v, want a critical waiter", i, r.class, r.v)
			}
			held = append(held, r.v)
		}
		st := e.State()
		if st.Adaptive == nil || len(st.Adaptive.Classes) != 3 {
			t.Fatalf("state classes: %+v", st.Adaptive)
		}
		want := map[string][3]uint64{"critical": {2, 0, 2}, "browse": {0, 0, 0}, "bulk": {4, 1, 2}}
		for _, c := range st.Adaptive.Classes {
			if got := [3]uint64{c.Admitted, c.Shed, uint64(c.InFlight)}; got != want[c.Name] {
				t.Errorf("class %s: admitted, shed, in flight = %v, want %v", c.Name, got, want[c.Name])
			}
		}
		const wantMetrics = `
# HELP sluice_class_requests_total Requests that reached the adaptive gate, by priority class (adaptive.classes) and decision: admitted, shed.
# TYPE sluice_class_requests_total counter
sluice_class_requests_total{class="browse",decision="admitted"} 0
sluice_class_requests_total{class="browse",decision="shed"} 0
sluice_class_requests_total{class="bulk",decision="admitted"} 4
sluice_class_requests_total{class="bulk",decision="shed"} 1
sluice_class_requests_total{class="critical",decision="admitted"} 2
sluice_class_requests_total{class="critical",decision="shed"} 0
`
		if err := testutil.GatherAndCompare(e.Metrics().Gatherer, strings.NewReader(wantMetrics), "sluice_class_requests_total"); err != nil {
			t.Error(err)
		}
		for _, v := range held[2:] {
			v.Done(sluice.Success)
		}
		if st := e.State(); st.Adaptive.InFlight != 0 {
			t.Errorf("in flight %d after every release, want 0", st.Adaptive.InFlight)
		}
	})
}

// TestClassesValidate: bad class blocks are errors that say what is wrong.
func TestClassesValidate(t *testing.T) {
	for yaml, want := range map[string]string{
		"adaptive: {classes: [{name: a, share: 0.7}, {name: b, share: 0.7}]}":              "sum to",
		"adaptive: {classes: [{name: a, share: 0.5}, {name: a, share: 0.1}]}":              "defined twice",
		"adaptive: {classes: [{name: a, share: 1.5}]}":                                     "outside [0, 1]",
		"adaptive: {classes: [{name: a, share: 0.5}], default_class: z}":                   "names no class",
		"adaptive: {classes: [{name: '', share: 0.5}]}":                                    "name",
		"adaptive: {algorithm: off, classes: [{name: a, share: 0.5}]}":                     "algorithm off",
		"adaptive: {classes: [{name: a, share: 0.5, match: {path_pattern: 'x*'}}]}":        "path_pattern",
		"adaptive: {default_class: a}":                                                     "no class",
		"queue: {fairness: global}":                                                        "fairness",
		"queue: {fairness: tenant}":                                                        "fairness",
		"adaptive: {classes: [{name: a, share: 0.5, match: {methods: [get]}}]}":            "methods",
		"adaptive: {classes: [{name: a, share: 0.5, match: {nonsense: true}}]}":            "nonsense",
		"adaptive: {classes: [{name: a, share: 0.5, match: {ip_subnet: 10.0.0.0/33}}]}":    "ip_subnet",
		"adaptive: {classes: [{name: a, share: 0.5, match: {required_headers: {'': x}}}]}": "required_headers",
	} {
		cfg, err := config.Parse("c.yaml", []byte(yaml))
		if err == nil {
			cfg.SetDefaults()
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one about %q", yaml, err, want)
		}
	}
	cfg, err := config.Parse("c.yaml", []byte("adaptive: {classes: [{name: a, share: 0.5}, {name: b, share: 0.5}]}\nqueue: {fairness: 'header:X-Tenant'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil || cfg.Adaptive.DefaultClass != "b" {
		t.Errorf("valid classes: %v, default class %q (want the last, b)", err, cfg.Adaptive.DefaultClass)
	}
}

// TestFairQueueAmongUsers: with queue.fairness: user_id, a user who queues
// ten requests does not make another user's one wait behind them all: it is
// served in the first round of turns, after at most the flood's three
// buckets' turns.
func TestFairQueueAmongUsers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, "adaptive: {algorithm: fixed, initial_limit: 1}\nqueue: {max_wait: 1m, order: fifo, fairness: user_id}\n", nil)
		ctx := context.Background()
		user := func(id string) *engine.Request { return classReq("/", "X-User-ID", id) }
		held, _ := e.Decide(ctx, user("holder"))
		served := make(chan string, 11)
		var wg sync.WaitGroup
		for i := range 11 {
			id := "flood"
			if i == 10 {
				id = "other"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := e.Decide(ctx, user(id))
				if err != nil || !v.Allowed {
					served <- "refused"
					return
				}
				served <- id
				v.Done(sluice.Success)
			}()
			synctest.Wait()
		}
		held.Done(sluice.Success)
		var order []string
		for range 11 {
			order = append(order, <-served)
		}
		wg.Wait()
		if pos := slices.Index(order, "other"); pos < 0 || pos > 3 {
			t.Errorf("served in order %v: the other user at %d, want in the first round (at most 4th)", order, pos+1)
		}
	})
}

// TestHybridIdentity: a rule keyed by [ip_address, user_id] counts each
// (address, user) pair apart, and does not apply to a request without a
// user; on the memory store and on Redis Cluster, where a second rule on
// the same pair shares its hash slot (one script for both).
func TestHybridIdentity(t *testing.T) {
	const rules = `
rules:
  - {rule_id: pair, identifier_type: [ip_address, user_id], algorithm: fixed_window, limit: 2, window: 1m}
  - {rule_id: pair_bucket, identifier_type: [ip_address, user_id], algorithm: token_bucket, limit: 100, window: 1m}
`
	stores := map[string]func(t *testing.T) string{
		"memory": func(*testing.T) string { return "adaptive: {algorithm: off}\n" },
		"redis_cluster": func(t *testing.T) string {
			c := redistest.StartCluster(t)
			return "adaptive: {algorithm: off}\nstore: {type: redis, redis: {addrs: [" + strings.Join(c.Addrs(), ", ") + "], timeout: 2s}}\n"
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, store(t)+rules, nil)
			defer e.Close()
			checkHybrid(t, e)
		})
	}
}

func checkHybrid(t *testing.T, e *engine.Engine) {
	t.Helper()
	ctx := context.Background()
	req := func(addr, user string) *engine.Request {
		r := classReq("/x")
		if user != "" {
			r = classReq("/x", "X-User-ID", user)
		}
		r.RemoteAddr = addr + ":1"
		return r
	}
	for i, c := range []struct {
		addr, user string
		allowed    bool
	}{
		{"192.0.2.1", "alice", true}, {"192.0.2.1", "alice", true}, {"192.0.2.1", "alice", false},
		{"192.0.2.2", "alice", true},                                              // another address: another pair
		{"192.0.2.1", "bob", true},                                                // another user: another pair
		{"192.0.2.1", "", true}, {"192.0.2.1", "", true}, {"192.0.2.1", "", true}, // no user: the rules do not apply
	} {
		v, err := e.Decide(ctx, req(c.addr, c.user))
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed != c.allowed {
			t.Errorf("request %d (%s, %q): allowed %v, want %v (%+v)", i, c.addr, c.user, v.Allowed, c.allowed, v.Decision)
		}
		if v.Allowed {
			v.Done(sluice.Success)
		}
	}
}

func TestHybridIdentityValidate(t *testing.T) {
	for yaml, want := range map[string]string{
		"[global, user_id]":   "global cannot be combined",
		"[user_id, user_id]":  "twice",
		"[]":                  "[]",
		"[user_id, nonsense]": "nonsense",
		"[user_id, 'a,b']":    "a,b",
		"[ip_address, user_id, api_key, 'header:A', 'header:B']": "at most 4",
	} {
		_, err := config.Parse("c.yaml", []byte("rules: [{rule_id: r, identifier_type: "+yaml+", algorithm: fixed_window, limit: 1, window: 1s}]"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("identifier_type %s: error %v, want one about %q", yaml, err, want)
		}
	}
}

// TestClassesThroughMiddleware: the middleware sorts requests into classes
// too, and its shed 503 names the class.
func TestClassesThroughMiddleware(t *testing.T) {
	e := newEngine(t, `
adaptive:
  algorithm: fixed
  initial_limit: 1
  classes:
    - {name: critical, share: 0.5, match: {required_headers: {X-Priority: critical}}}
    - {name: bulk, share: 0.5}
queue: {max_size: 0}
`, nil)
	held, _ := e.Decide(context.Background(), classReq("/"))
	defer held.Done(sluice.Success)
	w := do(sidecar.Middleware(e, ok), "GET", "/checkout", "X-Priority", "critical")
	var body struct{ Class string }
	if w.Code != 503 || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Class != "critical" {
		t.Errorf("shed through the middleware: %d %s, want 503 naming class critical", w.Code, w.Body)
	}
}
