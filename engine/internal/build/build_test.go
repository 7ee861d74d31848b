package build

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
)

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var clock = sluice.NewFakeClock(time.Unix(1_700_000_000, 0))

// Each store section makes its parts, and only those.
func TestStoresOfEachSection(t *testing.T) {
	mem, err := NewStores(parse(t, "store: {type: memory}\n"), nil, nil, clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mem.Store != mem.Memory || mem.Memory == nil || mem.Redis != nil || mem.Fleet != nil || mem.Budgets != nil {
		t.Errorf("memory section: %+v", mem)
	}

	// Redis: opening the client is no round trip, so an address nobody
	// listens on builds; the store is Redis behind its failure policy,
	// the memory store its fallback.
	r, err := NewStores(parse(t, "store: {type: redis, redis: {addrs: ['127.0.0.1:1'], deny_cache_keys: 100}}\n"), nil, nil, clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Redis == nil || r.Memory == nil || r.Deny == nil || r.Fleet != nil {
		t.Errorf("redis section: %+v", r)
	}
	if _, ok := r.Store.(*static.Failover); !ok {
		t.Errorf("redis store is %T, want the failure policy's *static.Failover", r.Store)
	}
	if err := r.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}

	ev, err := NewStores(parse(t, "store: {type: redis, redis: {addrs: ['127.0.0.1:1'], consistency: eventual}}\n"), nil, nil, clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if ev.Fleet == nil {
		t.Error("eventual consistency made no fleet store")
	}

	// A store given is used as is.
	given := static.NewMemory(static.MemoryOptions{})
	g, err := NewStores(parse(t, "store: {type: memory}\n"), given, given, clock, nil)
	if err != nil || g.Store != given || g.Memory != given {
		t.Errorf("given store: %+v, %v", g, err)
	}
}

// A TLS file that cannot be read is an error naming the key, and nothing
// stays open.
func TestStoresErrorNamesTheKey(t *testing.T) {
	_, err := NewStores(parse(t, "store: {type: redis, redis: {addrs: ['127.0.0.1:1'], tls: {ca_file: /nonexistent/ca.pem}}}\n"), nil, nil, clock, nil)
	if err == nil || !strings.Contains(err.Error(), "store.redis.tls") {
		t.Fatalf("error %v, want one naming store.redis.tls", err)
	}
}

// The gate: none when the adaptive limit is off; the classes partition the
// limiter and order the queue, highest first.
func TestGate(t *testing.T) {
	off, err := NewGate(parse(t, "adaptive: {algorithm: off}\n"), GateOptions{Clock: clock})
	if off != nil || err != nil {
		t.Fatalf("off: %+v, %v", off, err)
	}
	g, err := NewGate(parse(t, `
adaptive:
  algorithm: gradient2
  classes:
    - {name: interactive, share: 0.7, match: {path_pattern: /api/**}}
    - {name: batch, share: 0.3}
`), GateOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if g.Limiter == nil || g.Part == nil || g.Queue == nil || strings.Join(g.Classes, ",") != "interactive,batch" {
		t.Fatalf("gate %+v", g)
	}
	p, ok := g.Part.TryAcquire(0)
	if !ok {
		t.Fatal("no slot for the first request of the highest class")
	}
	p.Release(sluice.Ignore)
	plain, err := NewGate(parse(t, "adaptive: {algorithm: vegas}\n"), GateOptions{Clock: clock})
	if err != nil || plain.Part != nil || plain.Classes != nil {
		t.Fatalf("no classes: %+v, %v", plain, err)
	}
}
