package fastproxy

import (
	"context"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// waiting returns a request's clientCtx that begins to wait now, when a
// context is derived from it (its first Done call), and that context.
func waiting() (*clientCtx, context.Context, context.CancelFunc, time.Time) {
	var rc fasthttp.RequestCtx
	rc.Init(new(fasthttp.Request), nil, nil)
	c := newClientCtx(&rc, true)
	start := time.Now()
	ctx, cancel := context.WithDeadline(c, start.Add(time.Hour))
	return c, ctx, cancel, start
}

// A request that waits less than watchAfter (a closed loop's turn in the
// queue, a few milliseconds) starts no watch of its client: no goroutine,
// no socket peek, no deadline change.
func TestShortWaitStartsNoWatch(t *testing.T) {
	c, _, cancel, start := waiting()
	watching, waited := c.watching.Load(), time.Since(start)
	cancel()
	c.release(0)
	if watching && waited < watchAfter {
		t.Fatalf("the watch started %v into the wait, before watchAfter (%v)", waited, watchAfter)
	}
}

// One that waits longer is watched from then on, and a context derived
// from it ends with it.
func TestLongWaitIsWatched(t *testing.T) {
	c, ctx, cancel, start := waiting()
	defer cancel()
	select {
	case <-c.waitFired:
		c.waitFired <- struct{}{} // for release
	case <-time.After(30 * time.Second):
		c.release(0)
		t.Fatal("a wait past watchAfter did not start the watch")
	}
	if waited := time.Since(start); !c.watching.Load() || waited < watchAfter {
		c.release(0)
		t.Fatalf("watching %v after %v, want true from watchAfter (%v)", c.watching.Load(), waited, watchAfter)
	}
	c.cancel(context.Canceled) // as the watch does when the client leaves
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Error("the derived context did not end with the client's")
	}
	c.release(0)
}

// registeredAround returns a request's clientCtx with a function
// registered by AfterFunc (ran receives when it runs) and its stop, once
// watchAfter less 2 ms plus at has passed: around the watch's start.
func registeredAround(req *fasthttp.Request, at time.Duration) (c *clientCtx, ran chan struct{}, stop func() bool) {
	var rc fasthttp.RequestCtx
	rc.Init(req, nil, nil)
	c = newClientCtx(&rc, true)
	ran = make(chan struct{}, 1)
	stop = c.AfterFunc(func() { ran <- struct{}{} })
	time.Sleep(watchAfter - 2*time.Millisecond + at)
	return c, ran, stop
}

// Released at any moment around watchAfter (before the watch starts,
// while it starts, after), a clientCtx runs no function registered with
// AfterFunc after release, and release returns (it waits for a watch that
// is starting); ended first, it has run each one not stopped by then.
func TestReleaseAroundTheWatchStart(t *testing.T) {
	var req fasthttp.Request
	for i := range 20 {
		c, ran, stop := registeredAround(&req, time.Duration(i)*200*time.Microsecond)
		if i%2 == 0 {
			stop()
		}
		c.release(0)
		select {
		case <-ran:
			t.Fatalf("round %d: a function registered with AfterFunc ran after release", i)
		default:
		}
	}
	// Ended around the watch start (the client left, the server shuts
	// down), it runs each function not stopped, and release waits for it.
	for i := range 10 {
		c, ran, stop := registeredAround(&req, time.Duration(i)*400*time.Microsecond)
		stopped := i%2 == 0 && stop()
		c.cancel(context.Canceled)
		c.release(0)
		select {
		case <-ran:
			if stopped {
				t.Fatalf("round %d: a function stopped before its context ended ran", i)
			}
		default:
			if !stopped {
				t.Fatalf("round %d: a function registered with AfterFunc had not run when release returned, its context ended", i)
			}
		}
	}
}

// A request that did not wait is watched once it has been at the service
// for watchAfter, not watchAfter later again (arm's AfterFunc is the
// context's first Done call then).
func TestRoundTripWatchStartsAtWatchAfter(t *testing.T) {
	var rc fasthttp.RequestCtx
	rc.Init(new(fasthttp.Request), nil, nil)
	c := newClientCtx(&rc, true)
	var req fasthttp.Request
	start := time.Now()
	c.startUpstream(&req)
	select {
	case <-c.upFired:
		c.upFired <- struct{}{} // for endUpstream
	case <-time.After(30 * time.Second):
		t.Fatal("the round trip's watch was never armed")
	}
	watching, waited := c.watching.Load(), time.Since(start)
	c.endUpstream(&req)
	c.release(0)
	if !watching {
		t.Fatalf("armed %v into the round trip, the client was not watched", waited)
	}
}
