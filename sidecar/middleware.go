package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar/internal/uploadpace"
)

// requestOf makes the engine's view of r. A path with "//" or dot segments
// is cleaned, and forwarded cleaned, so that the upstream resolves exactly
// the path the rules were matched against ("/a/../orders/1" cannot slip
// past a rule on "/orders/*"). ok is false for a path with an encoded slash
// ("%2F"): routers disagree on whether it separates segments, so it is
// refused; and for an opaque request-target ("http:secret/x").
func requestOf(r *http.Request) (req engine.Request, ok bool) {
	if raw := r.URL.RawPath; raw != "" && (strings.Contains(raw, "%2f") || strings.Contains(raw, "%2F")) {
		return engine.Request{}, false
	}
	if r.URL.Opaque != "" {
		// "GET http:secret/x": no path for the rules to see ("/"), while
		// the upstream would be asked for "secret/x". Refused, as the
		// fast engine and nginx refuse it.
		return engine.Request{}, false
	}
	p := r.URL.Path
	if strings.Contains(p, "//") || strings.Contains(p, "/.") {
		c := path.Clean(p)
		if strings.HasSuffix(p, "/") && c != "/" {
			c += "/"
		}
		if c != p {
			r.URL.Path, r.URL.RawPath = c, ""
			p = c
		}
	}
	return engine.Request{Method: r.Method, Path: p, RemoteAddr: r.RemoteAddr, Header: canonicalHeaders(r.Header), Host: r.Host}, true
}

// canonicalHeaders is an http.Header read by the names engine.Headers
// promises, canonical ones: a map index, where http.Header.Get
// canonicalizes the name again on each of a request's several lookups (8%
// of BenchmarkMiddleware's ten rules). net/http stores a request's header
// names canonical, so both find the same values.
type canonicalHeaders http.Header

