package daemon_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkProxyPath is one request through a real sluice Server on
// loopback (no rules, adaptive off), each engine, next to the upstream
// direct: client, proxy and upstream share the process, so the proxy's
// own allocations are a row's minus direct's. Throughput figures come from
// make bench-proxy; this is for allocations per request.
func BenchmarkProxyPath(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer up.Close()
	run := func(b *testing.B, addr string) {
		client := &fasthttp.HostClient{Addr: addr, MaxConns: 64}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + addr + "/x")
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d", err, resp.StatusCode())
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, strings.TrimPrefix(up.URL, "http://")) })
	for _, eng := range []string{"fast", "nethttp"} {
		b.Run(eng, func(b *testing.B) {
			s := startServer(b, "upstream: "+up.URL+"\nadaptive: {algorithm: off}\nproxy: {engine: "+eng+"}\n")
			proxy, _ := s.Addrs()
			run(b, proxy)
		})
	}
}
