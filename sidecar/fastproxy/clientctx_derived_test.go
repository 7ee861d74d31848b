package fastproxy

import (
	"context"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A context derived from a request's clientCtx (a client's deadline makes
// one) and ended before the request's release leaves nothing behind that
// touches the clientCtx once it is back in the pool: the context package
// registers through AfterFunc instead of a goroutine of its own, which
// could call Done on a released (zeroed, reused) clientCtx and crash the
// process (seen through the binary: a nil RequestCtx in watch).
func TestDerivedContextEndsBeforeRelease(t *testing.T) {
	var req fasthttp.Request
	for range 2000 {
		var rc fasthttp.RequestCtx
		rc.Init(&req, nil, nil)
		c := newClientCtx(&rc, false)
		ctx, cancel := context.WithDeadline(c, time.Now().Add(time.Hour))
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		cancel()
		c.release(0)
	}
	// One that the client ends: the derived context ends with it.
	var rc fasthttp.RequestCtx
	rc.Init(&req, nil, nil)
	c := newClientCtx(&rc, false)
	ctx, cancel := context.WithDeadline(c, time.Now().Add(time.Hour))
	defer cancel()
	c.cancel(context.Canceled)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the derived context did not end with the client's")
	}
	c.release(0)
}
