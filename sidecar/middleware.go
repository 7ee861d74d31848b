package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// requestOf makes the engine's view of r. Paths with "//" or dot segments
// are cleaned for matching, so that "/a/../orders/1" cannot slip past a rule
// on "/orders/*" while the upstream resolves it.
func requestOf(r *http.Request) Request {
	p := r.URL.Path
	if strings.Contains(p, "//") || strings.Contains(p, "/.") {
		c := path.Clean(p)
		if strings.HasSuffix(p, "/") && c != "/" {
			c += "/"
		}
		p = c
	}
	return Request{Method: r.Method, Path: p, RemoteAddr: r.RemoteAddr, Header: r.Header}
}

// Middleware wraps next with the engine: refused requests get 429 or 503
// with the quota headers and a problem+json body; admitted ones carry the
// quota headers of their tightest rule, and their outcome (by status code,
// see OutcomeOf; Ignore if the client left) and latency feed the adaptive
// limit. Leaky-bucket and semaphore delays are held before next runs.
func (e *Engine) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := requestOf(r)
		v, err := e.Decide(r.Context(), &req)
		if err != nil {
			return // the client left while waiting; nobody to answer
		}
		if !v.Allowed {
			v.WriteResponse(w)
			return
		}
		v.WriteHeaders(w.Header())
		rec := &statusRecorder{ResponseWriter: w}
		outcome := sluice.Ignore
		defer func() { v.Done(outcome) }()
		next.ServeHTTP(rec, r)
		if r.Context().Err() == nil {
			outcome = OutcomeOf(rec.status())
		}
	})
}

// statusRecorder remembers the status written; Unwrap lets
// http.ResponseController reach the connection (flush, hijack for
// upgrades).
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

// NewProxy returns a reverse proxy to upstream: hop-by-hop headers and
// upgrades handled by httputil.ReverseProxy, X-Forwarded-For appended, the
// client's Host kept, streaming responses flushed as they come. An upstream
// that does not answer within timeout gets 504 (a Dropped outcome); one that
// cannot be reached, 502.
func NewProxy(upstream *url.URL, timeout time.Duration, log *slog.Logger) *httputil.ReverseProxy {
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
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			if xff := pr.In.Header.Values("X-Forwarded-For"); len(xff) > 0 {
				pr.Out.Header["X-Forwarded-For"] = append([]string(nil), xff...)
			}
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
		},
		Transport: transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			status := http.StatusBadGateway
			var ne net.Error
			if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
				status = http.StatusGatewayTimeout
			}
			log.Warn("upstream error", "status", status, "error", err.Error())
			w.WriteHeader(status)
		},
	}
}
