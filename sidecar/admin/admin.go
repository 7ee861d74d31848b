// Package admin is the sidecar's admin port: metrics, health, readiness,
// state and its history, the live page, reload and check, guarded against
// what a browser could be tricked into sending.
package admin

import (
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// Options are what an admin port serves beyond the engine's own state.
type Options struct {
	// Reload, when set, serves POST /v1/reload (501 without it).
	Reload func() error
	// NotReady, when set, makes /readyz answer 503 while it says why (a
	// non-empty string).
	NotReady func() string
	// AllowedHosts are host names the admin port answers to besides
	// localhost and IP literals (admin_hosts).
	AllowedHosts []string
}

// Handler serves the admin port: GET /metrics, /healthz, /readyz,
// /v1/state, /v1/history (empty: a Server keeps the history), /ui;
// POST /v1/reload (o.Reload calls back), /v1/check.
//
// The admin port refuses what a browser could be tricked into sending it
// (CSRF, DNS rebinding): a request whose Host is a name other than
// localhost or one of o.AllowedHosts (IP literals are always accepted: a
// rebinding attack needs a name) gets 421; a POST from another origin
// (an Origin header naming another host) gets 403; a POST whose body is
// not application/json gets 415.
func Handler(e *engine.Engine, o Options) http.Handler {
	return handler(e, o, nil)
}

// handler is Handler whose /v1/history serves hist's points (none when
// nil).
func handler(e *engine.Engine, o Options, hist *history) http.Handler {
	reload, notReady := o.Reload, o.NotReady
	mux := http.NewServeMux()
	if g := e.Metrics().Gatherer; g != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !e.Ready() {
			http.Error(w, "not ready: rules not loaded or the store has not answered yet", http.StatusServiceUnavailable)
			return
		}
		if notReady != nil {
			if why := notReady(); why != "" {
				http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, e.State()) })
	mux.HandleFunc("GET /v1/history", hist.serve)
	mux.HandleFunc("GET /ui", serveUI)
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, _ *http.Request) {
		if reload == nil {
			writeJSON(w, 501, map[string]string{"error": "this engine has no configuration file to reload"})
			return
		}
		if err := reload(); err != nil {
			writeJSON(w, 400, map[string]string{"error": err.Error(), "result": "kept the previous rules"})
			return
		}
		writeJSON(w, 200, map[string]string{"result": "reloaded"})
	})
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Method     string            `json:"method"`
			Path       string            `json:"path"`
			RemoteAddr string            `json:"remote_addr"`
			Headers    map[string]string `json:"headers"`
			Consume    bool              `json:"consume"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			writeJSON(w, 400, map[string]string{"error": "body: " + err.Error()})
			return
		}
		if in.Method == "" {
			in.Method = "GET"
		}
		if !strings.HasPrefix(in.Path, "/") {
			writeJSON(w, 400, map[string]string{"error": "path: must start with /"})
			return
		}
		h := http.Header{}
		for k, v := range in.Headers {
			h.Set(k, v)
		}
		v, err := e.CheckStatic(r.Context(), &engine.Request{Method: strings.ToUpper(in.Method), Path: in.Path, RemoteAddr: in.RemoteAddr, Header: h}, in.Consume)
		if err != nil {
			status := 503
			if errors.Is(err, engine.ErrAmbiguous) {
				status = 400
			}
			writeJSON(w, status, map[string]string{"error": err.Error()})
			return
		}
		v.Done(sluice.Ignore)
		out := http.Header{}
		v.WriteHeaders(out)
		headers := map[string]string{}
		for k := range out {
			headers[k] = out.Get(k)
		}
		status := 200
		if !v.Allowed {
			status = v.Status
		}
		writeJSON(w, 200, map[string]any{
			"allowed": v.Allowed, "status": status, "rule_id": v.Decision.RuleID, "limit": v.Decision.Limit,
			"remaining": v.Decision.Remaining, "reset_after_ms": v.Decision.ResetAfter.Milliseconds(),
			"retry_after_ms": v.Decision.RetryAfter.Milliseconds(), "delay_ms": v.Decision.Delay.Milliseconds(),
			"consumed": in.Consume && v.Allowed, "violated_policies": v.Violated,
			"reason": v.Reason.String(), "headers": headers,
		})
	})
	hosts := map[string]bool{"localhost": true}
	for _, h := range o.AllowedHosts {
		hosts[strings.ToLower(h)] = true
	}
	return adminGuard(mux, hosts)
}

// uiPage is the live page: one self-contained file, no external fonts,
// scripts or styles.
//
//go:embed ui.html
var uiPage []byte

// serveUI serves the live page; its Content-Security-Policy lets it talk
// to the admin port only.
func serveUI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(uiPage)
}

// adminGuard refuses foreign hosts, cross-origin POSTs and non-JSON bodies.
func adminGuard(next http.Handler, hosts map[string]bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostOnly(r.Host)
		if !hosts[host] && !isIPLiteral(host) {
			http.Error(w, "admin: unknown host "+strconv.Quote(r.Host)+" (add it to admin_hosts)", http.StatusMisdirectedRequest)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if o := r.Header.Get("Origin"); o != "" {
				u, err := url.Parse(o)
				if err != nil || !strings.EqualFold(u.Host, r.Host) {
					http.Error(w, "admin: cross-origin request refused", http.StatusForbidden)
					return
				}
			}
			if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
				mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
				if err != nil || mt != "application/json" {
					http.Error(w, "admin: the body must be application/json", http.StatusUnsupportedMediaType)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostOnly returns the lower-case host of a Host header, without its port
// or IPv6 brackets.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

func isIPLiteral(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
