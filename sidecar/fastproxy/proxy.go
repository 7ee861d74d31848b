package fastproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar/internal/problem"
	"github.com/sluicehq/sluice/sidecar/internal/uploadpace"
)

// This file is the proxy's fast engine (proxy.engine: fast): HTTP/1.1 on
// github.com/valyala/fasthttp, with a keep-alive pool to the upstream, the
// same engine, responses and headers as the net/http engine. Request
// bodies up to request_buffer are read before the decision, longer ones
// stream to the upstream; response bodies of up to maxBufferedResponse
// bytes are read whole, longer or unknown-length ones (chunked, SSE)
// stream to the client, flushed at every read from the upstream. h2c and
// upgrade requests go to the net/http engine on the same listener (see
// listener.go).

// maxBufferedResponse is the largest response body of known length the
// fast engine reads whole before answering; longer ones stream.
const maxBufferedResponse = 64 << 10

// copyBufs are the buffers small response bodies are copied through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// hopHeaders are removed from what is forwarded either way (RFC 9110
// 7.6.1), with the headers the Connection header names.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// Proxy is the fast engine on one listener: fasthttp for HTTP/1.1,
// net/http (Options.Std) for h2c and upgrades.
type Proxy struct {
	e      *engine.Engine
	client *fasthttp.HostClient
	srv    *fasthttp.Server
	std    *http.Server
	log    *slog.Logger
	sorter *sorter
	done   sync.WaitGroup
	// burst gathers the writes of answers ready together (see burst).
	burst *burst
	// maxHeaderBytes is max_header_bytes: larger request headers get 431.
	maxHeaderBytes int
	// underscores is proxy.underscores_in_headers: see dropUnderscores.
	underscores bool
	// readTimeout is read_timeout, a request's time to arrive whole.
	readTimeout time.Duration
}

// Options are a Proxy's settings, from the configuration's keys.
type Options struct {
	// Upstream is the service's URL (http or https).
	Upstream *url.URL
	// UpstreamTimeout is upstream_timeout: the longest wait for one read
	// from the upstream; 0 for none.
	UpstreamTimeout time.Duration
	// ReadTimeout is read_timeout, a request's time to arrive whole;
	// IdleTimeout is idle_timeout, a keep-alive connection's time between
	// requests.
	ReadTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes is max_header_bytes: larger request headers get 431.
	MaxHeaderBytes int
	// Underscores is proxy.underscores_in_headers: request headers with
	// an underscore in their name are forwarded instead of dropped.
	Underscores bool
	// Std serves the connections the fast engine hands over (h2c,
	// upgrades); its Handler is the middleware over the net/http proxy.
	Std *http.Server
	// Logger receives the proxy's errors; nil discards them.
	Logger *slog.Logger
}

// retryStaleConn is the upstream client's retry rule: see New.
func retryStaleConn(req *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	if attempts > 1 || !errors.Is(err, fasthttp.ErrConnectionClosed) {
		return false, false
	}
	return true, retriable(req)
}

// retriable reports whether req may be sent again when its connection
// failed: a GET, HEAD or OPTIONS.
func retriable(req *fasthttp.Request) bool {
	m := req.Header.Method()
	return string(m) == fasthttp.MethodGet || string(m) == fasthttp.MethodHead || string(m) == fasthttp.MethodOptions
}

