package clientlimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/clientlimit"
	"github.com/sluicehq/sluice/throttle"
)

// healthServer answers Check with answer(hit).
type healthServer struct {
	healthpb.UnimplementedHealthServer
	hits   atomic.Int64
	answer func(hit int64) error
}

func (h *healthServer) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := h.answer(h.hits.Add(1)); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Watch answers with answer(hit) too: a refusal, or one status and the
// stream's end.
func (h *healthServer) Watch(_ *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	if err := h.answer(h.hits.Add(1)); err != nil {
		return err
	}
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

func grpcClient(t *testing.T, h *healthServer, g *clientlimit.GRPC) healthpb.HealthClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(g.UnaryClientInterceptor()), grpc.WithStreamInterceptor(g.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestGRPCThrottlesAndRetries: a gRPC client refuses locally while the
// service answers RESOURCE_EXHAUSTED, retries within its budget, waits a
// RetryInfo's delay when it fits, and leaves UNAVAILABLE of a method not
// marked idempotent alone.
func TestGRPCThrottlesAndRetries(t *testing.T) {
	t.Run("throttle", func(t *testing.T) {
		h := &healthServer{answer: func(int64) error { return status.Error(codes.ResourceExhausted, "full") }}
		g := &clientlimit.GRPC{Throttle: throttle.New(throttle.Config{})}
		c := grpcClient(t, h, g)
		for range 300 {
			if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("error %v, want RESOURCE_EXHAUSTED", err)
			}
		}
		if n := h.hits.Load(); n > 100 || n < 2 || g.Stats().Throttled != uint64(300-n) {
			t.Errorf("%d of 300 calls reached a service refusing all (stats %+v), want a few", n, g.Stats())
		}
	})
	t.Run("retry", func(t *testing.T) {
		h := &healthServer{answer: func(hit int64) error {
			if hit == 1 {
				st, _ := status.New(codes.ResourceExhausted, "full").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(20 * time.Millisecond)})
				return st.Err()
			}
			return nil
		}}
		g := &clientlimit.GRPC{Budget: throttle.NewRetryBudget(throttle.BudgetConfig{})}
		c := grpcClient(t, h, g)
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || h.hits.Load() != 2 || g.Stats().Retries != 1 {
			t.Fatalf("error %v after %d hits (stats %+v), want success on the retry", err, h.hits.Load(), g.Stats())
		}
	})
	t.Run("unavailable_not_idempotent", func(t *testing.T) {
		h := &healthServer{answer: func(int64) error { return status.Error(codes.Unavailable, "down") }}
		g := &clientlimit.GRPC{Budget: throttle.NewRetryBudget(throttle.BudgetConfig{})}
		c := grpcClient(t, h, g)
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable || h.hits.Load() != 1 {
			t.Fatalf("error %v after %d hits, want UNAVAILABLE without a retry", err, h.hits.Load())
		}
		g = &clientlimit.GRPC{Budget: throttle.NewRetryBudget(throttle.BudgetConfig{}), Idempotent: func(string) bool { return true }}
		c = grpcClient(t, h, g)
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable || h.hits.Load() != 4 {
			t.Fatalf("error %v after %d hits, want 2 retries of an idempotent method", err, h.hits.Load())
		}
	})
}

// Streams are throttled as calls are: streams the service served count as
// accepted (100 served earn K x 100 = 200 requests before the client
// refuses any), and once it refuses them (RESOURCE_EXHAUSTED at their
// start, as sluice's stream interceptor answers) the client refuses a
// growing share locally.
func TestGRPCThrottlesStreams(t *testing.T) {
	var refusing atomic.Bool
	h := &healthServer{answer: func(int64) error {
		if refusing.Load() {
			return status.Error(codes.ResourceExhausted, "full")
		}
		return nil
	}}
	g := &clientlimit.GRPC{Throttle: throttle.New(throttle.Config{})}
	c := grpcClient(t, h, g)
	watch := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	for i := range 100 {
		if err := watch(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	refusing.Store(true)
	for range 400 {
		if err := watch(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("error %v, want RESOURCE_EXHAUSTED", err)
		}
	}
	reached := h.hits.Load() - 100
	// The refusal probability, (requests - 2 x accepted) / (requests + 1),
	// is 0 for the first 100 and about 0.6 by the 400th: about 280 reach
	// the service. Without the served streams counted as accepted, the
	// first 100 would have been refused locally already.
	if reached < 100 || reached > 350 || g.Stats().Throttled != uint64(400-reached) {
		t.Errorf("%d of 400 refused streams reached the service after 100 served (stats %+v), want the first 100 and a falling share after", reached, g.Stats())
	}
}
