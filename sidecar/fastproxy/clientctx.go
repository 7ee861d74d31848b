package fastproxy

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// clientCtx is the context a fast-engine request is decided under.
// fasthttp's RequestCtx ends only when the server shuts down; clientCtx
// also ends when the client closes its connection, as net/http's request
// context does, so that a request waiting in the queue or for its quota
// whose client has left gives its place and its quota back instead of
// reaching the service later for no one. The watch costs nothing on the
// fast path, nor on a short wait: it starts once the engine has waited
// for watchAfter (from its first Done call), or once the request has been
// at the service for watchAfter (upstream.go), and only for a request read
// whole (a streamed body's bytes would hide the close). It peeks at the
// socket (MSG_PEEK): it never consumes a byte of a pipelined request.
//
// A watch costs two goroutines, a socket peek and three deadline changes:
// started at a request's first wait, it was a fifth of the sidecar's CPU
// per request before a closed loop that waits in the queue a few
// milliseconds a request (wrk -c1024 before a service that answers at
// once). A client that leaves during its first watchAfter is noticed then.
type clientCtx struct {
	*fasthttp.RequestCtx
	conn net.Conn        // the client's connection, nil when not watched
	raw  syscall.RawConn // its descriptor, once watched

	once     sync.Once
	done     chan struct{}
	err      atomic.Pointer[error]
	stop     chan struct{}
	watchers sync.WaitGroup // the watch's goroutines
	watching atomic.Bool    // the watch has started
	left     atomic.Bool    // the client closed its connection (not the server shutting down)

	// The functions AfterFunc registered (under afterMu), run when c ends.
	afterMu sync.Mutex
	afters  []*afterFn

	// waitTimer starts the watch watchAfter after the first Done call;
	// waitFired says it ran. Both are kept when c goes back to the pool.
	waitTimer *time.Timer
	waitFired chan struct{}

	// The round trip's watch (upstream.go): up is the upstream
	// connection while the request is at the service, upLeft says the
	// client left (both under upMu), upStop ends the wait for it (set by
	// arm). upTimer arms the watch and upFired says it ran; both are kept
	// when c goes back to the pool.
	upMu    sync.Mutex
	up      net.Conn
	upLeft  bool
	upStop  func() bool
	upTimer *time.Timer
	upFired chan struct{}
}

var clientCtxPool = sync.Pool{New: func() any { return new(clientCtx) }}

// newClientCtx returns the context of ctx's request; watch says whether the
// client's connection may be watched (the request was read whole).
func newClientCtx(ctx *fasthttp.RequestCtx, watch bool) *clientCtx {
	c := clientCtxPool.Get().(*clientCtx)
	c.RequestCtx = ctx
	if watch {
		c.conn = ctx.Conn()
		if pc, ok := c.conn.(*peekedConn); ok {
			c.conn = pc.Conn
		}
	}
	return c
}

// Done implements context.Context; its first call arms the watch, which
// starts watchAfter later.
func (c *clientCtx) Done() <-chan struct{} {
	c.once.Do(c.begin)
	return c.done
}

// begin makes the context's channels and arms the watch.
func (c *clientCtx) begin() {
	c.done, c.stop = make(chan struct{}), make(chan struct{})
	if c.waitTimer == nil {
		c.waitFired = make(chan struct{}, 1)
		c.waitTimer = time.AfterFunc(time.Hour, c.fire)
		c.waitTimer.Stop()
	}
	c.waitTimer.Reset(watchAfter)
}

// fire runs when the engine has waited watchAfter: it starts the watch.
func (c *clientCtx) fire() {
	c.watch()
	c.waitFired <- struct{}{}
}

// watchNow starts the watch at once if it has not started: a request
// that has been at the service for watchAfter is watched then, whether or
// not it waited before.
func (c *clientCtx) watchNow() {
	c.once.Do(c.begin)
	if c.waitTimer.Stop() {
		c.fire() // its token in waitFired, as the timer's would be
	}
}

// afterFn is a function AfterFunc registered; claimed is set by whichever
// of c's end, its stop function and release comes first.
type afterFn struct {
	f       func()
	claimed atomic.Bool
}