// Get implements engine.Headers.
func (h canonicalHeaders) Get(name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values implements engine.Headers.
func (h canonicalHeaders) Values(name string) []string { return h[name] }

// Middleware wraps next with the engine: refused requests get 429 or 503
// with the quota headers and a problem+json body; admitted ones carry the
// quota headers of their tightest rule, and their outcome (by status code,
// see OutcomeOf; Ignore if the client left; Dropped if next aborts the
// response while the client is still there) and latency feed the adaptive
// limit. Leaky-bucket and semaphore delays are held before next runs.
//
// A request body of up to request_buffer bytes is read whole before the
// request is decided, so that a client that uploads slowly holds no quota
// and no adaptive slot meanwhile (bound the time with the server's
// ReadTimeout); a longer body streams its rest to next, and its round-trip
// time is measured from the end of the upload. A body that cannot be read
// gets 400 (malformed), 408 (too slow) or 413 (over http.MaxBytesReader).
func Middleware(e *engine.Engine, next http.Handler) http.Handler {
	// The status recorders are reused: next may not touch its
	// ResponseWriter once it has returned (net/http's contract), and
	// nothing else keeps one.
	recorders := sync.Pool{New: func() any { return new(statusRecorder) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var start time.Time // when a body's upload began: read only for one
		var streamed *uploadEnd
		if r.Body != nil && r.Body != http.NoBody {
			start = time.Now()
			var status int
			if streamed, status = bufferBody(r, e.Config().RequestBuffer); status != 0 {
				// Answered even when the request's context ended: a client
				// that half-closed after a short body still reads, and a
				// handler that writes nothing would send it a 200.
				w.Header().Set("Connection", "close")
				http.Error(w, http.StatusText(status), status)
				return
			}
		}
		if strings.IndexByte(r.RequestURI, '#') >= 0 {
			// A fragment is never sent: routers disagree on whether '#'
			// ends the path (net/http keeps it, as %23; fasthttp drops it).
			http.Error(w, "Bad Request: '#' in the request-target", http.StatusBadRequest)
			return
		}
		req, ok := requestOf(r)
		if !ok {
			http.Error(w, "ambiguous request path: encoded slash", http.StatusBadRequest)
			return
		}
		v, err := e.Decide(r.Context(), &req)
		if errors.Is(err, engine.ErrAmbiguous) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err != nil {
			return // the client left while waiting; nobody to answer
		}
		if !v.Allowed {
			WriteResponse(w, &v)
			return
		}
		if streamed != nil {
			paceUpload(e.Config(), streamed, v, start, w)
		}
		if _, ok := v.Deadline(); ok {
			v.EachDeadlineHeader(r.Header.Set) // the budget left after the waits, for the service
		}
		v.WriteHeaders(w.Header())
		rec := recorders.Get().(*statusRecorder)
		*rec = statusRecorder{ResponseWriter: w, upload: streamed, cost: v.Cost(), slot: v.Slot()}
		outcome := sluice.Ignore
		defer func() {
			p := recover()
			if rec.cost != nil {
				readCost(rec, p != nil || r.Context().Err() != nil)
			}
			*rec = statusRecorder{}
			recorders.Put(rec)
			if p != nil {
				// next aborted the response (http.ErrAbortHandler from a
				// reverse proxy whose upstream failed mid-body).
				if r.Context().Err() == nil {
					outcome = sluice.Dropped
				}
				v.Done(outcome)
				panic(p)
			}
			v.Done(outcome)
		}()
		next.ServeHTTP(rec, r)
		if streamed != nil && streamed.failed.Load() && rec.code == 0 {
			// next wrote nothing for a body the client did not finish
			// (net/http would answer 200): the proxy's 408 or 400.
			rec.WriteHeader(streamed.status())
		}
		switch {
		case r.Context().Err() != nil:
		case streamed != nil && streamed.failed.Load():
			// The client's body failed, not the service: no signal.
		default:
			outcome = engine.OutcomeOf(rec.status())
		}
	})
}

// readCost tells the request's ResponseCost the response's headers (and
// trailers: a handler's are in its header map once it returns, declared
// or with http.TrailerPrefix) and whether the body was cut.
func readCost(rec *statusRecorder, cut bool) {
	h := rec.Header()
	rec.cost.ReadHeaders(func(name string) string {
		if v := h.Get(name); v != "" {
			return v
		}
		return h.Get(http.TrailerPrefix + name)
	})
	if cut {
		rec.cost.Cut()
	}
}

// paceUpload bounds the rest of a streamed upload by read_timeout from
// start and upload_min_rate, and restarts upload's round-trip clock when
// it ends (the client's upload time is not the service's). upload is a
// copy, so that only streamed requests move a Verdict to the heap (its
// permit is a handle: the copy restarts the same clock).
func paceUpload(cfg *config.Config, streamed *uploadEnd, upload engine.Verdict, start time.Time, w http.ResponseWriter) {
	streamed.restart = upload.RestartClock
	var end time.Time
	if cfg.ReadTimeout > 0 {
		end = start.Add(cfg.ReadTimeout.D())
	}
	rate := 0
	if cfg.UploadMinRate != nil {
		rate = *cfg.UploadMinRate
	}
	streamed.rest = uploadpace.New(streamed.rest, rate, config.UploadWindow, end, time.Now,
		http.NewResponseController(w).SetReadDeadline)
}

// bufferBody reads up to limit bytes of r's body. A body that fits is
// replaced by the bytes read (with its length known); a longer one by those
// bytes followed by the rest, which the returned uploadEnd watches. A read
// error gives the status to answer with.
func bufferBody(r *http.Request, limit int) (*uploadEnd, int) {
	if limit <= 0 {
		return nil, 0
	}
	var buf bytes.Buffer
	if r.ContentLength >= 0 {
		buf.Grow(int(min(r.ContentLength, int64(limit))) + 1)
	}
	// A chunked body of unknown length grows the buffer as it comes.
	_, err := io.CopyN(&buf, r.Body, int64(limit)+1)
	switch {
	case err == io.EOF:
		// The whole body is here.
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
		r.ContentLength = int64(buf.Len())
		r.TransferEncoding = nil
		return nil, 0
	case err != nil:
		var ne net.Error
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, http.StatusRequestEntityTooLarge
		case errors.As(err, &ne) && ne.Timeout():
			return nil, http.StatusRequestTimeout
		}
		return nil, http.StatusBadRequest
	}
	// More than limit: stream the rest.
	u := &uploadEnd{rest: r.Body}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf.Bytes()), u), r.Body}
	return u, 0
}

