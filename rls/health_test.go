package rls_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rls"
)

// The RLS port answers grpc.health.v1 as envoyproxy/ratelimit's does:
// SERVING (for the server and for the rate limit service) while the store
// counts, NOT_SERVING while Redis is down, SERVING again once it is back.
func TestHealthFollowsTheStore(t *testing.T) {
	srv := redistest.Start(t)
	cfg, err := config.Parse("t.yaml", []byte(fmt.Sprintf(`adaptive: {algorithm: off}
store: {type: redis, redis: {addrs: [%q], timeout: 100ms}}
rules:
  - {rule_id: a, algorithm: fixed_window, limit: 1000000, window: 1m, descriptor: {domain: d, entries: [{key: user}]}}
`, srv.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(cfg, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	defer e.Close()
	s, err := rls.Listen("127.0.0.1:0", e)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, rl := healthpb.NewHealthClient(conn), rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	status := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health %q: %v", service, err)
		}
		return resp.GetStatus()
	}
	// waitFor polls the status, sending calls meanwhile so that the store
	// notices Redis's state.
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			_, _ = rl.ShouldRateLimit(ctx, request("d", 0, d("user", "u")))
			if status("") == want && status(rlsv3.RateLimitService_ServiceDesc.ServiceName) == want {
				return
			}
		}
		t.Fatalf("health stayed %v (server) / %v (service), want %v", status(""), status(rlsv3.RateLimitService_ServiceDesc.ServiceName), want)
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	srv.Stop()
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	srv.Restart()
	waitFor(healthpb.HealthCheckResponse_SERVING)
}