// New builds the fast engine for e in front of o.Upstream. It serves
// nothing until Serve.
func New(e *engine.Engine, o Options) *Proxy {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	upstream, timeout, readTimeout := o.Upstream, o.UpstreamTimeout, o.ReadTimeout
	p := &Proxy{e: e, std: o.Std, log: log, maxHeaderBytes: o.MaxHeaderBytes, readTimeout: readTimeout, underscores: o.Underscores,
		burst: newBurst(runtime.GOMAXPROCS(0))}
	host := upstream.Host
	if upstream.Port() == "" {
		if upstream.Scheme == "https" {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	p.client = &fasthttp.HostClient{
		Addr: host, IsTLS: upstream.Scheme == "https", NoDefaultUserAgentHeader: true,
		DisableHeaderNamesNormalizing: true,
		MaxConns:                      1 << 16, MaxIdleConnDuration: 90 * time.Second, ReadBufferSize: 16 << 10, // the upstream's response headers
		StreamResponseBody: true,
		// A proxy never retries on its own (a timed-out GET would reach a
		// hanging service 5 times, the client waiting 5x): once only,
		// except a GET, HEAD or OPTIONS whose reused keep-alive connection
		// the upstream had closed, which never reached it.
		MaxIdemponentCallAttempts: 2,
		RetryIfErr:                retryStaleConn,
		Transport:                 transport{},
		Dial: func(addr string) (net.Conn, error) {
			c, err := dialer.Dial("tcp", addr)
			if err != nil || timeout <= 0 {
				return c, err
			}
			return &idleConn{Conn: c, timeout: timeout}, nil
		},
	}
	p.srv = &fasthttp.Server{
		Handler: p.handle, NoDefaultServerHeader: true, NoDefaultDate: true, NoDefaultContentType: true,
		// Headers up to max_header_bytes, with net/http's 4 KiB of slack;
		// the handler refuses those past the limit that fit.
		// The headers must arrive within 10s (or read_timeout if shorter),
		// as net/http's ReadHeaderTimeout: a client trickling them holds a
		// connection no longer; the body then has read_timeout.
		ReadTimeout: min(10*time.Second, readTimeout), IdleTimeout: o.IdleTimeout, ReadBufferSize: o.MaxHeaderBytes + 4096,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: readTimeout}
		},
		StreamRequestBody: true, DisablePreParseMultipartForm: true, KeepHijackedConns: true,
		DisableHeaderNamesNormalizing: false, CloseOnShutdown: true,
		Logger: fastLogger{log},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			// What fasthttp refuses before the handler: malformed or too
			// large requests. The answer is written here and the client
			// given time to finish sending (as net/http does), so that it
			// reads the status instead of a reset.
			status := http.StatusBadRequest
			var small *fasthttp.ErrSmallBuffer
			if errors.As(err, &small) {
				status = http.StatusRequestHeaderFieldsTooLarge
			} else if errors.Is(err, fasthttp.ErrBodyTooLarge) {
				status = http.StatusRequestEntityTooLarge
			}
			refuseAndLinger(ctx.Conn(), status)
			ctx.SetConnectionClose()
		},
	}
	return p
}

type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	l.log.Debug("fasthttp", "message", strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Serve serves ln in the background, both engines, until Shutdown. The
// caller makes ln (and wraps it: write deadlines, an accept watch); an
// accept that fails is retried, backing off 5 ms doubling to 1 s.
func (p *Proxy) Serve(ln net.Listener) {
	addr := ln.Addr().String()
	p.sorter = newSorter(ln, min(10*time.Second, max(p.srv.ReadTimeout, time.Second)), p.burst)
	p.done.Add(3)
	go func() { defer p.done.Done(); p.sorter.run() }()
	go func() {
		defer p.done.Done()
		if err := p.srv.Serve(p.sorter.fast); err != nil && !errors.Is(err, net.ErrClosed) {
			p.log.Error("serve", "addr", addr, "error", err.Error())
		}
	}()
	go func() {
		defer p.done.Done()
		if err := p.std.Serve(p.sorter.std); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			p.log.Error("serve", "addr", addr, "error", err.Error())
		}
	}()
}

// Shutdown stops accepting, lets requests in flight finish until ctx
// ends, then closes what is left.
func (p *Proxy) Shutdown(ctx context.Context) error {
	if p.sorter == nil {
		return nil
	}
	_ = p.sorter.ln.Close()
	errs := make(chan error, 2)
	go func() { errs <- p.srv.ShutdownWithContext(ctx) }()
	go func() {
		err := p.std.Shutdown(ctx)
		if err != nil {
			_ = p.std.Close()
		}
		errs <- err
	}()
	err := errors.Join(<-errs, <-errs)
	p.done.Wait()
	p.client.CloseIdleConnections()
	return err
}

