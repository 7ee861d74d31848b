package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
	"github.com/sluicehq/sluice/static/statictest"
)

// TestFastScriptAgreesWithCheck drives fast.lua and check.lua (the
// reference, a port of static/algorithm.go) through the same random
// requests on two servers with one fake clock: every decision, per limit
// and combined, must be the same, and each server must have run only its
// own script.
func TestFastScriptAgreesWithCheck(t *testing.T) {
	fastSrv, fullSrv := redistest.Start(t), redistest.Start(t)
	clock := sluice.NewFakeClock(statictest.Start)
	fast := redisstore.New(patientClient(t, fastSrv.Addr()), redisstore.Options{Clock: clock})
	full := redisstore.New(patientClient(t, fullSrv.Addr()), redisstore.WithoutFast(redisstore.Options{Clock: clock}))
	policies := map[string]*static.Policy{
		"gcra":          {Algorithm: static.GCRA, Limit: 20, Window: time.Second, Burst: 4},
		"token":         {Algorithm: static.TokenBucket, Limit: 10, Window: time.Second, Burst: 5},
		"token_noburst": {Algorithm: static.TokenBucket, Limit: 8, Window: 2 * time.Second},
		"leaky":         {Algorithm: static.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3},
		"leaky_nodelay": {Algorithm: static.LeakyBucket, Limit: 5, Window: time.Second, Burst: 2, NoDelay: true},
		"fixed":         {Algorithm: static.FixedWindow, Limit: 6, Window: time.Second},
		"sliding":       {Algorithm: static.SlidingWindow, Limit: 7, Window: 1500 * time.Millisecond},
		// Capacities under the largest cost: requests that can never pass.
		"gcra_small":    {Algorithm: static.GCRA, Limit: 4, Window: time.Second, Burst: 1},
		"leaky_small":   {Algorithm: static.LeakyBucket, Limit: 4, Window: time.Second},
		"fixed_small":   {Algorithm: static.FixedWindow, Limit: 2, Window: 500 * time.Millisecond},
		"sliding_small": {Algorithm: static.SlidingWindow, Limit: 2, Window: 700 * time.Millisecond},
	}
	names := make([]string, 0, len(policies))
	for n, p := range policies {
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		names = append(names, n)
	}
	slices.Sort(names) // the same sequence on every run
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 80 {
		// One or two limits on one identifier, of any two algorithms.
		n := 1 + rng.IntN(2)
		limits := make([]static.Limit, n)
		for i := range limits {
			name := names[rng.IntN(len(names))]
			limits[i] = static.Limit{RuleID: name, Key: fmt.Sprintf("{id%d}:r%d", round, i), Policy: policies[name]}
		}
		for step := range 60 {
			switch r := rng.IntN(10); {
			case r < 6:
				clock.Advance(time.Duration(rng.IntN(150)) * time.Millisecond)
			case r < 9:
			default:
				clock.Advance(time.Duration(1+rng.IntN(3)) * time.Second)
			}
			for i := range limits {
				limits[i].Cost = int64(rng.IntN(4))
				limits[i].Shadow = rng.IntN(8) == 0
				limits[i].DryRun = rng.IntN(8) == 0
				limits[i].Reserve = 0
				if rng.IntN(4) == 0 {
					limits[i].Reserve = time.Duration(rng.IntN(400)) * time.Millisecond
				}
			}
			eachFast, eachFull := make([]sluice.Decision, n), make([]sluice.Decision, n)
			a, errA := fast.Check(ctx, limits, eachFast)
			b, errB := full.Check(ctx, limits, eachFull)
			if errA != nil || errB != nil {
				t.Fatalf("round %d step %d: %v / %v", round, step, errA, errB)
			}
			what := fmt.Sprintf("round %d step %d %s", round, step, describe(limits))
			if a.Decision != b.Decision || a.Index != b.Index || !a.At.Equal(b.At) {
				t.Fatalf("%s: fast %+v (index %d), check %+v (index %d)", what, a.Decision, a.Index, b.Decision, b.Index)
			}
			for i := range eachFast {
				if eachFast[i] != eachFull[i] {
					t.Fatalf("%s: limit %d: fast %+v, check %+v", what, i, eachFast[i], eachFull[i])
				}
			}
		}
	}
	checkSHA, fastSHA := redisstore.ScriptHashes()
	for _, c := range []struct {
		srv         *redistest.Server
		used, spare string
	}{{fastSrv, fastSHA, checkSHA}, {fullSrv, checkSHA, fastSHA}} {
		out, err := c.srv.Do("SCRIPT", "EXISTS", c.used, c.spare)
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(out); len(f) != 2 || f[0] != "1" || f[1] != "0" {
			t.Errorf("SCRIPT EXISTS used, unused on %s: %q", c.srv.Addr(), out)
		}
	}
}

