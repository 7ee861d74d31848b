package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/grpclimit"
)

// health answers Check with what its hook says; the hook may block.
type health struct {
	grpc_health_v1.UnimplementedHealthServer
	check func(ctx context.Context) error
}

func (h *health) Check(ctx context.Context, _ *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	if h.check != nil {
		if err := h.check(ctx); err != nil {
			return nil, err
		}
	}
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

// echoDesc is a bidirectional stream service without generated code:
// each message received is sent back.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Echo", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			for {
				var m wrapperspb.StringValue
				if err := ss.RecvMsg(&m); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := ss.SendMsg(&m); err != nil {
					return err
				}
			}
		}}},
}

func newEngine(t *testing.T, yaml string) *engine.Engine {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(cfg, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// serve runs a real gRPC server on loopback with the interceptors and
// returns a client connection to it.
func serve(t *testing.T, e *engine.Engine, h *health, opts ...grpclimit.Options) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var o grpclimit.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(e, o)),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(e, o)))
	grpc_health_v1.RegisterHealthServer(s, h)
	s.RegisterService(&echoDesc, nil)
	go func() { _ = s.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); s.Stop() })
	return conn
}

func check(conn *grpc.ClientConn, user string, md *metadata.MD) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-user-id", user)
	var opts []grpc.CallOption
	if md != nil {
		opts = append(opts, grpc.Trailer(md))
	}
	_, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{}, opts...)
	return err
}

