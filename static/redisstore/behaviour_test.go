package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
	"github.com/sluicehq/sluice/static/statictest"
)

// evalCalls sums the EVALSHA and EVAL calls the servers have answered.
func evalCalls(t *testing.T, servers ...*redistest.Server) int {
	t.Helper()
	total := 0
	for _, s := range servers {
		for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
			v := s.InfoField("commandstats", cmd) // calls=N,usec=...
			if v == "" {
				continue
			}
			f, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("INFO commandstats %s: %q", cmd, v)
			}
			total += n
		}
	}
	return total
}

func rules(ids ...string) []*static.Policy {
	var ps []*static.Policy
	for range ids {
		ps = append(ps, &static.Policy{Algorithm: static.FixedWindow, Limit: 100, Window: time.Minute})
	}
	return ps
}

// TestOneRoundTrip proves with the servers' own command counters that a
// request costs one script call per hash slot, and one round trip in all.
func TestOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	limitsFor := func(identifiers ...string) []static.Limit {
		var ls []static.Limit
		for i, id := range identifiers {
			ls = append(ls, static.Limit{RuleID: "r" + strconv.Itoa(i), Key: "{" + id + "}:r" + strconv.Itoa(i),
				Policy: rules("x")[0], Cost: 1})
		}
		return ls
	}
	t.Run("single_node_three_rules", func(t *testing.T) {
		srv := redistest.Start(t)
		s := redisstore.New(client(t, srv.Addr()), redisstore.Options{})
		if err := s.Load(ctx); err != nil {
			t.Fatal(err)
		}
		before, trips := evalCalls(t, srv), s.Stats().RoundTrips
		// Three rules on two identifiers: one node, one script call.
		if res, err := s.Check(ctx, limitsFor("user:1", "user:1", "ip:10.0.0.1"), nil); err != nil || !res.Allowed {
			t.Fatalf("%+v %v", res.Decision, err)
		}
		if got := evalCalls(t, srv) - before; got != 1 {
			t.Errorf("script calls: %d, want 1", got)
		}
		if got := s.Stats().RoundTrips - trips; got != 1 {
			t.Errorf("round trips: %d, want 1", got)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		s := redisstore.New(client(t, cl.Addrs()...), redisstore.Options{})
		if err := s.Load(ctx); err != nil {
			t.Fatal(err)
		}
		before, trips := evalCalls(t, cl.Masters...), s.Stats().RoundTrips
		if _, err := s.Check(ctx, limitsFor("user:1", "user:1", "user:1"), nil); err != nil {
			t.Fatal(err)
		}
		if got := evalCalls(t, cl.Masters...) - before; got != 1 {
			t.Errorf("three rules, one identifier: %d script calls, want 1", got)
		}
		// Identifiers in three different slots: three script calls, still
		// one pipeline.
		ids := distinctSlots(3)
		before = evalCalls(t, cl.Masters...)
		if _, err := s.Check(ctx, limitsFor(ids...), nil); err != nil {
			t.Fatal(err)
		}
		if got := evalCalls(t, cl.Masters...) - before; got != 3 {
			t.Errorf("three slots: %d script calls, want 3", got)
		}
		if got := s.Stats().RoundTrips - trips; got != 2 {
			t.Errorf("round trips for two requests: %d, want 2", got)
		}
	})
}

// distinctSlots returns n identifiers whose keys fall in different slots.
func distinctSlots(n int) []string {
	var out []string
	seen := map[uint16]bool{}
	for i := 0; len(out) < n; i++ {
		id := "id" + strconv.Itoa(i)
		if slot := redisstore.Slot("{" + id + "}"); !seen[slot] {
			seen[slot] = true
			out = append(out, id)
		}
	}
	return out
}

// TestScriptFlush: after SCRIPT FLUSH (or a failover to a server that never
// saw the scripts) checks still work; the NOSCRIPT reply is repaired.
func TestScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	s := redisstore.New(client(t, srv.Addr()), redisstore.Options{})
	// 10 a minute: a token every 6 s, so a slow machine's three checks
	// still fall within the burst's time.
	l := []static.Limit{{RuleID: "r", Key: "{u}:r", Policy: &static.Policy{Algorithm: static.GCRA, Limit: 10, Window: time.Minute, Burst: 1}, Cost: 1}}
	for i := 0; i < 2; i++ {
		if _, err := s.Check(context.Background(), l, nil); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		mustDo(t, srv, "SCRIPT", "FLUSH")
	}
	res, err := s.Check(context.Background(), l, nil)
	if err != nil || res.Allowed {
		t.Fatalf("third check within the burst of 2: %+v %v, want denied", res.Decision, err)
	}
}

