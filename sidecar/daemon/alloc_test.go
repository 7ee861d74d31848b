package daemon_test

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

// The fast engine's request path allocates nothing, quota headers and the
// default adaptive limit included: a request through `sluice run` with
// five rules, between a fasthttp client and a fasthttp upstream (neither
// allocates once warm), costs no allocation in the whole process, and
// neither does a refusal. Before session 48 each proxied request cost
// three: X-Forwarded-For's copy, the quota headers' values and the closure
// that gave the upstream connection back; each refusal one.
func TestFastEngineAllocatesNothing(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector makes sync.Pool drop items: make test runs this without it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Shutdown() })
	s := startServer(t, "upstream: http://"+ln.Addr().String()+"\nproxy: {engine: fast}\nrules:\n"+
		"  - {rule_id: ip,     identifier_type: ip_address, algorithm: token_bucket,   limit: 1000000,    window: 1s}\n"+
		"  - {rule_id: ip_sw,  identifier_type: ip_address, algorithm: sliding_window, limit: 1000000000, window: 1m}\n"+
		"  - {rule_id: all,    identifier_type: global,     algorithm: gcra,           limit: 1000000,    window: 1s, burst: 1000}\n"+
		"  - {rule_id: host,   identifier_type: \"header:Host\", algorithm: fixed_window, limit: 1000000000, window: 1h}\n"+
		"  - {rule_id: gets,   identifier_type: ip_address, algorithm: token_bucket,   limit: 1000000,    window: 1s, match: {methods: [GET], path_pattern: /api/**}}\n"+
		"  - {rule_id: deny,   identifier_type: global,     algorithm: fixed_window,   limit: 1,          window: 1h, match: {path_pattern: /deny}}\n")
	addr, _ := s.Addrs()
	client := &fasthttp.HostClient{Addr: addr, MaxConns: 1}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for _, c := range []struct {
		path string
		want int
	}{{"/api/orders/42", 200}, {"/deny", 429}} {
		req.SetRequestURI("http://" + addr + c.path)
		do := func() {
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != c.want || len(resp.Header.Peek("Ratelimit")) == 0 {
				t.Fatalf("%s: %v: %d, want %d with quota headers\n%s", c.path, err, resp.StatusCode(), c.want, resp.Header.String())
			}
		}
		if c.want == 429 {
			_ = client.Do(req, resp) // the one the rule admits
		}
		for range 200 {
			do() // warm: pools, the keys, the upstream connection
		}
		if n := testing.AllocsPerRun(1000, do); n != 0 {
			t.Errorf("%s: %v allocations per request, want 0", c.path, n)
		}
	}
}