// handle is the fast engine's request path.
func (p *Proxy) handle(ctx *fasthttp.RequestCtx) {
	p.burst.enter()
	h := &ctx.Request.Header
	if !p.headOK(ctx) {
		return
	}
	if len(h.Peek("Upgrade")) > 0 {
		p.handOff(ctx)
		return
	}
	if !targetOK(ctx) {
		return
	}
	if absoluteForm(h.RequestURI()) {
		// The request-target's authority replaces the Host header (RFC
		// 9112, 3.2.2), as fasthttp forwards it and net/http reads it: a
		// rule on Host keyed the header while the service got the
		// target's host, so a client could name a fresh Host per request.
		h.SetHostBytes(ctx.Request.URI().Host())
	}
	if rawURI := h.RequestURI(); len(rawURI) == 1 && rawURI[0] == '*' {
		// OPTIONS * asks the server itself (net/http answers it so too).
		ctx.SetStatusCode(http.StatusOK)
		return
	}
	pre, ok := p.readBody(ctx)
	if !ok {
		return
	}
	req := engine.Request{Method: b2s(ctx.Method()), Path: b2s(ctx.Request.URI().Path()), Header: fastHeaders{h}}
	if ta, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			req.Peer = a
		}
	} else {
		req.RemoteAddr = ctx.RemoteAddr().String()
	}
	cc := newClientCtx(ctx, !ctx.Request.IsBodyStream())
	defer cc.release(p.readTimeout)
	v, err := p.e.Decide(cc, &req)
	if errors.Is(err, engine.ErrAmbiguous) {
		ctx.Error(err.Error(), http.StatusBadRequest)
		return
	}
	if err != nil {
		// The client left while the request waited: nobody to answer.
		// Or the server shuts down: 503, as the queue's own shedding.
		if cc.clientLeft() {
			closeUnanswered(ctx)
			return
		}
		ctx.Error("Service Unavailable: shutting down", http.StatusServiceUnavailable)
		ctx.SetConnectionClose()
		return
	}
	if !v.Allowed {
		writeFastRefusal(ctx, &v)
		return
	}
	p.forward(ctx, cc, &v, req.Peer, pre)
}

// headOK answers, and reports false for, a request whose headers are past
// max_header_bytes (431) or hold a name that is no token (400). It drops
// the headers with an underscore in their name unless configured otherwise.
func (p *Proxy) headOK(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	if len(h.RawHeaders()) > p.maxHeaderBytes {
		ctx.Error(http.StatusText(http.StatusRequestHeaderFieldsTooLarge), http.StatusRequestHeaderFieldsTooLarge)
		ctx.SetConnectionClose()
		return false
	}
	for k := range h.All() {
		if !httpguts.ValidHeaderFieldName(b2s(k)) {
			// A name with a space or another non-token byte: services
			// split it differently (net/http answers 400 so too).
			ctx.Error("Bad Request: invalid header name", http.StatusBadRequest)
			ctx.SetConnectionClose()
			return false
		}
	}
	if !p.underscores {
		dropUnderscores(h)
	}
	return true
}

// targetOK answers, and reports false for, a request whose body or target
// services could read differently than the rules did: a transfer encoding
// other than chunked (501), a fragment or an encoded slash in the target
// (400).
func targetOK(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	if te := rawHeader(h.RawHeaders(), "transfer-encoding"); te != nil && !bytes.EqualFold(te, []byte("chunked")) {
		// Only chunked is understood (as net/http answers): anything else
		// would leave the body's end to guesswork.
		ctx.Error("Unsupported transfer encoding", http.StatusNotImplemented)
		ctx.SetConnectionClose()
		return false
	}
	if bytes.IndexByte(h.RequestURI(), '#') >= 0 {
		// A fragment is never sent: routers disagree on whether '#' ends
		// the path (fasthttp drops the rest, net/http keeps it as %23).
		ctx.Error("Bad Request: '#' in the request-target", http.StatusBadRequest)
		return false
	}
	if raw := ctx.Request.URI().PathOriginal(); bytes.Contains(raw, []byte("%2f")) || bytes.Contains(raw, []byte("%2F")) {
		ctx.Error("ambiguous request path: encoded slash", http.StatusBadRequest)
		return false
	}
	return true
}

// absoluteForm reports whether a request-target is in absolute form
// ("http://host/path").
func absoluteForm(target []byte) bool {
	return len(target) > 7 && bytes.EqualFold(target[:7], []byte("http://")) ||
		len(target) > 8 && bytes.EqualFold(target[:8], []byte("https://"))
}