// AfterFunc arranges for f to run, in its own goroutine, when c ends;
// stop keeps it from running. The context package uses it for a context
// derived from c (a deadline's): without it, the derived context would
// watch c from a goroutine of its own that may call c.Done after release
// has put c back in the pool. Release ends the wait (f does not run). It
// starts no goroutine until c ends; stop touches nothing of c, which may
// be another request's by then.
func (c *clientCtx) AfterFunc(f func()) (stop func() bool) {
	done := c.Done()
	a := &afterFn{f: f}
	c.afterMu.Lock()
	c.afters = append(c.afters, a)
	c.afterMu.Unlock()
	select {
	case <-done: // ended before f was registered: cancel may have run
		c.runAfters()
	default:
	}
	return func() bool { return a.claimed.CompareAndSwap(false, true) }
}

// runAfters runs, each in its own goroutine (one of the watch's, which
// release waits for), the registered functions nothing claimed yet.
func (c *clientCtx) runAfters() {
	c.afterMu.Lock()
	afters := c.afters
	c.afters = nil
	c.afterMu.Unlock()
	for _, a := range afters {
		if a.claimed.CompareAndSwap(false, true) {
			c.watchers.Add(1)
			go func() {
				defer c.watchers.Done()
				a.f()
			}()
		}
	}
}

// Err implements context.Context.
func (c *clientCtx) Err() error {
	if e := c.err.Load(); e != nil {
		return *e
	}
	return c.RequestCtx.Err()
}

// clientLeft reports whether c ended because its client closed the
// connection, rather than because the server shuts down.
func (c *clientCtx) clientLeft() bool { return c.left.Load() }

func (c *clientCtx) cancel(err error) {
	if c.err.CompareAndSwap(nil, &err) {
		close(c.done)
		c.runAfters()
	}
}

// watch watches the server's shutdown and the client's connection until
// release.
func (c *clientCtx) watch() {
	c.watching.Store(true)
	srv, stop := c.RequestCtx.Done(), c.stop
	c.watchers.Add(1)
	go func() {
		defer c.watchers.Done()
		select {
		case <-srv:
			c.cancel(context.Canceled) // the server shuts down
		case <-stop:
		}
	}()
	if sc, ok := c.conn.(syscall.Conn); ok { // not on the fast path: it allocates
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
		}
	}
	if c.raw == nil {
		return
	}
	// The request was read whole: its read deadline has nothing left to
	// bound, and must not end the watch of a longer wait (release sets
	// one again).
	_ = c.conn.SetReadDeadline(time.Time{})
	raw := c.raw
	c.watchers.Add(1)
	go func() {
		defer c.watchers.Done()
		if peekEnd(raw, true) {
			c.left.Store(true)
			c.cancel(context.Canceled) // the client closed its connection
		}
	}()
}

// release ends the watch, if one started, and gives the connection back
// to fasthttp as it was: no reader of ours, and the request's read
// deadline (readTimeout from now; none when zero). Then c goes back to the
// pool.
func (c *clientCtx) release(readTimeout time.Duration) {
	c.afterMu.Lock()
	for _, a := range c.afters {
		a.claimed.Store(true) // never to run
	}
	c.afters = nil
	c.afterMu.Unlock()
	if c.done != nil {
		if !c.waitTimer.Stop() {
			<-c.waitFired // the watch started
		}
		close(c.stop)
		if c.raw != nil {
			_ = c.conn.SetReadDeadline(time.Unix(1, 0)) // wakes the peek
		}
		c.watchers.Wait() // nothing of ours touches c or the connection after this
		if c.raw != nil {
			var d time.Time
			if readTimeout > 0 {
				d = time.Now().Add(readTimeout)
			}
			_ = c.conn.SetReadDeadline(d)
		}
	}
	t, fired, wt, wf := c.upTimer, c.upFired, c.waitTimer, c.waitFired
	*c = clientCtx{upTimer: t, upFired: fired, waitTimer: wt, waitFired: wf}
	clientCtxPool.Put(c)
}