// TestExactAcrossClients: many goroutines on several separate clients
// hammer one key; exactly the limit is admitted.
func TestExactAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	const limit = 200
	p := &static.Policy{Algorithm: static.SlidingLog, Limit: limit, Window: time.Hour}
	l := []static.Limit{{RuleID: "hot", Key: "{hot}:log", Policy: p, Cost: 1}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		s := redisstore.New(client(t, srv.Addr()), redisstore.Options{Timeout: 2 * time.Second})
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 15; i++ {
					res, err := s.Check(context.Background(), l, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != limit {
		t.Errorf("admitted %d of 480 attempts, want exactly %d", got, limit)
	}
}

// TestExactAcrossProcesses runs this test binary as four OS processes that
// hammer one key through one Redis; their admissions add up to the limit.
func TestExactAcrossProcesses(t *testing.T) {
	if addr := os.Getenv("SLUICE_HAMMER_ADDR"); addr != "" {
		hammer(t, addr)
		return
	}
	srv := redistest.Start(t)
	const procs = 4
	outs := make([]string, procs)
	var wg sync.WaitGroup
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestExactAcrossProcesses$", "-test.v")
			cmd.Env = append(os.Environ(), "SLUICE_HAMMER_ADDR="+srv.Addr())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("process %d: %v\n%s", i, err, out)
			}
			outs[i] = string(out)
		}()
	}
	wg.Wait()
	total := 0
	for _, out := range outs {
		_, rest, ok := strings.Cut(out, "ADMITTED=")
		if !ok {
			t.Fatalf("no count in output:\n%s", out)
		}
		n, _ := strconv.Atoi(strings.Fields(rest)[0])
		total += n
	}
	if total != hammerLimit {
		t.Errorf("processes admitted %d in all, want exactly %d", total, hammerLimit)
	}
}

const hammerLimit = 150