// readBody reads the request body, up to request_buffer, before the
// decision, so that a slow upload holds no quota and no slot: a body of
// known length whole, a chunked one whole when it ends within it, else its
// first part (pre), whose rest streams after it (as net/http's engine
// does). A body that cannot be read is the client's fault: it is answered
// (408 when too slow, else 400), nothing is forwarded, and ok is false.
func (p *Proxy) readBody(ctx *fasthttp.RequestCtx) (pre []byte, ok bool) {
	if !ctx.Request.IsBodyStream() {
		return nil, true
	}
	n, cl := p.e.Config().RequestBuffer, ctx.Request.Header.ContentLength()
	if cl > 0 && cl <= n {
		body, ok := readSmallBody(ctx, cl)
		if ok {
			ctx.Request.SetBodyRaw(body)
		}
		return nil, ok
	}
	if cl != -1 || n <= 0 {
		return nil, true
	}
	body, whole, ok := readChunkedPrefix(ctx, n)
	if !ok {
		return nil, false
	}
	if whole {
		ctx.Request.SetBodyRaw(body)
		return nil, true
	}
	return body, true
}

// forward sends the request upstream and the answer back; it ends the
// verdict once the response (or its streamed body) is done.
func (p *Proxy) forward(ctx *fasthttp.RequestCtx, cc *clientCtx, v *engine.Verdict, peer netip.Addr, pre []byte) {
	// A buffered request is forwarded as it is (its URI, parsed and
	// normalized, is written with the path the rules matched, dot
	// segments resolved); a streamed one through a copy whose body
	// notices a failing client.
	out := &ctx.Request
	var body *clientBody
	if ctx.Request.IsBodyStream() {
		out = fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(out)
		body = p.streamTo(ctx, out, pre)
	}
	removeHop(&out.Header)
	// A body without a Content-Type goes without one, as the client sent
	// it: fasthttp would name it application/octet-stream, which a
	// service may refuse (415) or read otherwise than what it was sent.
	out.Header.SetNoDefaultContentType(true)
	p.setForwarded(&out.Header, peer, out)
	if _, ok := v.Deadline(); ok {
		v.EachDeadlineHeader(out.Header.Set) // the budget left after the waits, for the service
	}

	up := fasthttp.AcquireResponse()
	cc.startUpstream(out)
	err := p.client.Do(out, up)
	cc.endUpstream(out)
	if errors.Is(err, errClientLeft) {
		// Nobody to answer; the upstream connection is closed, and the
		// request's outcome says nothing of the service.
		fasthttp.ReleaseResponse(up)
		closeUnanswered(ctx)
		v.Done(sluice.Ignore)
		return
	}
	if body != nil && body.failed {
		// The client's upload failed, not the upstream: 408 when too slow
		// (read_timeout, upload_min_rate), else 400. An answer the service
		// gave to the cut body is not passed back.
		fasthttp.ReleaseResponse(up)
		p.log.Info("client body failed", "error", body.err.Error())
		status := http.StatusBadRequest
		var ne net.Error
		if errors.As(body.err, &ne) && ne.Timeout() {
			status = http.StatusRequestTimeout
		}
		ctx.Error(http.StatusText(status), status)
		ctx.SetConnectionClose()
		v.Done(sluice.Ignore)
		return
	}
	if err != nil {
		fasthttp.ReleaseResponse(up)
		status := http.StatusBadGateway
		var ne net.Error
		if errors.Is(err, fasthttp.ErrTimeout) || (errors.As(err, &ne) && ne.Timeout()) {
			status = http.StatusGatewayTimeout
		}
		p.log.Warn("upstream error", "status", status, "error", err.Error())
		ctx.SetStatusCode(status)
		v.Done(sluice.Dropped)
		return
	}
	p.answer(ctx, v, up)
}

// closeUnanswered closes the connection of a client that left without
// writing a response (fasthttp would otherwise send a 200 with no body to
// a client that only half-closed).
func closeUnanswered(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { _ = c.Close() })
}

// streamTo makes out a copy of the client's streamed request whose body
// reads the client through its upload pace (read_timeout,
// upload_min_rate), after pre, the part read before the decision.
func (p *Proxy) streamTo(ctx *fasthttp.RequestCtx, out *fasthttp.Request, pre []byte) *clientBody {
	ctx.Request.Header.CopyTo(&out.Header)
	out.Header.SetRequestURIBytes(ctx.Request.URI().RequestURI())
	rate := 0
	if n := p.e.Config().UploadMinRate; n != nil {
		rate = *n
	}
	var end time.Time
	if p.readTimeout > 0 {
		end = time.Now().Add(p.readTimeout)
	}
	var r io.Reader = uploadpace.New(ctx.RequestBodyStream(), rate, config.UploadWindow, end, time.Now, ctx.Conn().SetReadDeadline)
	if len(pre) > 0 {
		r = io.MultiReader(bytes.NewReader(pre), r)
	}
	body := &clientBody{r: r}
	out.SetBodyStream(body, ctx.Request.Header.ContentLength())
	return body
}

