package fastproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// This file is the fast engine's round trip to the upstream: fasthttp's
// own (its DefaultTransport), but with the upstream connection within
// reach of the request's client. A client that leaves while its request
// is at the service closes the upstream connection, as nginx does
// (proxy_ignore_client_abort off) and as net/http's engine does: the
// service can stop the work, and the request's adaptive slot comes back
// at once instead of when the service answers no one.
//
// Watching a client costs a goroutine and a socket peek, so a request is
// watched only once it has been at the service for watchAfter (at once if
// its client is watched already, after a wait in the queue): a client that
// leaves earlier is noticed then.

// watchAfter is how long a request is at the service before its client is
// watched.
const watchAfter = 100 * time.Millisecond

// errClientLeft ends a round trip whose client left: its upstream
// connection was closed.
var errClientLeft = errors.New("the client left while its request was at the service")

// callKey is the request's user value that holds its clientCtx during the
// round trip.
type callKey struct{}

// transport is the upstream client's RoundTripper. It does what
// fasthttp's DefaultTransport does for this proxy's HostClient (which sets
// no ReadTimeout, WriteTimeout, MaxConnDuration or request timeout:
// upstream_timeout is idleConn's), and registers the connection with the
// request's clientCtx from the request's write until its response's
// headers are read.
type transport struct{}

// RoundTrip implements fasthttp.RoundTripper.
func (transport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (retry bool, err error) {
	call, _ := req.UserValue(callKey{}).(*clientCtx)
	cc, err := hc.AcquireConn(0, req.ConnectionClose())
	for checks := 0; err == nil && checks < maxDeadChecks && closedBeforeSend(req, cc.LastUseTime(), cc.Conn()); checks++ {
		hc.CloseConn(cc)
		hc.CloseIdleConnections() // idle as long or longer: as stale (see staleConn)
		cc, err = hc.AcquireConn(0, req.ConnectionClose())
	}
	if err != nil {
		return false, err
	}
	conn := cc.Conn()
	reused := !cc.LastUseTime().IsZero() // a pooled connection, not a new one
	if call != nil && !call.atService(conn) {
		hc.ReleaseConn(cc) // unused: nothing was written on it
		return false, errClientLeft
	}
	resp.ParseNetConn(conn)
	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err != nil {
		hc.CloseConn(cc)
		if call.answered() {
			return false, errClientLeft
		}
		if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
			err = fasthttp.ErrTimeout
		}
		return true, staleConn(hc, err, reused)
	}

	// The status line and headers: the body, if any, streams after.
	skip := resp.SkipBody || req.Header.IsHead()
	resp.SkipBody = true
	resp.Header.DisableNormalizing()
	br := hc.AcquireReader(conn)
	err = resp.ReadLimitBody(br, 0)
	resp.SkipBody = skip
	left := call.answered()
	if err != nil || left {
		hc.ReleaseReader(br)
		hc.CloseConn(cc)
		if left {
			return false, errClientLeft
		}
		return true, staleConn(hc, err, reused)
	}
	status := resp.StatusCode()
	// A 101 would switch the connection's protocol: it is not reused
	// (upgrade requests go to the net/http engine, so none is expected).
	closeConn := req.ConnectionClose() || resp.ConnectionClose() || status == fasthttp.StatusSwitchingProtocols
	if skip || status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified {
		hc.ReleaseReader(br)
		if closeConn {
			hc.CloseConn(cc)
		} else {
			hc.ReleaseConn(cc)
		}
		return false, nil
	}
	// The body streams from a response of its own, whose close gives the
	// connection back (or closes it when the body was not read to its
	// end): fasthttp's response stream goes back to its pool when its
	// response's body is reset, so it cannot be wrapped in place.
	cl := resp.Header.ContentLength()
	b := bodies.Get().(*streamBody)
	b.from.StreamBody = true
	b.from.Header.SetContentLength(cl)
	_ = b.from.ReadBody(br, 0) // only prepares the stream: it reads nothing
	b.stream = b.from.BodyStream()
	b.hc, b.br, b.cc, b.keep = hc, br, cc, !closeConn && cl != -2
	resp.SetBodyStream(b, cl)
	return false, nil
}

// maxDeadChecks bounds how many pooled connections a round trip finds
// closed before it sends on the next one regardless.
const maxDeadChecks = 4

// closedBeforeSend reports whether req, which cannot be sent again (a
// POST, a PUT: see retriable), is about to go on a pooled connection
// (lastUse not zero) that the upstream has closed, its keep-alive timeout
// past: one look at the socket, without waiting. Requests that can be sent
// again learn it from the failure itself (staleConn), at no cost to the
// others.
func closedBeforeSend(req *fasthttp.Request, lastUse time.Time, conn net.Conn) bool {
	return !lastUse.IsZero() && !retriable(req) && peerClosed(conn)
}