// A unary call over its quota gets RESOURCE_EXHAUSTED with RetryInfo,
// QuotaFailure naming the rule, and the RateLimit headers; the quota is per
// user from metadata, and the rule matches the method as a path.
func TestUnaryQuota(t *testing.T) {
	e := newEngine(t, `adaptive: {algorithm: off}
rules:
  - {rule_id: health_per_user, identifier_type: user_id, algorithm: fixed_window, limit: 2, window: 1m, match: {path_pattern: /grpc.health.v1.Health/*}}
`)
	conn := serve(t, e, &health{})
	for i := range 2 {
		if err := check(conn, "alice", nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	var trailer metadata.MD
	err := check(conn, "alice", &trailer)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED", err)
	}
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	if retry == nil || retry.RetryDelay.AsDuration() <= 0 || retry.RetryDelay.AsDuration() > time.Minute {
		t.Errorf("RetryInfo %v", retry)
	}
	if quota == nil || len(quota.Violations) != 1 || quota.Violations[0].Subject != "health_per_user" {
		t.Errorf("QuotaFailure %v", quota)
	}
	if got := trailer.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"health_per_user";q=2;w=60` {
		t.Errorf("trailer %v", trailer)
	}
	if err := check(conn, "bob", nil); err != nil {
		t.Errorf("another user: %v", err)
	}
}

// A call shed for overload gets UNAVAILABLE with the pushback trailer;
// handler errors feed the adaptive limit as drops or not at all.
func TestShedAndOutcomes(t *testing.T) {
	e := newEngine(t, `adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}
queue: {max_size: 0}
`)
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	var next error
	h := &health{check: func(ctx context.Context) error {
		if next != nil {
			return next
		}
		entered <- struct{}{}
		<-hold
		return nil
	}}
	conn := serve(t, e, h)
	done := make(chan error, 1)
	go func() { done <- check(conn, "a", nil) }()
	<-entered // the one slot is taken
	var trailer metadata.MD
	err := check(conn, "b", &trailer)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("second call while the slot is held: %v, want UNAVAILABLE", err)
	}
	if ms, perr := strconv.Atoi(first(trailer.Get(grpclimit.PushbackTrailer))); perr != nil || ms < 1 {
		t.Errorf("pushback trailer %v", trailer)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Outcomes: DEADLINE_EXCEEDED from the handler is a drop; NOT_FOUND is not.
	dropped := e.State().Adaptive.Dropped
	next = status.Error(codes.DeadlineExceeded, "slow dependency")
	if err := check(conn, "a", nil); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("%v", err)
	}
	if got := e.State().Adaptive.Dropped; got != dropped+1 {
		t.Errorf("dropped %d -> %d, want one more", dropped, got)
	}
	next = status.Error(codes.NotFound, "no such thing")
	if err := check(conn, "a", nil); status.Code(err) != codes.NotFound {
		t.Fatalf("%v", err)
	}
	if got := e.State().Adaptive.Dropped; got != dropped+1 {
		t.Errorf("NOT_FOUND counted as a drop")
	}
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func TestOutcomeOf(t *testing.T) {
	for err, want := range map[error]sluice.Outcome{
		nil:                                 sluice.Success,
		status.Error(codes.Unavailable, ""): sluice.Dropped,
		status.Error(codes.ResourceExhausted, ""): sluice.Dropped,
		status.Error(codes.InvalidArgument, ""):   sluice.Ignore,
		status.Error(codes.Canceled, ""):          sluice.Ignore,
		status.Error(codes.Internal, ""):          sluice.Success,
		errors.New("plain"):                       sluice.Success,
	} {
		if got := grpclimit.OutcomeOf(err); got != want {
			t.Errorf("%v: %v, want %v", err, got, want)
		}
	}
}

// Streams: opens are limited by the static rules (a concurrency rule
// holds for the stream's life), and MessagesPerSecond ends a stream that
// sends too fast with RESOURCE_EXHAUSTED.
func TestStreams(t *testing.T) {
	e := newEngine(t, `adaptive: {algorithm: off}
rules:
  - {rule_id: one_stream, identifier_type: user_id, algorithm: concurrency, limit: 1, match: {path_pattern: /test.Echo/*}}
`)
	conn := serve(t, e, &health{}, grpclimit.Options{MessagesPerSecond: 1, MessageBurst: 3})
	open := func(user string) (grpc.ClientStream, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user-id", user)
		s, err := conn.NewStream(ctx, &echoDesc.Streams[0], "/test.Echo/Echo")
		if err != nil {
			t.Fatal(err)
		}
		return s, cancel
	}
	roundTrip := func(s grpc.ClientStream, text string) error {
		// io.EOF from SendMsg: the server already ended the stream (a
		// refusal can come before the message is sent); RecvMsg says how.
		if err := s.SendMsg(wrapperspb.String(text)); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		var m wrapperspb.StringValue
		return s.RecvMsg(&m)
	}
	s1, cancel1 := open("alice")
	if err := roundTrip(s1, "hello"); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	s2, cancel2 := open("alice")
	defer cancel2()
	if err := roundTrip(s2, "again"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream of the same user: %v, want RESOURCE_EXHAUSTED", err)
	}
	// The burst of 3 messages passes (one was used), the next fails.
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		err = roundTrip(s1, "m"+strconv.Itoa(i))
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("fast messages: %v, want RESOURCE_EXHAUSTED", err)
	}
	cancel1()
	// The stream ended: its concurrency slot is free again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s3, cancel3 := open("alice")
		err := roundTrip(s3, "after")
		cancel3()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new stream after the first ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A call whose gRPC deadline is shorter than the service's median round
// trip is refused at once with DEADLINE_EXCEEDED (its own grpc-timeout,
// which gRPC keeps out of the metadata, read from its context): the
// handler never runs. One with room is served.
func TestUnaryDeadlineBelowTheMedian(t *testing.T) {
	e := newEngine(t, "adaptive: {algorithm: gradient2}\n")
	var ran atomic.Int64
	conn := serve(t, e, &health{check: func(ctx context.Context) error {
		ran.Add(1)
		time.Sleep(100 * time.Millisecond) // the service's work
		return nil
	}})
	c := grpc_health_v1.NewHealthClient(conn)
	call := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := c.Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		return err
	}
	// Until the adaptive limit has measured the service (a window of at
	// least 10 outcomes), in rounds of 10 at once.
	for deadline := time.Now().Add(30 * time.Second); e.State().Adaptive == nil || e.State().Adaptive.RTTMillis < 50; {
		if time.Now().After(deadline) {
			t.Fatal("the adaptive limit measured nothing in 30 s")
		}
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() { defer wg.Done(); _ = call(10 * time.Second) }()
		}
		wg.Wait()
	}
	before := ran.Load()
	// (On a loaded machine the client's own 30 ms may run out first: the
	// code is DEADLINE_EXCEEDED either way; what matters is that the
	// service did not work for it.)
	err := call(30 * time.Millisecond)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a 30 ms call against a 100 ms service: %v, want DEADLINE_EXCEEDED", err)
	}
	if ran.Load() != before {
		t.Errorf("the handler ran for a call refused for its deadline")
	}
	if err := call(5 * time.Second); err != nil {
		t.Errorf("a call with room: %v", err)
	}
}