// setForwarded sets the X-Forwarded headers of out: X-Forwarded-For gains
// the peer; X-Forwarded-Host and -Proto say what the client asked (as
// httputil.ReverseProxy's SetXForwarded). A request without a Host (HTTP/1.0)
// gets the upstream's.
func (p *Proxy) setForwarded(h *fasthttp.RequestHeader, peer netip.Addr, out *fasthttp.Request) {
	if peer.IsValid() {
		var buf [64]byte
		ip := peer.Unmap().AppendTo(buf[:0])
		// Every X-Forwarded-For the client sent, in order, joined into one
		// with the peer last (as net/http's ReverseProxy does): appending
		// to the first of two would let the second name the address a
		// service that trusts the last hop takes for the client's.
		var joined []byte
		var spellings []string // the names as sent: deleted as sent
		for k, v := range h.All() {
			if bytes.EqualFold(k, hdrXFF) {
				joined = append(append(joined, v...), ", "...)
				if !slices.Contains(spellings, string(k)) {
					spellings = append(spellings, string(k))
				}
			}
		}
		for _, k := range spellings {
			h.Del(k)
		}
		if joined != nil {
			ip = append(joined, ip...)
		}
		h.SetCanonical(hdrXFF, ip)
	}
	if len(h.Host()) == 0 {
		h.SetHost(p.client.Addr)
		out.UseHostHeader = true
	}
	h.SetCanonical(hdrXFHost, h.Host())
	h.SetCanonical(hdrXFProto, valHTTP)
}

// answer passes the upstream's response up back to the client, with the
// verdict's headers: a body of up to maxBufferedResponse bytes read whole,
// a longer or unknown-length one streamed (the verdict then ends with the
// stream).
func (p *Proxy) answer(ctx *fasthttp.RequestCtx, v *engine.Verdict, up *fasthttp.Response) {
	status := up.StatusCode()
	up.Header.CopyTo(&ctx.Response.Header)
	removeHopResponse(&ctx.Response.Header)
	setQuota(&ctx.Response.Header, v)
	outcome := engine.OutcomeOf(status)
	cost := v.Cost()
	if cost != nil {
		cost.ReadHeaders(func(name string) string { return b2s(up.Header.Peek(name)) })
		cost.SetContentType(b2s(up.Header.ContentType()))
	}
	if engine.IsStream(status, b2s(up.Header.ContentType())) {
		// An event stream stays open as long as its client wants: it
		// holds no adaptive place from its first byte on.
		v.Slot().Free()
	}
	stream := up.BodyStream()
	cl := up.Header.ContentLength()
	if stream == nil || ctx.IsHead() || status == http.StatusNoContent || status == http.StatusNotModified {
		_ = up.CloseBodyStream()
		fasthttp.ReleaseResponse(up)
		v.Done(outcome)
		return
	}
	if cl >= 0 && cl <= maxBufferedResponse {
		bp := copyBufs.Get().(*[]byte)
		_, err := io.CopyBuffer(ctx.Response.BodyWriter(), stream, *bp)
		copyBufs.Put(bp)
		_ = up.CloseBodyStream()
		fasthttp.ReleaseResponse(up)
		if err != nil {
			// The upstream failed mid-body after promising a length: the
			// client's connection is cut, as net/http's engine cuts it, so
			// that a partial body never reads as a whole one.
			p.log.Warn("upstream body failed", "error", err.Error())
			ctx.HijackSetNoResponse(true)
			ctx.Hijack(func(c net.Conn) { c.Close() })
			if cost != nil {
				cost.Cut()
			}
			v.Done(sluice.Dropped)
			return
		}
		if cost != nil && cost.WantsBody() {
			_, _ = cost.Write(ctx.Response.Body())
		}
		v.Done(outcome)
		return
	}
	ub := &upstreamBody{r: stream, up: up, v: *v, outcome: outcome, log: p.log}
	if cost != nil && cost.WantsBody() {
		ub.cost = cost
	}
	ctx.Response.SetBodyStream(ub, cl)
}