// uploadEnd reads the rest of a streamed body and, at its end, moves the
// start of the adaptive round-trip time there: the upload is the client's
// time, not the upstream's. A read that fails is the client's fault: it is
// marked so (ClientBodyError) and the request's outcome says nothing of
// the service.
type uploadEnd struct {
	rest    io.Reader
	restart func() // the verdict's RestartClock
	failed  atomic.Bool
	timeout atomic.Bool // the failure was a read deadline: too slow
}

// status is the answer to a failed upload: 408 when too slow, else 400.
func (u *uploadEnd) status() int {
	if u.timeout.Load() {
		return http.StatusRequestTimeout
	}
	return http.StatusBadRequest
}

func (u *uploadEnd) Read(p []byte) (int, error) {
	n, err := u.rest.Read(p)
	switch {
	case err == io.EOF:
		if u.restart != nil {
			u.restart()
		}
	case err != nil:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			u.timeout.Store(true)
		}
		u.failed.Store(true)
		err = &ClientBodyError{Err: err}
	}
	return n, err
}

// ClientBodyError is a failure to read a request's body from the client (a
// malformed chunk, a client gone or too slow): the proxy answers 400, and
// the adaptive limit does not count it as the service's failure.
type ClientBodyError struct{ Err error }

func (e *ClientBodyError) Error() string { return "reading the request body: " + e.Err.Error() }

// Unwrap returns the read error.
func (e *ClientBodyError) Unwrap() error { return e.Err }

// statusRecorder remembers the status written; Unwrap lets
// http.ResponseController reach the connection (flush, hijack for
// upgrades).
type statusRecorder struct {
	http.ResponseWriter
	code int
	// upload, for a streamed body, tells whether the client's upload
	// failed: the service's answer to a cut body is not passed back.
	upload  *uploadEnd
	swallow bool // the answer is the proxy's: what next writes is dropped
	// cost, when a rule reads the request's cost from its response
	// (cost_from), is told the body as it goes to the client.
	cost *engine.ResponseCost
	// slot is the request's adaptive place, given back once the answer
	// is a stream (engine.IsStream) or the connection is hijacked.
	slot engine.Slot
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code != 0 {
		s.ResponseWriter.WriteHeader(code)
		return
	}
	s.code = code
	if s.upload != nil && s.upload.failed.Load() {
		// The service answered a body the client never finished (it saw
		// the body end early): the client gets the proxy's 408 or 400,
		// as when the service had not answered at all.
		s.code, s.swallow = s.upload.status(), true
		h := s.ResponseWriter.Header()
		clear(h)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Connection", "close")
		s.ResponseWriter.WriteHeader(s.code)
		_, _ = io.WriteString(s.ResponseWriter, http.StatusText(s.code)+"\n")
		return
	}
	if s.cost != nil && s.cost.WantsBody() {
		s.cost.SetContentType(s.Header().Get("Content-Type"))
	}
	if engine.IsStream(code, s.Header().Get("Content-Type")) {
		s.slot.Free()
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.WriteHeader(http.StatusOK)
	}
	if s.swallow {
		return len(b), nil
	}
	n, err := s.ResponseWriter.Write(b)
	if s.cost != nil && s.cost.WantsBody() {
		_, _ = s.cost.Write(b[:n])
		if err != nil {
			s.cost.Cut()
		}
	}
	return n, err
}