func describe(limits []static.Limit) string {
	var b strings.Builder
	for _, l := range limits {
		fmt.Fprintf(&b, " [%s cost=%d shadow=%v dry=%v reserve=%v]", l.RuleID, l.Cost, l.Shadow, l.DryRun, l.Reserve)
	}
	return b.String()
}

// TestStateFormats: both scripts read the text state of earlier versions
// (so an upgrade keeps the usage so far) and refuse a corrupt binary one
// with an error, never a decision from garbage.
func TestStateFormats(t *testing.T) {
	srv := redistest.Start(t)
	clock := sluice.NewFakeClock(statictest.Start)
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 5, Window: time.Minute}
	now := clock.Now().UnixMicro()
	win := now - now%time.Minute.Microseconds()
	sig := fmt.Sprintf("%d:%d:0:0:0:0", p.Algorithm, time.Minute.Microseconds())
	nan := strings.Repeat("\x00\x00\x00\x00\x00\x00\xf8\x7f", 5) // five NaNs
	for _, name := range []string{"fast", "check"} {
		t.Run(name, func(t *testing.T) {
			c := client(t, srv.Addr())
			opts := redisstore.Options{Clock: clock, Prefix: name}
			if name == "check" {
				opts = redisstore.WithoutFast(opts)
			}
			s := redisstore.New(c, opts)
			set := func(v string) {
				if err := c.Set(context.Background(), name+":{k}:r", v, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			limits := []static.Limit{{RuleID: "r", Key: "{k}:r", Policy: p, Cost: 1}}
			set(fmt.Sprintf("%s|%d|%d|3|0|0", sig, now, win))
			res, err := s.Check(context.Background(), limits, nil)
			if err != nil || !res.Allowed || res.Remaining != 1 {
				t.Fatalf("over a text state of 3 used: %+v, %v; want allowed with 1 left", res.Decision, err)
			}
			res, err = s.Check(context.Background(), limits, nil)
			if err != nil || !res.Allowed || res.Remaining != 0 {
				t.Fatalf("over the state it wrote: %+v, %v; want allowed with 0 left", res.Decision, err)
			}
			for _, bad := range []string{"\x00" + nan + sig, "\x00short", "x|y|z"} {
				set(bad)
				if res, err := s.Check(context.Background(), limits, nil); err == nil {
					t.Errorf("state %q: %+v, want an error", bad, res.Decision)
				}
			}
		})
	}
}

// TestScriptsShareState: a key checked alone goes to fast.lua, checked
// beside a sliding log (same slot) to check.lua; either continues from what
// the other wrote, as the memory store does.
func TestScriptsShareState(t *testing.T) {
	srv := redistest.Start(t)
	clock := sluice.NewFakeClock(statictest.Start)
	s := redisstore.New(client(t, srv.Addr()), redisstore.Options{Clock: clock})
	mem := static.NewMemory(static.MemoryOptions{Clock: clock})
	bucket := &static.Policy{Algorithm: static.TokenBucket, Limit: 5, Window: time.Minute}
	fixed := &static.Policy{Algorithm: static.FixedWindow, Limit: 4, Window: time.Minute}
	log := &static.Policy{Algorithm: static.SlidingLog, Limit: 100, Window: time.Minute}
	alone := []static.Limit{
		{RuleID: "bucket", Key: "{u}:bucket", Policy: bucket, Cost: 1},
		{RuleID: "fixed", Key: "{u}:fixed", Policy: fixed, Cost: 1},
	}
	beside := append(append([]static.Limit(nil), alone...), static.Limit{RuleID: "log", Key: "{u}:log", Policy: log, Cost: 1})
	ctx := context.Background()
	for i, limits := range [][]static.Limit{alone, beside, alone, beside, alone, alone} {
		clock.Advance(time.Second)
		got, err := s.Check(ctx, limits, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := mem.Check(ctx, limits, nil)
		if got.Decision != want.Decision {
			t.Fatalf("check %d (%d limits): redis %+v, memory %+v", i, len(limits), got.Decision, want.Decision)
		}
	}
}