// clientBody is a streamed request body on its way upstream; failed says
// its read from the client failed (a malformed chunk, a client gone).
type clientBody struct {
	r      io.Reader
	failed bool
	err    error // the read that failed
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.failed, b.err = true, err
	}
	return n, err
}

// upstreamBody streams an upstream response body to the client and ends
// the verdict when the server has written it (or given up).
type upstreamBody struct {
	r       io.Reader
	up      *fasthttp.Response
	v       engine.Verdict
	outcome sluice.Outcome
	failed  bool
	eof     bool
	log     *slog.Logger
	once    sync.Once
	// cost, when a rule reads the cost from the body (cost_from), is told
	// the body as it streams.
	cost *engine.ResponseCost
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.cost != nil && n > 0 {
		_, _ = b.cost.Write(p[:n])
	}
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.failed = true
		b.log.Warn("upstream body failed", "error", err.Error())
	}
	return n, err
}

// Close is called by fasthttp once the body is written or abandoned.
func (b *upstreamBody) Close() error {
	b.once.Do(func() {
		_ = b.up.CloseBodyStream()
		fasthttp.ReleaseResponse(b.up)
		o := b.outcome
		if b.failed {
			o = sluice.Dropped
		}
		if b.cost != nil && !b.eof {
			b.cost.Cut() // the client left, or the upstream failed, before the end
		}
		b.v.Done(o)
	})
	return nil
}

// readSmallBody reads a request body of cl bytes (at most request_buffer)
// whole. One that cannot be read is the client's fault: it answers 408
// when too slow, else 400, and reports false.
func readSmallBody(ctx *fasthttp.RequestCtx, cl int) ([]byte, bool) {
	body := make([]byte, cl)
	var err error
	if ctx.Request.IsBodyStream() {
		_, err = io.ReadFull(ctx.RequestBodyStream(), body)
	} else if got := ctx.Request.Body(); len(got) == cl {
		copy(body, got)
	} else {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		refuseUnreadBody(ctx, err)
		return nil, false
	}
	return body, true
}

// refuseUnreadBody answers a request whose body could not be read: the
// client's fault, 408 when too slow, else 400; the connection closes.
func refuseUnreadBody(ctx *fasthttp.RequestCtx, err error) {
	status := http.StatusBadRequest
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		status = http.StatusRequestTimeout
	}
	ctx.Error(http.StatusText(status), status)
	ctx.SetConnectionClose()
}

// readChunkedPrefix reads a chunked request body up to n bytes. whole says
// it ended within them (body is all of it); else body is its first n+1
// bytes and the rest is still to stream. One that cannot be read is
// refused (refuseUnreadBody) and ok is false.
func readChunkedPrefix(ctx *fasthttp.RequestCtx, n int) (body []byte, whole, ok bool) {
	buf := make([]byte, n+1)
	r, got := ctx.RequestBodyStream(), 0
	var err error
	for got < len(buf) && err == nil {
		var m int
		m, err = r.Read(buf[got:])
		got += m
	}
	switch {
	case got == len(buf):
		return buf, false, true
	case err == io.EOF: // the last chunk came: the whole body (a cut one is another error)
		return buf[:got], true, true
	}
	refuseUnreadBody(ctx, err)
	return nil, false, false
}

// handOff gives an upgrade request (websocket, h2c) to the net/http
// engine: the connection is hijacked without a response and replayed to
// net/http from the request line on.
func (p *Proxy) handOff(ctx *fasthttp.RequestCtx) {
	var head bytes.Buffer
	head.Write(ctx.Request.Header.Header())
	// fasthttp's ContentLength: -1 chunked, -2 none given (no body).
	if cl := ctx.Request.Header.ContentLength(); cl > 0 || cl == -1 {
		// An upgrade rarely has a body; one is replayed only when it is
		// small and of known length (it is held in memory meanwhile).
		if cl == -1 || cl > p.e.Config().RequestBuffer {
			ctx.Error(http.StatusText(http.StatusRequestEntityTooLarge), http.StatusRequestEntityTooLarge)
			ctx.SetConnectionClose()
			return
		}
		body, ok := readSmallBody(ctx, cl)
		if !ok {
			return
		}
		head.Write(body)
	}
	pre := bytes.NewReader(head.Bytes())
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		p.sorter.std.push(&replayConn{Conn: c, pre: pre})
	})
}