// Flush sends what was written; a flush before anything was written
// sends the status and headers (200), which is when a stream is known.
func (s *statusRecorder) Flush() {
	if s.code == 0 {
		s.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Hijack takes the connection over (a WebSocket, an upgrade a handler or
// the reverse proxy answers itself): from then on it is the client's and
// the service's, and its adaptive place is given back.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil {
		s.slot.Free()
	}
	return c, rw, err
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

// NewProxy returns a reverse proxy to upstream: hop-by-hop headers and
// upgrades handled by httputil.ReverseProxy, X-Forwarded-For appended, the
// client's Host kept, streaming responses flushed as they come. timeout
// bounds each wait on the upstream: for the response headers once the
// request is sent (then 504, a Dropped outcome), and for each next read of
// the response body (then the response is cut off, also Dropped); time the
// proxy spends writing to a slow client is not counted. An upstream that
// cannot be reached gets 502.
func NewProxy(upstream *url.URL, timeout time.Duration, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	transport := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
		// The client's Accept-Encoding goes up as it came, and the answer
		// back as the service encoded it: net/http would ask for gzip
		// where the client did not, and decompress on the sidecar's CPU.
		DisableCompression: true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			// The query as the client sent it, as the fast engine and
			// nginx send it: ReverseProxy drops the parameters it cannot
			// parse and re-encodes the rest (a service that checks a
			// signature over its raw query would refuse it). No rule
			// reads the query, so there is no parse of it to agree with.
			switch in := pr.In.URL.RawQuery; {
			case upstream.RawQuery == "":
				pr.Out.URL.RawQuery = in
			case in == "":
				pr.Out.URL.RawQuery = upstream.RawQuery
			default:
				pr.Out.URL.RawQuery = upstream.RawQuery + "&" + in
			}
			if xff := pr.In.Header.Values("X-Forwarded-For"); len(xff) > 0 {
				pr.Out.Header["X-Forwarded-For"] = append([]string(nil), xff...)
			}
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
			if strings.EqualFold(pr.Out.Header.Get("Upgrade"), "h2c") {
				// An h2c upgrade is not forwarded (as nginx does not
				// forward one): the upstream answers in HTTP/1.1, and
				// every request stays one the rules see, not a stream
				// in a tunnel they cannot.
				pr.Out.Header.Del("Upgrade")
				pr.Out.Header.Del("Connection")
				pr.Out.Header.Del("Http2-Settings")
			}
		},
		Transport: transport,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusSwitchingProtocols || timeout <= 0 {
				return nil // an upgraded connection is the client's and the upstream's
			}
			if cancel, ok := resp.Request.Context().Value(cancelKey{}).(context.CancelCauseFunc); ok {
				resp.Body = &idleBody{ReadCloser: resp.Body, timeout: timeout,
					timer: time.AfterFunc(time.Hour, func() { cancel(errUpstreamStalled) })}
				resp.Body.(*idleBody).timer.Stop()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ne net.Error
			var cbe *ClientBodyError
			if errors.As(err, &cbe) {
				// Before the context check: a body read that failed ends
				// the request's context too, and a handler that writes
				// nothing would send the client a 200.
				log.Info("client body failed", "error", err.Error())
				status := http.StatusBadRequest
				if errors.As(err, &ne) && ne.Timeout() {
					status = http.StatusRequestTimeout // too slow: read_timeout or upload_min_rate
				}
				w.Header().Set("Connection", "close")
				w.WriteHeader(status)
				return
			}
			if r.Context().Err() != nil && !errors.Is(context.Cause(r.Context()), errUpstreamStalled) {
				return // the client left
			}
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errUpstreamStalled) || (errors.As(err, &ne) && ne.Timeout()) {
				status = http.StatusGatewayTimeout
			}
			log.Warn("upstream error", "status", status, "error", err.Error())
			w.WriteHeader(status)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, cancelKey{}, cancel)))
	})
}

// cancelKey finds, in an outgoing request's context, the function that
// abandons it.
type cancelKey struct{}

var errUpstreamStalled = errors.New("upstream stalled mid-response")

// idleBody cancels the exchange when one read of the upstream's response
// body waits longer than timeout.
type idleBody struct {
	io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}
