package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
	"github.com/sluicehq/sluice/static/statictest"
)

func client(t *testing.T, addrs ...string) redis.UniversalClient {
	t.Helper()
	return clientOf(t, redisstore.Config{Addrs: addrs})
}

// patientClient is client with a timeout of seconds, for tests of what a
// store decides rather than of how long it waits: under the race detector
// beside every other package's tests, a round trip once outlasted the
// default 50 ms.
func patientClient(t *testing.T, addr string) redis.UniversalClient {
	t.Helper()
	return clientOf(t, redisstore.Config{Addrs: []string{addr}, Timeout: 5 * time.Second})
}

// clientOf is a client made from cfg, closed when the test ends.
func clientOf(t *testing.T, cfg redisstore.Config) redis.UniversalClient {
	t.Helper()
	c, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformanceSingleNode(t *testing.T) {
	srv := redistest.Start(t)
	n := 0
	statictest.Run(t, func(t *testing.T, clock sluice.Clock) static.Store {
		n++ // a fresh prefix per store: the tables reuse keys
		return redisstore.New(client(t, srv.Addr()), redisstore.Options{Clock: clock, Prefix: "t" + strconv.Itoa(n)})
	})
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	n := 0
	statictest.Run(t, func(t *testing.T, clock sluice.Clock) static.Store {
		n++
		return redisstore.New(client(t, cl.Addrs()...), redisstore.Options{Clock: clock, Prefix: "t" + strconv.Itoa(n)})
	})
	// Our slot function agrees with the servers'.
	for _, key := range []string{"a", "sluice:{user:42}:orders", "sluice:case:gcra/redis_cell", "{}x", "x{y}z{w}"} {
		out, err := cl.Masters[0].Do("CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatal(err)
		}
		if got := strconv.Itoa(int(redisstore.Slot(key))); got != strings.TrimSpace(out) {
			t.Errorf("Slot(%q) = %s, server says %s", key, got, out)
		}
	}
}

func TestLoadPreloadsEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := redisstore.New(client(t, cl.Addrs()...), redisstore.Options{})
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, m := range cl.Masters {
		if n := strings.Count(mustDo(t, m, "SCRIPT", "EXISTS", scriptSHA(t, m)), "1"); n != 1 {
			t.Errorf("%s: check script not loaded", m.Addr())
		}
	}
}

func mustDo(t *testing.T, s *redistest.Server, args ...string) string {
	t.Helper()
	out, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%v: %v %s", args, err, out)
	}
	return out
}

// scriptSHA is the SHA1 the server computes for check.lua.
func scriptSHA(t *testing.T, s *redistest.Server) string {
	t.Helper()
	return redis.NewScript(redisstore.CheckSource()).Hash()
}

// Every reload makes new policies; the argument cache must not keep them all.
func TestPolicyCacheBounded(t *testing.T) {
	c, err := redisstore.NewClient(redisstore.Config{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := redisstore.New(c, redisstore.Options{})
	for i := range 10_000 {
		p := &static.Policy{Algorithm: static.FixedWindow, Limit: int64(i%10 + 1), Window: time.Second}
		s.ArgsOf(p)
	}
	if n := s.CachedPolicies(); n > 1024 {
		t.Errorf("argument cache holds %d policies after 10,000 reloads' worth", n)
	}
}