// peerClosed reports whether the upstream has closed conn, looking once
// without waiting.
func peerClosed(conn net.Conn) bool {
	if ic, ok := conn.(*idleConn); ok {
		conn = ic.Conn
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	return err == nil && peekEnd(raw, false)
}

// staleConn returns fasthttp.ErrConnectionClosed, which retryStaleConn
// retries, for err on a pooled connection that the upstream had closed
// before the request reached it: it ended before the first byte of an
// answer (io.EOF) or refused the request's bytes (a reset, a broken pipe).
// The upstream's keep-alive timeout racing the pool's does that, and then
// the connections idle as long or longer are as stale: hc's idle ones are
// closed, so that the retry, and the requests after it, dial new ones
// instead of finding another stale one (a burst after an idle spell got
// 502 for half its GETs before). Any other err is returned as it is.
func staleConn(hc *fasthttp.HostClient, err error, reused bool) error {
	if reused && (err == io.EOF || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		hc.CloseIdleConnections()
		return fmt.Errorf("%w (%v)", fasthttp.ErrConnectionClosed, err)
	}
	return err
}

// bodies are the streamBodys of responses with a body.
var bodies = sync.Pool{New: func() any { return new(streamBody) }}

// streamBody is an upstream response's body: it reads the connection
// through fasthttp's response stream (chunked, of a length, or to the
// connection's end) and gives the connection back once closed. Read and
// CloseWithError are called from one goroutine at a time.
type streamBody struct {
	from   fasthttp.Response
	stream io.Reader
	// hc, br and cc are the upstream client, its reader and the pooled
	// connection the body comes on, given back when the body closes (held
	// here rather than in a closure: no allocation a request); keep
	// reports whether the connection may be reused once the body was read
	// to its end.
	hc     *fasthttp.HostClient
	br     *bufio.Reader
	cc     any
	keep   bool
	eof    bool
	failed bool
}

// giveBack returns a body's pooled connection to hc (reuse) or closes it.
// fasthttp does not export its connection's type; the method expressions
// name it for the generic helper, once.
var giveBack = connReturner((*fasthttp.HostClient).ReleaseConn, (*fasthttp.HostClient).CloseConn)

// connReturner returns a function that gives a connection of type C, held
// as any, back to its client through release or closeConn.
func connReturner[C any](release, closeConn func(*fasthttp.HostClient, C)) func(hc *fasthttp.HostClient, cc any, reuse bool) {
	return func(hc *fasthttp.HostClient, cc any, reuse bool) {
		c, ok := cc.(C)
		if !ok {
			return // cannot be: cc is what hc.AcquireConn returned, C the type its methods take
		}
		if reuse {
			release(hc, c)
		} else {
			closeConn(hc, c)
		}
	}
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.stream == nil {
		return 0, io.ErrClosedPipe
	}
	n, err := b.stream.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.failed = true
	}
	return n, err
}

// CloseWithError implements fasthttp.ReadCloserWithError: the response
// calls it when its body is closed or reset.
func (b *streamBody) CloseWithError(err error) error {
	if b.stream == nil {
		return nil
	}
	reuse := b.eof && !b.failed && err == nil
	_ = b.from.CloseBodyStream()
	b.hc.ReleaseReader(b.br)
	giveBack(b.hc, b.cc, reuse && b.keep)
	b.from.Reset()
	b.stream, b.hc, b.br, b.cc, b.keep, b.eof, b.failed = nil, nil, nil, nil, false, false, false
	bodies.Put(b)
	return nil
}

// atService registers conn as the request's upstream connection, and
// reports false if the client already left. A nil c (no watch) accepts.
func (c *clientCtx) atService(conn net.Conn) bool {
	if c == nil {
		return true
	}
	c.upMu.Lock()
	defer c.upMu.Unlock()
	if c.upLeft {
		return false
	}
	c.up = conn
	return true
}

// answered ends the registration of atService, and reports whether the
// client left meanwhile (its upstream connection is closed then).
func (c *clientCtx) answered() (left bool) {
	if c == nil {
		return false
	}
	c.upMu.Lock()
	defer c.upMu.Unlock()
	c.up = nil
	return c.upLeft
}

// startUpstream arms the watch of the client for the round trip of req:
// after watchAfter, or at once when the client is watched already.
func (c *clientCtx) startUpstream(req *fasthttp.Request) {
	req.SetUserValue(callKey{}, c)
	if c.upTimer == nil {
		c.upFired = make(chan struct{}, 1)
		c.upTimer = time.AfterFunc(time.Hour, c.arm)
		c.upTimer.Stop()
	}
	d := watchAfter
	if c.watching.Load() {
		d = 0
	}
	c.upTimer.Reset(d)
}

// endUpstream disarms the watch once the round trip of req is over; a
// client that leaves after it closes no connection. Nothing of the watch
// outlives release.
func (c *clientCtx) endUpstream(req *fasthttp.Request) {
	req.RemoveUserValue(callKey{})
	if c.upTimer.Stop() {
		return // arm never runs: nothing watches the client for the round trip
	}
	<-c.upFired // arm has run, and left its wait in upStop
	c.upStop()
}

// arm runs when the request has been at the service for watchAfter: it
// watches the client, whose end runs abort.
func (c *clientCtx) arm() {
	c.watchNow()
	c.upStop = c.AfterFunc(c.abort) // read by endUpstream after upFired
	c.upFired <- struct{}{}
}

// abort runs when c ends during the round trip. When the client left, the
// upstream connection, if the request is at the service, is closed; when
// the server shuts down, the request finishes, as a graceful shutdown lets
// it.
func (c *clientCtx) abort() {
	if !c.clientLeft() {
		return
	}
	c.upMu.Lock()
	defer c.upMu.Unlock()
	c.upLeft = true
	if c.up != nil {
		_ = c.up.Close()
	}
}