// lingerFor is how long a refused connection is read and discarded after
// its answer, so that the client finishes sending and reads the answer
// (net/http waits as long).
const lingerFor = 500 * time.Millisecond

// refuseAndLinger writes a bare error response on c, half-closes it and
// drains what the client still sends, for up to lingerFor.
func refuseAndLinger(c net.Conn, status int) {
	text := http.StatusText(status)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, text, len(text), text)
	raw := c
	if pc, ok := c.(*peekedConn); ok {
		raw = pc.Conn
	}
	if cw, ok := raw.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerFor))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 256<<10))
}

// Canonical header names and values the fast engine sets.
var (
	hdrXFF     = []byte("X-Forwarded-For")
	hdrXFHost  = []byte("X-Forwarded-Host")
	hdrXFProto = []byte("X-Forwarded-Proto")
	valHTTP    = []byte("http")
)

// isHop reports whether a header name (any case) is hop-by-hop.
func isHop(k []byte) bool {
	if len(k) < 2 || len(k) > 19 {
		return false
	}
	for _, name := range hopHeaders {
		if len(name) == len(k) && strings.EqualFold(name, b2s(k)) {
			return true
		}
	}
	return false
}

// fastHeader is what removing hop-by-hop headers needs of a fasthttp
// request or response header.
type fastHeader interface {
	All() iter.Seq2[[]byte, []byte]
	Del(key string)
}

// hops is the first pass of dropping a header's hop-by-hop fields: the
// names its Connection headers list, and whether any hop-by-hop field but
// Transfer-Encoding (which fasthttp manages itself) is there. Its see is
// called for each field from a loop over the concrete header type (in
// removeHop and removeHopResponse), so that nothing escapes: the same loop
// through fastHeader's All allocated five times a call, twice a proxied
// request.
type hops struct {
	conn  []string // the names the Connection headers list
	found bool
}

// see reads one field of the header.
func (s *hops) see(k, v []byte) {
	if len(k) == len("Connection") && strings.EqualFold(b2s(k), "Connection") {
		for name := range strings.SplitSeq(string(v), ",") {
			if name = strings.TrimSpace(name); name != "" && !strings.EqualFold(name, "close") &&
				!strings.EqualFold(name, "keep-alive") && !framing(name) {
				s.conn = append(s.conn, name)
			}
		}
	}
	s.found = s.found || dropped(k)
}

// dropped reports whether k is a hop-by-hop field to drop: all but
// Transfer-Encoding, which fasthttp frames itself.
func dropped(k []byte) bool {
	return isHop(k) && !strings.EqualFold(b2s(k), "Transfer-Encoding")
}

// dropHop deletes the headers the Connection header names and the
// hop-by-hop headers (dropped), in any case, as the first pass s over h
// found them: an upstream's response keeps its names as sent (the client
// does not normalize them), and "keep-alive" or a "connection: x-hop" went
// to the client while only their canonical spellings were deleted.
// Headers without any (the common case) cost the first pass only.
func dropHop(h fastHeader, s *hops) {
	if !s.found && len(s.conn) == 0 {
		return
	}
	conn := s.conn   // the loop below captures conn, not s: s stays on the caller's stack
	var del []string // as stored: Del matches a name exactly when normalizing is off
	for k := range h.All() {
		if (dropped(k) || listed(conn, k)) && !slices.Contains(del, string(k)) {
			del = append(del, string(k))
		}
	}
	for _, name := range del {
		h.Del(name)
	}
}

// dropUnderscores deletes the request headers whose names hold an
// underscore (config.Proxy.UnderscoresInHeaders). Nothing is allocated
// when there is none.
func dropUnderscores(h *fasthttp.RequestHeader) {
	var names []string
	for k := range h.All() {
		if bytes.IndexByte(k, '_') >= 0 && !slices.Contains(names, string(k)) {
			names = append(names, string(k))
		}
	}
	for _, k := range names {
		h.Del(k)
	}
}

// framing reports whether a header named in Connection is one the message
// cannot lose: its length and its host. "Connection: Content-Length" would
// otherwise strip a body's length (the upstream then fails, and a client
// could shrink the adaptive limit by sending it); net/http's ReverseProxy
// keeps them too (it frames from the request's fields).
func framing(name string) bool {
	return strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Host") || strings.EqualFold(name, "Transfer-Encoding")
}

