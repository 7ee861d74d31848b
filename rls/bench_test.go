package rls_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/sidecar/admin"
)

// benchRules: the same limit as a descriptor rule (for Envoy) and as an
// HTTP rule (for /v1/check), high enough never to deny.
const benchRules = `rules:
  - {rule_id: rls, algorithm: token_bucket, limit: 1000000000, window: 1h, descriptor: {domain: bench, entries: [{key: user}]}}
  - {rule_id: http, identifier_type: user_id, algorithm: token_bucket, limit: 1000000000, window: 1h}
`

// BenchmarkShouldRateLimit is ShouldRateLimit calls over loopback gRPC with
// Envoy's generated client (one connection, many callers): ns/op is the
// inverse of decisions per second, client and server on this machine.
func BenchmarkShouldRateLimit(b *testing.B) {
	c, _ := serve(b, benchRules)
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(16) // 16 callers per CPU: throughput, not one caller's latency
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.ShouldRateLimit(ctx, req)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Errorf("%v %v", resp, err)
				return
			}
		}
	})
}

// BenchmarkHTTPCheck is the same decision asked over HTTP/1.1 on loopback:
// the admin port's POST /v1/check with consume, keep-alive.
func BenchmarkHTTPCheck(b *testing.B) {
	_, e := serve(b, benchRules)
	srv := httptest.NewServer(admin.Handler(e, admin.Options{}))
	defer srv.Close()
	body := []byte(`{"method":"GET","path":"/","remote_addr":"127.0.0.1:1","headers":{"X-User-ID":"u1"},"consume":true}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.SetParallelism(16) // 16 callers per CPU: throughput, not one caller's latency
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(srv.URL+"/v1/check", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