func hammer(t *testing.T, addr string) {
	s := redisstore.New(client(t, addr), redisstore.Options{Timeout: 2 * time.Second})
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: hammerLimit, Window: time.Hour}
	l := []static.Limit{{RuleID: "hot", Key: "{proc}:fixed", Policy: p, Cost: 1}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				res, err := s.Check(context.Background(), l, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("ADMITTED=%d\n", admitted.Load())
}

// TestFailurePolicies kills the real Redis under load: every rule's failure
// policy holds, no check hangs past its deadline, the store is back on Redis
// within a second of Redis returning, and no goroutine is left behind.
func TestFailurePolicies(t *testing.T) {
	// The harness's goroutine that waits for the restarted server process
	// ends with the test's cleanup, after this check.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.(*Server).start.func1"))
	srv := redistest.Start(t)
	rc, err := redisstore.NewClient(redisstore.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	primary := redisstore.New(rc, redisstore.Options{})
	localClock := sluice.NewFakeClock(statictest.Start)
	store := static.NewFailover(primary, static.NewMemory(static.MemoryOptions{Clock: localClock}), 2)
	window := &static.Policy{Algorithm: static.FixedWindow, Limit: 10, Window: time.Minute}
	local := []static.Limit{{RuleID: "local", Key: "{u}:local", Policy: window, Cost: 1, OnError: static.FailLocal}}
	open := []static.Limit{{RuleID: "open", Key: "{u}:open", Policy: window, Cost: 1, OnError: static.FailOpen}}
	closed := []static.Limit{{RuleID: "closed", Key: "{u}:closed", Policy: window, Cost: 1, OnError: static.FailClosed}}

	check := func(l []static.Limit) static.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		res, err := store.Check(ctx, l, nil)
		if err != nil {
			t.Fatalf("check %s: %v (a check must not hang or fail: the policy decides)", l[0].RuleID, err)
		}
		return res
	}
	if res := check(local); !res.Allowed || res.Fallback != nil {
		t.Fatalf("with Redis up: %+v, fallback %v", res.Decision, res.Fallback)
	}

	srv.Stop()
	var localAdmitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if res := check(local); res.Allowed {
					localAdmitted.Add(1)
				} else if res.Fallback == nil {
					t.Error("a denial while Redis is down does not say it fell back")
				}
				if res := check(open); !res.Allowed {
					t.Errorf("open rule denied while Redis is down: %+v", res.Decision)
				}
				if res := check(closed); res.Allowed || res.Reason != sluice.ReasonStoreDown || res.RetryAfter != static.StoreDownRetry {
					t.Errorf("closed rule: %+v, want denied for store_down", res.Decision)
				}
			}
		}()
	}
	wg.Wait()
	// Two instances share the quota of 10: each enforces 5 locally.
	if got := localAdmitted.Load(); got != 5 {
		t.Errorf("local fallback admitted %d, want 5 (limit 10 / 2 instances)", got)
	}
	if st := primary.Stats(); st.Breaker != "open" || st.Errors == 0 {
		t.Errorf("after Redis died: %+v, want errors counted and the breaker open", st)
	}

	srv.Restart()
	back := time.Now()
	for {
		if res := check(local); res.Fallback == nil {
			break
		}
		// The breaker probes every 250 ms; 10 s is generous on a busy machine.
		if time.Since(back) > 10*time.Second {
			t.Fatalf("still falling back %v after Redis came back", time.Since(back))
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc.Close()
}

// TestSentinel runs the conformance tables through a Sentinel-discovered
// master, then fails over to the replica and checks limits keep working.
func TestSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t)
	newClient := func(t *testing.T) *redisstore.Store {
		c, err := redisstore.NewClient(redisstore.Config{Addrs: []string{sn.Sentinel.Addr()}, MasterName: sn.MasterName, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return redisstore.New(c, redisstore.Options{Timeout: time.Second})
	}
	n := 0
	t.Run("conformance", func(t *testing.T) {
		for _, c := range statictest.Cases() {
			t.Run(c.Name, func(t *testing.T) {
				statictest.RunCase(t, func(t *testing.T, clock sluice.Clock) static.Store {
					n++
					c, err := redisstore.NewClient(redisstore.Config{Addrs: []string{sn.Sentinel.Addr()}, MasterName: sn.MasterName, Timeout: time.Second})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { c.Close() })
					return redisstore.New(c, redisstore.Options{Clock: clock, Prefix: "s" + strconv.Itoa(n), Timeout: time.Second})
				}, c)
			})
		}
	})
	t.Run("failover", func(t *testing.T) {
		s := newClient(t)
		p := &static.Policy{Algorithm: static.FixedWindow, Limit: 5, Window: time.Hour}
		l := []static.Limit{{RuleID: "r", Key: "{fo}:r", Policy: p, Cost: 1}}
		for i := 0; i < 3; i++ {
			if res, err := s.Check(context.Background(), l, nil); err != nil || !res.Allowed {
				t.Fatalf("before failover: %+v %v", res.Decision, err)
			}
		}
		// Let the replica catch up, then promote it.
		if out := mustDo(t, sn.Master, "WAIT", "1", "2000"); out != "1" {
			t.Fatalf("WAIT: %s", out)
		}
		sn.Failover(t)
		// While the clients settle on the new master a check may fail (a
		// connection to the old one, now a replica, answers READONLY):
		// nothing is counted then, and the check is tried again.
		deadline := time.Now().Add(15 * time.Second)
		check := func(nth string) static.Result {
			t.Helper()
			for {
				res, err := s.Check(context.Background(), l, nil)
				if err == nil {
					return res
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: no answer from the new master: %v", nth, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		// The new master has the replicated counter: 3 used, this is the 4th.
		if res := check("4th"); !res.Allowed || res.Remaining != 1 {
			t.Fatalf("after failover: %+v, want allowed with 1 remaining", res.Decision)
		}
		if res := check("5th"); !res.Allowed {
			t.Fatalf("5th: %+v", res.Decision)
		}
		if res := check("6th"); res.Allowed {
			t.Fatal("6th admitted past the limit after failover")
		}
	})
}

// TestBadReplies: data that sluice did not write under its keys yields an
// error, never a panic or a silent admission.
func TestBadReplies(t *testing.T) {
	srv := redistest.Start(t)
	s := redisstore.New(client(t, srv.Addr()), redisstore.Options{Prefix: "bad"})
	mustDo(t, srv, "SET", "bad:{k}:r", "not a hash")
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 5, Window: time.Minute}
	_, err := s.Check(context.Background(), []static.Limit{{RuleID: "r", Key: "{k}:r", Policy: p, Cost: 1}}, nil)
	if err == nil {
		t.Fatal("a key of the wrong type gave no error")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wrong error: %v", err)
	}
}

// An emission interval that falls between two microseconds (7 per
// 1,000,001 us: one per 142,857.29 us) rounds up, never down: a key that
// spent its whole bucket at once is whole again no sooner than the window,
// on the fast script and on the general one (a warm-up sends it there), in
// Redis and in memory (issue 25, item 15: at 600,000 per second Redis
// admitted 164 where memory admitted 109).
func TestIntervalBetweenMicrosecondsRoundsUp(t *testing.T) {
	srv := redistest.Start(t)
	store := redisstore.New(client(t, srv.Addr()), redisstore.Options{})
	mem := static.NewMemory(static.MemoryOptions{})
	window := 1_000_001 * time.Microsecond
	for _, p := range []*static.Policy{
		{Algorithm: static.GCRA, Limit: 7, Window: window, Burst: 7},
		{Algorithm: static.TokenBucket, Limit: 7, Window: window},
		{Algorithm: static.TokenBucket, Limit: 7, Window: window, Warmup: time.Second},
	} {
		for name, s := range map[string]static.Store{"redis": store, "memory": mem} {
			key := fmt.Sprintf("{round}:%s:%v:%s", p.Algorithm, p.Warmup, name)
			cost := p.Capacity()
			res, err := s.Check(context.Background(), []static.Limit{{RuleID: "r", Key: key, Policy: p, Cost: cost}}, nil)
			if err != nil || !res.Allowed {
				t.Fatalf("%s %s: spending the bucket (%d): %+v %v", name, p.Algorithm, cost, res, err)
			}
			// The bucket refills at the rate: spent whole, it is whole
			// again cost x W/L later, which rounds up to no less than
			// cost/L of the window.
			min := time.Duration(float64(window) * float64(cost) / float64(p.Limit))
			if res.ResetAfter < min {
				t.Errorf("%s %s warmup %v: whole again after %v, before %v: the rate is kept too fast",
					name, p.Algorithm, p.Warmup, res.ResetAfter, min)
			}
		}
	}
}

// A fixed window with count_blocked counts every hit, refused ones too, as
// envoyproxy/ratelimit's fixed windows do (issue 26): on 20 a minute, 15
// hits then 10 leave remaining 0 and the window over its limit, so the next
// single hit is refused too; and a rule that counts blocked hits consumes
// even when another rule of the request denies. Memory and Redis agree.
func TestFixedWindowCountBlocked(t *testing.T) {
	srv := redistest.Start(t)
	stores := map[string]static.Store{"redis": redisstore.New(client(t, srv.Addr()), redisstore.Options{}), "memory": static.NewMemory(static.MemoryOptions{})}
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 20, Window: time.Hour, CountBlocked: true}
	closed := &static.Policy{Algorithm: static.FixedWindow, Limit: 0, Window: time.Hour}
	for name, s := range stores {
		ctx := context.Background()
		check := func(key string, cost int64, also ...static.Limit) static.Result {
			t.Helper()
			res, err := s.Check(ctx, append([]static.Limit{{RuleID: "c", Key: "{cb}:" + name + key, Policy: p, Cost: cost}}, also...), nil)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		if r := check("a", 15); !r.Allowed || r.Remaining != 5 {
			t.Fatalf("%s: 15 of 20: %+v", name, r.Decision)
		}
		if r := check("a", 10); r.Allowed || r.Remaining != 0 {
			t.Errorf("%s: 10 more (25 > 20): %+v, want refused with 0 left", name, r.Decision)
		}
		if r := check("a", 1); r.Allowed || r.Remaining != 0 {
			t.Errorf("%s: one more after the window went over: %+v, want refused", name, r.Decision)
		}
		// Another rule of the request denies: the counting rule still counts.
		other := static.Limit{RuleID: "z", Key: "{cb}:" + name + "zero", Policy: closed, Cost: 1}
		if r := check("b", 3, other); r.Allowed {
			t.Fatalf("%s: a request a closed rule denies was allowed", name)
		}
		if r := check("b", 1); !r.Allowed || r.Remaining != 16 {
			t.Errorf("%s: after 3 counted (denied by another rule) and 1: %+v, want 16 left", name, r.Decision)
		}
	}
}
