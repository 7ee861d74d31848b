// Package grpclimit limits a gRPC server with a sluice engine: unary and
// stream server interceptors that decide each call with the same rules,
// identity, priority classes, queue and adaptive limit as the HTTP proxy.
//
// The engine sees a call as a request: method POST, path the full method
// ("/pkg.Service/Method", so rules match services with path patterns such
// as "/pkg.Service/*"), headers the incoming metadata (user_header and
// api_key_header lowercased, as gRPC sends them) and the peer's address.
// A call over a quota gets RESOURCE_EXHAUSTED with google.rpc.RetryInfo and
// google.rpc.QuotaFailure naming the rules; a call shed for overload gets
// UNAVAILABLE with a grpc-retry-pushback-ms trailer (gRPC's retry policy
// waits that long); both carry the RateLimit headers as metadata. A unary
// call's outcome feeds the adaptive limit: DEADLINE_EXCEEDED, UNAVAILABLE
// and RESOURCE_EXHAUSTED from the handler are drops, a client's mistakes
// (INVALID_ARGUMENT, NOT_FOUND, ...) and cancellations say nothing, the
// rest are latency samples.
//
// A stream is limited when it opens, by the static rules only (a stream's
// lifetime is not a latency sample for the adaptive limit): rate rules
// count opens, concurrency rules hold for the stream's life. With
// MessagesPerSecond, each stream may also receive at most that many
// messages per second (a bucket of the given burst); past it RecvMsg
// fails with RESOURCE_EXHAUSTED and the stream ends.
package grpclimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// PushbackTrailer is the trailer gRPC clients read as the server's retry
// pushback (gRFC A6), in milliseconds.
const PushbackTrailer = "grpc-retry-pushback-ms"

// Options configure the interceptors; the zero value is the default.
type Options struct {
	// MessagesPerSecond limits the messages each stream receives: this
	// many per second on average, MessageBurst (at least 1) at once. 0
	// (the default) leaves messages unlimited.
	MessagesPerSecond float64
	MessageBurst      int
	// NoHeaders stops the interceptors sending the RateLimit headers as
	// response metadata on admitted calls (refusals always carry them).
	NoHeaders bool
}

// UnaryServerInterceptor decides each unary call with e.
func UnaryServerInterceptor(e *engine.Engine, o Options) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r := requestOf(ctx, info.FullMethod)
		v, err := e.Decide(ctx, &r)
		if err != nil {
			return nil, decideError(ctx, err)
		}
		if !v.Allowed {
			return nil, refuse(ctx, &v)
		}
		if !o.NoHeaders {
			_ = grpc.SetHeader(ctx, quotaMetadata(&v))
		}
		outcome := sluice.Ignore
		defer func() { v.Done(outcome) }()
		resp, herr := handler(ctx, req)
		if ctx.Err() == nil || herr == nil {
			outcome = OutcomeOf(herr)
		}
		return resp, herr
	}
}

// StreamServerInterceptor decides each stream as it opens (static rules)
// and, with MessagesPerSecond, paces what it receives.
func StreamServerInterceptor(e *engine.Engine, o Options) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		r := requestOf(ctx, info.FullMethod)
		v, err := e.DecideStatic(ctx, &r) // a delay is held, and given back if the client leaves
		if err != nil {
			return decideError(ctx, err)
		}
		if !v.Allowed {
			return refuse(ctx, &v)
		}
		outcome := sluice.Ignore
		defer func() { v.Done(outcome) }()
		if !o.NoHeaders {
			_ = ss.SetHeader(quotaMetadata(&v))
		}
		if o.MessagesPerSecond > 0 {
			ss = &pacedStream{ServerStream: ss, lim: rate.NewLimiter(rate.Limit(o.MessagesPerSecond), max(1, o.MessageBurst)), method: info.FullMethod}
		}
		herr := handler(srv, ss)
		if ctx.Err() == nil || herr == nil {
			outcome = OutcomeOf(herr)
		}
		return herr
	}
}

// pacedStream fails RecvMsg once the stream receives faster than its
// limiter allows.
type pacedStream struct {
	grpc.ServerStream
	lim    *rate.Limiter
	method string
}

