package clientlimit

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/throttle"
)

// GRPC is Transport's behaviour for gRPC clients: UnaryClientInterceptor
// refuses calls locally while the service refuses them (RESOURCE_EXHAUSTED
// or UNAVAILABLE; the local refusal is RESOURCE_EXHAUSTED wrapping
// ErrThrottled's message) and retries within a budget. The zero value
// passes calls through. Set the fields before the first call and do not
// change them after.
type GRPC struct {
	// Throttle and Budget are as Transport's.
	Throttle *throttle.Throttle
	Budget   *throttle.RetryBudget
	// MaxRetries, Backoff and MaxRetryAfter are as Transport's (a
	// RetryInfo's retry_delay plays Retry-After's part).
	MaxRetries    int
	Backoff       time.Duration
	MaxRetryAfter time.Duration
	// Idempotent tells the methods whose UNAVAILABLE may be retried (the
	// call may have reached the service before failing); nil: none.
	// RESOURCE_EXHAUSTED (refused before any work) is retried for every
	// method.
	Idempotent func(fullMethod string) bool

	counts
}

// UnaryClientInterceptor returns the interceptor; install it with
// grpc.WithUnaryInterceptor (or chain it).
func (g *GRPC) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		policy := retryPolicy(g.MaxRetries, g.Backoff, g.MaxRetryAfter)
		g.requests.Add(1)
		if g.Budget != nil {
			g.Budget.Deposit()
		}
		for n := 0; ; n++ {
			if g.Throttle != nil && !g.Throttle.Allow() {
				g.throttled.Add(1)
				return status.Error(codes.ResourceExhausted, method+": "+ErrThrottled.Error())
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			code := status.Code(err)
			g.observe(err)
			retry := code == codes.ResourceExhausted || (code == codes.Unavailable && g.Idempotent != nil && g.Idempotent(method))
			if !retry || ctx.Err() != nil || n >= policy.max || g.Budget == nil {
				return err
			}
			after, asked := retryDelay(err)
			wait, ok := policy.wait(ctx, n, after, asked)
			if !ok {
				return err
			}
			if !g.Budget.TryWithdraw() {
				g.exhausted.Add(1)
				return err
			}
			if !sleep(ctx, wait) {
				return status.FromContextError(ctx.Err()).Err()
			}
			g.retries.Add(1)
		}
	}
}

// observe tells the throttle of an answer: accepted unless refused for
// overload (RESOURCE_EXHAUSTED, UNAVAILABLE); a call the client ended
// (deadline, cancel) says nothing.
func (g *GRPC) observe(err error) {
	if g.Throttle == nil {
		return
	}
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return
	}
	g.Throttle.Accepted() // answered, and not refused for overload
}

// StreamClientInterceptor returns the interceptor for streams; install it
// with grpc.WithStreamInterceptor. A stream is refused locally
// (RESOURCE_EXHAUSTED wrapping ErrThrottled's message) while the service
// refuses, as a unary call is, and its first answer (the first message
// received, or its end) tells the throttle whether the service accepted
// it. Streams are not retried: their messages cannot be sent again safely.
func (g *GRPC) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		g.requests.Add(1)
		if g.Throttle != nil && !g.Throttle.Allow() {
			g.throttled.Add(1)
			return nil, status.Error(codes.ResourceExhausted, method+": "+ErrThrottled.Error())
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			g.observe(err)
			return nil, err
		}
		if g.Throttle == nil {
			return cs, nil
		}
		return &observedStream{ClientStream: cs, g: g}, nil
	}
}

// observedStream tells its GRPC of the stream's first answer.
type observedStream struct {
	grpc.ClientStream
	g    *GRPC
	once sync.Once
}

// RecvMsg implements grpc.ClientStream.
func (s *observedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() {
		if errors.Is(err, io.EOF) {
			err = nil // the stream ended well
		}
		s.g.observe(err)
	})
	return err
}

// retryDelay reads a status's RetryInfo.
func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