// listed reports whether name (any case) is one of names.
func listed(names []string, name []byte) bool {
	for _, k := range names {
		if strings.EqualFold(k, b2s(name)) {
			return true
		}
	}
	return false
}

// removeHop deletes the hop-by-hop headers of a request to forward, but
// `TE: trailers`, which httputil.ReverseProxy keeps too (gRPC needs it).
func removeHop(h *fasthttp.RequestHeader) {
	trailers := false
	if te := h.Peek("Te"); len(te) > 0 {
		for _, t := range strings.Split(string(te), ",") {
			trailers = trailers || strings.EqualFold(strings.TrimSpace(t), "trailers")
		}
	}
	var s hops
	for k, v := range h.All() {
		s.see(k, v)
	}
	dropHop(h, &s)
	if trailers {
		h.Set("Te", "trailers")
	}
}

// removeHopResponse deletes the hop-by-hop headers of a response to send,
// the upstream's Connection header among them: the client connection's own
// is fasthttp's to write.
func removeHopResponse(h *fasthttp.ResponseHeader) {
	var s hops
	for k, v := range h.All() {
		s.see(k, v)
	}
	dropHop(h, &s)
	h.ResetConnectionClose()
}

// quotaBufs hold the quota headers' values until fasthttp copies them.
var quotaBufs = sync.Pool{New: func() any { return new([256]byte) }}

// setQuota sets v's quota headers on h. fasthttp copies each value as it
// sets it, so the values are written in a pooled buffer: nothing is
// allocated (a rule id too long for it costs one allocation).
func setQuota(h *fasthttp.ResponseHeader, v *engine.Verdict) {
	b := quotaBufs.Get().(*[256]byte)
	v.EachHeaderIn(b[:0], func(k, val string) { h.SetCanonical(s2b(k), s2b(val)) })
	quotaBufs.Put(b)
}

// writeFastRefusal answers a refused verdict as WriteResponse does.
func writeFastRefusal(ctx *fasthttp.RequestCtx, v *engine.Verdict) {
	setQuota(&ctx.Response.Header, v)
	ctx.Response.Header.SetContentType("application/problem+json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(v.Status)
	var buf [512]byte // a body is about 250 bytes; AppendBody copies it
	ctx.Response.AppendBody(problem.Append(buf[:0], v))
}

// fastHeaders is a fasthttp request's headers as the engine's Headers.
type fastHeaders struct{ h *fasthttp.RequestHeader }

func (f fastHeaders) Get(name string) string { return b2s(f.h.Peek(name)) }

// Count implements engine.HeaderCounter: no allocation.
func (f fastHeaders) Count(name string) int { return len(f.h.PeekAll(name)) }

func (f fastHeaders) Values(name string) []string {
	all := f.h.PeekAll(name)
	if len(all) == 0 {
		return nil
	}
	out := make([]string, len(all))
	for i, v := range all {
		out[i] = b2s(v)
	}
	return out
}

// b2s views b as a string without copying; b must not change while the
// string is in use (fasthttp's request buffers live until the handler
// returns, and the engine copies what it keeps).
func b2s(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// rawHeader returns the value of the first header named name (lower case)
// in raw header bytes as received, trimmed; nil when absent. fasthttp
// drops some headers it interprets (Transfer-Encoding: identity), so the
// raw bytes are the truth of what the client sent.
func rawHeader(raw []byte, name string) []byte {
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && len(k) == len(name) && strings.EqualFold(b2s(k), name) {
			return bytes.TrimSpace(v)
		}
	}
	return nil
}

// s2b views s as bytes without copying; the bytes must not be written
// (fasthttp copies what it is given to set).
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// idleConn bounds each read from the upstream: the response headers once
// the request was sent, and each next piece of the body (upstream_timeout;
// an upstream that stalls is cut off, a long stream that keeps sending is
// not).
//
// Moving a deadline costs a runtime timer update, so a read moves it only
// when an eighth of the timeout has passed since it was last moved: the
// bound a stalled upstream meets is between 7/8 of the timeout and the
// timeout.
type idleConn struct {
	net.Conn
	timeout time.Duration
	set     time.Time // when the deadline was last moved
}

func (c *idleConn) Read(p []byte) (int, error) {
	if now := time.Now(); now.Sub(c.set) > c.timeout/8 {
		c.set = now
		_ = c.Conn.SetReadDeadline(now.Add(c.timeout))
	}
	return c.Conn.Read(p)
}