func (s *pacedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if r := s.lim.Reserve(); !r.OK() || r.Delay() > 0 {
		delay := r.Delay()
		r.Cancel()
		st := status.New(codes.ResourceExhausted, "sluice: messages on this stream exceed the server's per-stream limit")
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)},
			&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: s.method,
				Description: "messages per second on one stream"}}}); err == nil {
			st = d
		}
		return st.Err()
	}
	return nil
}

// OutcomeOf classifies a handler's error for the adaptive limit: overload
// (DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED) is a drop; the
// client's own mistakes and cancellations say nothing about load; nil and
// the rest (the service answered) are latency samples.
func OutcomeOf(err error) sluice.Outcome {
	if err == nil {
		return sluice.Success
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted:
		return sluice.Dropped
	case codes.Canceled, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange:
		return sluice.Ignore
	}
	return sluice.Success
}

// requestOf is the engine's view of a call.
func requestOf(ctx context.Context, fullMethod string) engine.Request {
	r := engine.Request{Method: http.MethodPost, Path: fullMethod, Header: mdHeaders(nil)}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		r.Header = mdHeaders(md)
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	if dl, ok := ctx.Deadline(); ok {
		r.Deadline = dl // the client's grpc-timeout, which gRPC keeps out of the metadata
	}
	return r
}

// mdHeaders is incoming metadata as the engine's Headers: names are
// looked up lowercased, as gRPC carries them.
type mdHeaders metadata.MD

func (h mdHeaders) Get(name string) string {
	if vs := h.Values(name); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (h mdHeaders) Values(name string) []string {
	if h == nil {
		return nil
	}
	if vs, ok := h[name]; ok {
		return vs
	}
	return h[strings.ToLower(name)]
}

// decideError is the status of a call the engine could not decide: the
// client left while it waited, or its method is not a path.
func decideError(ctx context.Context, err error) error {
	if errors.Is(err, engine.ErrAmbiguous) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// refuse turns a refusal into its status, with the RateLimit headers as
// metadata: RESOURCE_EXHAUSTED with RetryInfo and QuotaFailure for a
// quota; UNAVAILABLE with the pushback trailer for shedding (and for a
// store that is down under a rule that fails closed).
func refuse(ctx context.Context, v *engine.Verdict) error {
	md := quotaMetadata(v)
	retry := v.Decision.RetryAfter
	if retry <= 0 || retry == sluice.Never {
		retry = time.Second
	}
	if v.Status == engine.StatusShed {
		md.Set(PushbackTrailer, strconv.FormatInt(max(1, retry.Milliseconds()), 10))
		_ = grpc.SetTrailer(ctx, md)
		msg := "sluice: the service is at capacity; the call was shed"
		if v.Class != "" {
			msg += " (class " + v.Class + ")"
		}
		switch v.Reason {
		case sluice.ReasonStoreDown:
			msg = "sluice: the rate limit store is unavailable and the rule fails closed"
		case sluice.ReasonDeadline:
			return status.Error(codes.DeadlineExceeded, "sluice: the call's deadline would pass before it could be served; it was not started")
		}
		return status.Error(codes.Unavailable, msg)
	}
	_ = grpc.SetTrailer(ctx, md)
	st := status.New(codes.ResourceExhausted, "sluice: rate limit exceeded: "+strings.Join(v.Violated, ", "))
	qf := &errdetails.QuotaFailure{}
	for _, id := range v.Violated {
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{Subject: id, Description: "rate limit rule " + id})
	}
	if v.Decision.RetryAfter == sluice.Never {
		if d, err := st.WithDetails(qf); err == nil {
			st = d
		}
		return st.Err()
	}
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}, qf); err == nil {
		st = d
	}
	return st.Err()
}

// quotaMetadata is the verdict's RateLimit headers as metadata (keys
// lowercased).
func quotaMetadata(v *engine.Verdict) metadata.MD {
	md := make(metadata.MD, 6)
	v.EachHeader(func(k, val string) { md[strings.ToLower(k)] = []string{val} })
	return md
}
