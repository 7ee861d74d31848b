package sidecar_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
)

// burst sends n requests one after another (each parked before the next
// starts, under synctest) and returns, in order of arrival, whether each
// was admitted and when, relative to the first.
func burst(t *testing.T, e *engine.Engine, n int, parked func()) ([]bool, []time.Duration) {
	t.Helper()
	allowed, at := make([]bool, n), make([]time.Duration, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := e.Decide(context.Background(), &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: http.Header{}})
			if err != nil {
				t.Error(err)
				return
			}
			allowed[i], at[i] = v.Allowed, time.Since(start)
			if v.Allowed {
				v.Done(sluice.Success)
			}
		}()
		parked()
	}
	wg.Wait()
	return allowed, at
}

// TestMaxWaitSmoothsABurst: a burst of 25 against a 10/s token bucket with
// max_wait 2s is admitted whole, at the bucket's rate and in arrival
// order; of 40, those whose wait would clearly pass 2s (by the rule's rate
// and the line ahead) get their 429 at once, and none waits longer.
func TestMaxWaitSmoothsABurst(t *testing.T) {
	const cfg = `
adaptive: {algorithm: off}
rules:
  - {rule_id: tb, identifier_type: ip_address, algorithm: token_bucket, limit: 10, window: 1s, max_wait: 2s}
`
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, cfg, nil)
		allowed, at := burst(t, e, 25, synctest.Wait)
		for i, ok := range allowed {
			if !ok {
				t.Errorf("request %d refused, want it to wait for the quota", i)
			}
			if i > 0 && at[i] < at[i-1] {
				t.Errorf("request %d admitted at %v, before request %d at %v: not in arrival order", i, at[i], i-1, at[i-1])
			}
		}
		if last := at[24]; last < 1400*time.Millisecond || last > 1600*time.Millisecond {
			t.Errorf("the 25th admitted after %v, want about 1.5 s (15 over the burst of 10 at 10/s)", last)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, cfg, nil)
		allowed, at := burst(t, e, 40, synctest.Wait)
		n, atOnce := 0, 0
		for i, ok := range allowed {
			switch {
			case ok:
				n++
			case at[i] == 0:
				atOnce++
			case at[i] > 2*time.Second:
				t.Errorf("request %d refused after %v, longer than max_wait", i, at[i])
			}
		}
		if atOnce < 8 {
			t.Errorf("%d refused at once, want those whose wait clearly would not fit (about 10) told at once", atOnce)
		}
		if n < 29 || n > 31 {
			t.Errorf("%d of 40 admitted, want about 30 (10 at once and 2 s at 10/s)", n)
		}
	})
}

// TestMaxWaitCancelled: a waiter whose client leaves takes nothing: the
// next one gets the quota that came back.
func TestMaxWaitCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: fw, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1s, max_wait: 5s}
`, nil)
		req := &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: http.Header{}}
		first, _ := e.Decide(context.Background(), req)
		first.Done(sluice.Success)
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan error, 1)
		go func() {
			_, err := e.Decide(ctx, req)
			gone <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-gone; err == nil {
			t.Fatal("a waiter whose client left got a verdict")
		}
		v, err := e.Decide(context.Background(), req)
		if err != nil || !v.Allowed {
			t.Fatalf("after the cancelled waiter: %+v %v, want the next window's quota", v.Decision, err)
		}
		v.Done(sluice.Success)
	})
}

// TestMaxWaitOnRedis: on Redis too the burst is admitted at the rule's
// rate, and the waiters do not poll: about one check per admission.
func TestMaxWaitOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, `
store: {type: redis, redis: {addrs: [`+srv.Addr()+`], timeout: 2s}}
adaptive: {algorithm: off}
rules:
  - {rule_id: tb, identifier_type: ip_address, algorithm: token_bucket, limit: 20, window: 1s, max_wait: 3s}
`, nil)
	defer e.Close()
	allowed, at := burst(t, e, 30, func() { time.Sleep(time.Millisecond) })
	for i, ok := range allowed {
		if !ok {
			t.Errorf("request %d refused, want it to wait for the quota", i)
		}
	}
	// 10 over a burst of 20 at 20/s: about 0.5 s (generous bounds: real time).
	if last := max(at[29], at[28]); last < 300*time.Millisecond || last > 2500*time.Millisecond {
		t.Errorf("the last admitted after %v, want about 0.5 s", last)
	}
	if trips := e.State().Store.RoundTrips; trips > 30*3 {
		t.Errorf("%d round trips for 30 requests: waiters poll Redis", trips)
	}
}

// TestMaxWaitEveryAlgorithm: a burst of 8 against 5 per second waits for
// the quota and is admitted whole, whatever the algorithm.
func TestMaxWaitEveryAlgorithm(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "gcra", "semaphore", "concurrency"} {
		t.Run(alg, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				extra := ", window: 1s"
				if alg == "concurrency" {
					extra = ""
				}
				e := newEngine(t, "adaptive: {algorithm: off}\nrules:\n  - {rule_id: r, identifier_type: global, algorithm: "+alg+
					", limit: 5"+extra+", max_wait: 3s}\n", nil)
				allowed, _ := burst(t, e, 8, synctest.Wait)
				for i, ok := range allowed {
					if !ok {
						t.Errorf("request %d refused, want it to wait for the quota", i)
					}
				}
			})
		})
	}
}

// TestMaxWaitReservesOnBuckets: on a token bucket max_wait reserves (the
// tokens are taken at once, the request held until its turn); a held
// request whose client leaves gives its token back, and the next request
// gets that turn.
func TestMaxWaitReservesOnBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: tb, identifier_type: global, algorithm: token_bucket, limit: 10, window: 1s, max_wait: 1s}
`, nil)
		req := &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: http.Header{}}
		for range 10 {
			v, _ := e.Decide(context.Background(), req)
			v.Done(sluice.Success)
		}
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan error, 1)
		go func() {
			_, err := e.Decide(ctx, req) // holds a token reserved for 100 ms from now
			gone <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-gone; err == nil {
			t.Fatal("a held request whose client left got a verdict")
		}
		start := time.Now()
		v, err := e.Decide(context.Background(), req)
		if err != nil || !v.Allowed {
			t.Fatalf("next request: %+v %v", v.Decision, err)
		}
		if waited := time.Since(start); waited != 100*time.Millisecond {
			t.Errorf("next request held %v, want 100ms (the turn the leaver gave back)", waited)
		}
		v.Done(sluice.Success)
	})
}
