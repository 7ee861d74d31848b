package daemon_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/daemon"
)

// A configuration built in Go, without config.Parse: New fills the
// defaults itself (queue size, adaptive bounds, modes) instead of

// startServer starts a daemon.Server on yaml (listen and admin on free
// loopback ports) and shuts it down when the test ends (Shutdown is
// idempotent: a test may shut it down itself).
func startServer(t testing.TB, yaml string) *daemon.Server {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := daemon.New(cfg, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// dereferencing nil pointers.
func TestNewWithConfigBuiltInGo(t *testing.T) {
	limit := int64(1)
	cfg := &config.Config{Rules: []config.Rule{{RuleID: "one", IdentifierType: "global", Algorithm: "fixed_window",
		Limit: &limit, Window: config.Duration(time.Minute)}}}
	e, err := engine.New(cfg, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h := sidecar.Middleware(e, ok)
	if a, b := do(h, "GET", "/").Code, do(h, "GET", "/").Code; a != 200 || b != 429 {
		t.Errorf("codes %d %d, want 200 429", a, b)
	}
	if cfg.Queue.MaxSize != nil || cfg.Rules[0].Mode != "" {
		t.Error("New wrote the caller's configuration")
	}

	// Invalid or missing pieces are errors, not panics.
	for name, c := range map[string]*config.Config{
		"nil":      nil,
		"no limit": {Rules: []config.Rule{{RuleID: "x", IdentifierType: "global", Algorithm: "fixed_window"}}},
		"bad alg":  {Rules: []config.Rule{{RuleID: "x", IdentifierType: "global", Algorithm: "nope", Limit: &limit}}},
		"bad mode": {Adaptive: config.Adaptive{Algorithm: "magic"}},
	} {
		if _, err := engine.New(c, engine.Options{}); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func TestCloseAndShutdownAreIdempotent(t *testing.T) {
	e := newEngine(t, twoPerMinute, nil)
	e.Start()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Close() }()
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	s := startServer(t, "upstream: http://127.0.0.1:1\n"+twoPerMinute)
	// The daemon's registry carries the Go and process collectors.
	mfs, err := s.Engine.Metrics().Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"go_goroutines", "process_resident_memory_bytes", "sluice_store_errors_total"} {
		if !names[n] {
			t.Errorf("daemon /metrics lacks %s", n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Shutdown(ctx) }()
	}
	wg.Wait()
	_ = s.Shutdown(ctx)
}

// Two engines on one registry, or a registry that already holds a sluice_*
// name: an error from New, and the registry keeps what it had.
func TestMetricsOnASharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg, _ := config.Parse("t.yaml", []byte(twoPerMinute))
	e1, err := engine.New(cfg, engine.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	if _, err := engine.New(cfg, engine.Options{Registerer: reg}); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("second engine on one registry: %v", err)
	}
	mfs, _ := reg.Gather()
	if len(mfs) == 0 {
		t.Fatal("the first engine's metrics were removed")
	}

	app := prometheus.NewRegistry()
	app.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_store_errors_total", Help: "mine"}))
	if _, err := engine.New(cfg, engine.Options{Registerer: app}); err == nil {
		t.Fatal("a registry holding sluice_store_errors_total was accepted")
	}
	mfs, _ = app.Gather()
	if len(mfs) != 1 {
		t.Fatalf("the failed New left %d metric families, want the app's 1", len(mfs))
	}
}

// /v1/state's store health says what the Redis store is doing: a half-open
// circuit (trial checks only) is not healthy.
func TestStoreStateFollowsTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, `
store: {type: redis, redis: {addrs: [`+srv.Addr()+`], timeout: 100ms}}
adaptive: {algorithm: off}
rules:
  - {rule_id: r, identifier_type: global, algorithm: fixed_window, limit: 1000000, window: 1m}
`, nil)
	defer e.Close()
	e.Start()
	deadline := time.Now().Add(10 * time.Second)
	for !e.State().Store.Healthy {
		if time.Now().After(deadline) {
			t.Fatalf("never healthy: %+v", e.State().Store)
		}
		time.Sleep(10 * time.Millisecond) // polls the engine's readiness, not a limit
	}
	if st := e.State().Store; st.Status != "up" {
		t.Fatalf("status %q while healthy", st.Status)
	}
	srv.Stop()
	h := sidecar.Middleware(e, ok)
	for range 10 {
		do(h, "GET", "/")
	}
	if st := e.State().Store; st.Healthy || st.Status != "down" {
		t.Fatalf("after failures: %+v, want unhealthy and down", st)
	}
	seen := false
	for !seen && time.Now().Before(deadline) {
		st := e.State().Store
		if st.Breaker == "half-open" {
			seen = true
			if st.Healthy || st.Status != "probing" {
				t.Fatalf("half-open breaker reported as %+v", st)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !seen {
		t.Fatal("the breaker never went half-open")
	}
}

// On Redis too, a client that leaves as its check runs leaks no slot.
func TestRedisClientLeavesGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, `
store: {type: redis, redis: {addrs: [`+srv.Addr()+`], timeout: 2s}}
adaptive: {algorithm: off}
rules:
  - {rule_id: conc, identifier_type: global, algorithm: concurrency, limit: 1}
  - {rule_id: quota, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h}
`, nil)
	defer e.Close()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	req := &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1"}
	if _, err := e.Decide(gone, req); err == nil {
		t.Fatal("a client that left got a verdict")
	}
	v, err := e.Decide(context.Background(), req)
	if err != nil || !v.Allowed {
		t.Fatalf("after a client left: %+v %v: its slot or quota leaked", v.Decision, err)
	}
	v.Done(sluice.Success)
}
