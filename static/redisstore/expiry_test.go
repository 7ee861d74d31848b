package redisstore_test

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
	"github.com/sluicehq/sluice/static/statictest"
)

// hour is a TTL no write of these tests' policies needs.
const hour = time.Hour

// stored is the Redis key of a limit's key under the default prefix.
func stored(key string) string { return redisstore.DefaultPrefix + ":" + key }

// pttl returns key's remaining life, as c reads it.
func pttl(t *testing.T, c redis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// stateF returns the fifth number of key's binary state.
func stateF(t *testing.T, c redis.UniversalClient, key string) float64 {
	t.Helper()
	v, err := c.Get(context.Background(), key).Bytes()
	if err != nil || len(v) < 41 || v[0] != 0 {
		t.Fatalf("state of %s: %q, %v", key, v, err)
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(v[33:41]))
}

// TestKeyLifeIsSetOnlyWhenItMustGrow: on the server's clock, fast.lua sets
// a key's expiry only when the state needs a longer life than the key is
// known to have (setting one costs Redis a fifth of the script), and then
// sets it with room to spare.
func TestKeyLifeIsSetOnlyWhenItMustGrow(t *testing.T) {
	srv := redistest.Start(t)
	c := patientClient(t, srv.Addr())
	s := redisstore.New(c, redisstore.Options{}) // the server's clock
	p := &static.Policy{Algorithm: static.GCRA, Limit: 10, Window: time.Second, Burst: 1000}
	key := "{u}:r"
	rkey := stored(key)
	check := func(cost int64) time.Duration {
		t.Helper()
		each := make([]sluice.Decision, 1)
		res, err := s.Check(context.Background(), []static.Limit{{RuleID: "r", Key: key, Policy: p, Cost: cost}}, each)
		if err != nil || !res.Allowed {
			t.Fatalf("cost %d: %+v, %v; want allowed", cost, res.Decision, err)
		}
		return each[0].ResetAfter
	}
	reset := check(1)
	if got := pttl(t, c, rkey); got < reset+time.Second-100*time.Millisecond {
		t.Fatalf("first write: the key lives %v, its state %v and a second", got, reset)
	}
	// A life longer than any need: a write that needs no more keeps it.
	if err := c.PExpire(context.Background(), rkey, hour).Err(); err != nil {
		t.Fatal(err)
	}
	check(1)
	if got := pttl(t, c, rkey); got < hour-time.Minute {
		t.Fatalf("a write that needs about a second set the key's life to %v; want the hour it had kept", got)
	}
	// A life shorter than the state's need is made long enough: 100
	// tokens at 10 a second hold the state for 10 s.
	if err := c.PExpire(context.Background(), rkey, 2*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	reset = check(100)
	if reset < 9*time.Second {
		t.Fatalf("reset after 100 tokens: %v, want about 10 s", reset)
	}
	if got := pttl(t, c, rkey); got < reset+time.Second-100*time.Millisecond {
		t.Fatalf("the key lives %v, its state %v and a second", got, reset)
	}
}

// TestKeyOutlivesItsState: whatever writes a key (fast.lua, check.lua, an
// earlier version's script that carries the expiry note forward with a
// later time and a shorter life), each key lives at least as long as its
// state after every decision, one limit or two per call, on the server's
// clock.
func TestKeyOutlivesItsState(t *testing.T) {
	srv := redistest.Start(t)
	c := patientClient(t, srv.Addr())
	fast := redisstore.New(c, redisstore.Options{})
	full := redisstore.New(c, redisstore.WithoutFast(redisstore.Options{}))
	policies := []*static.Policy{
		{Algorithm: static.GCRA, Limit: 20, Window: time.Second, Burst: 200},
		{Algorithm: static.TokenBucket, Limit: 5, Window: time.Second, Burst: 100},
		{Algorithm: static.LeakyBucket, Limit: 50, Window: time.Second, Burst: 100, NoDelay: true},
		{Algorithm: static.FixedWindow, Limit: 1000, Window: 3 * time.Second},
		{Algorithm: static.SlidingWindow, Limit: 1000, Window: 2 * time.Second},
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		n := 1 + rng.IntN(2)
		limits := make([]static.Limit, n)
		for i := range limits {
			limits[i] = static.Limit{RuleID: "r" + strconv.Itoa(i), Key: "{u}:r" + strconv.Itoa(i), Policy: policies[(round/20+i)%len(policies)], Cost: 1 + rng.Int64N(8)}
		}
		store := fast
		switch rng.IntN(10) {
		case 0:
			store = full
		case 1:
			// An earlier version's check.lua: the same state and f, a
			// later last, its own short expiry.
			key := stored(limits[0].Key)
			v, err := c.Get(ctx, key).Bytes()
			if err == nil && len(v) >= 41 && v[0] == 0 {
				last := math.Float64frombits(binary.LittleEndian.Uint64(v[1:9]))
				binary.LittleEndian.PutUint64(v[1:9], math.Float64bits(last+float64(1+rng.IntN(1000))))
				if err := c.Set(ctx, key, v, 50*time.Millisecond).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		each := make([]sluice.Decision, n)
		start := time.Now()
		res, err := store.Check(ctx, limits, each)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			continue
		}
		for i, l := range limits {
			got := pttl(t, c, stored(l.Key))
			// A second past the state, less what may have passed since
			// the decision and a generous allowance for a slow machine.
			want := each[i].ResetAfter + time.Second - time.Since(start) - 200*time.Millisecond
			if got < want {
				t.Fatalf("round %d, %s (%v): the key lives %v, its state needs %v and a second", round, l.Key, l.Policy.Algorithm, got, each[i].ResetAfter)
			}
		}
	}
}

// TestOtherScriptsClearTheExpiryNote: check.lua and charge.lua write their
// own expiry, so they leave fast.lua's note of the key's expiry at 0
// (unknown) rather than carrying forward one that their write made wrong.
func TestOtherScriptsClearTheExpiryNote(t *testing.T) {
	srv := redistest.Start(t)
	c := patientClient(t, srv.Addr())
	p := &static.Policy{Algorithm: static.GCRA, Limit: 10, Window: time.Second, Burst: 50}
	limits := []static.Limit{{RuleID: "r", Key: "{u}:r", Policy: p, Cost: 1}}
	ctx := context.Background()
	fast := redisstore.New(c, redisstore.Options{})
	full := redisstore.New(c, redisstore.WithoutFast(redisstore.Options{}))
	for name, write := range map[string]func() error{
		"check.lua":  func() error { _, err := full.Check(ctx, limits, nil); return err },
		"charge.lua": func() error { return fast.Charge(ctx, limits, time.Now()) },
	} {
		if _, err := fast.Check(ctx, limits, nil); err != nil {
			t.Fatal(err)
		}
		if f := stateF(t, c, stored("{u}:r")); f == 0 {
			t.Fatal("fast.lua left no note of the key's expiry")
		}
		if err := write(); err != nil {
			t.Fatal(name, err)
		}
		if f := stateF(t, c, stored("{u}:r")); f != 0 {
			t.Errorf("after %s the note is %v, want 0", name, f)
		}
	}
}

// TestClientClockSetsEveryExpiry: on a client's clock, which is not the
// one keys expire by, every write sets the key's expiry.
func TestClientClockSetsEveryExpiry(t *testing.T) {
	srv := redistest.Start(t)
	c := patientClient(t, srv.Addr())
	s := redisstore.New(c, redisstore.Options{Clock: sluice.NewFakeClock(statictest.Start)})
	p := &static.Policy{Algorithm: static.GCRA, Limit: 10, Window: time.Second, Burst: 50}
	limits := []static.Limit{{RuleID: "r", Key: "{u}:r", Policy: p, Cost: 1}}
	ctx := context.Background()
	for i := range 3 {
		if err := c.PExpire(ctx, stored("{u}:r"), hour).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Check(ctx, limits, nil); err != nil {
			t.Fatal(err)
		}
		if got := pttl(t, c, stored("{u}:r")); got > time.Minute {
			t.Fatalf("write %d kept a life of %v; want its own, about a second", i, got)
		}
	}
}

// TestHostileExpiryNote: a note that is not a number fast.lua wrote (NaN,
// infinite, negative, past 2^53) is not trusted: the write sets the
// expiry, and the state is still read.
func TestHostileExpiryNote(t *testing.T) {
	srv := redistest.Start(t)
	c := patientClient(t, srv.Addr())
	s := redisstore.New(c, redisstore.Options{})
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 5, Window: time.Minute}
	limits := []static.Limit{{RuleID: "r", Key: "{u}:r", Policy: p, Cost: 1}}
	ctx := context.Background()
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1 << 20, 1 << 60, 1<<53 - 1} {
		if err := c.Del(ctx, stored("{u}:r")).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Check(ctx, limits, nil); err != nil {
			t.Fatal(err)
		}
		v, err := c.Get(ctx, stored("{u}:r")).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(v[33:41], math.Float64bits(f))
		if err := c.Set(ctx, stored("{u}:r"), v, 50*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := s.Check(ctx, limits, nil)
		if err != nil || !res.Allowed || res.Remaining != 3 {
			t.Fatalf("note %v: %+v, %v; want allowed with 3 left", f, res.Decision, err)
		}
		if got := pttl(t, c, stored("{u}:r")); got < time.Second {
			t.Fatalf("note %v: the key lives %v, less than its state", f, got)
		}
	}
}
