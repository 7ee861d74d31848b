// Package rls serves Envoy's rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over a
// sluice engine: the request's descriptors are looked up in the engine's
// descriptor rules (config.Rule.Descriptor) and checked in one store call,
// all-or-nothing, with any sluice algorithm, mode and store behind them.
// Envoy's ratelimit filter (HTTP or network) and Istio point their
// rate_limit_service at it.
package rls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/engine"
)

// Service is the RateLimitService over an engine.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	engine *engine.Engine
}

// New returns the service for e.
func New(e *engine.Engine) *Service { return &Service{engine: e} }

// Register registers the service on g.
func (s *Service) Register(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// ShouldRateLimit implements RateLimitServiceServer. A descriptor's
// hits_addend (else the request's, else 1) is what it consumes;
// is_negative_hits gives that much back instead; a descriptor's limit
// override is its limit, in place of the rules'. The answer is OVER_LIMIT
// when any enforced rule denied (nothing is then taken: all-or-nothing),
// with a status per descriptor and the RateLimit headers of the tightest
// rule in response_headers_to_add.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	hits := uint64(max(1, req.GetHitsAddend()))
	dr := engine.DescriptorRequest{Domain: req.GetDomain(), Descriptors: make([]engine.Descriptor, len(req.GetDescriptors()))}
	for i, d := range req.GetDescriptors() {
		sd := &dr.Descriptors[i]
		sd.Hits, sd.Refund = hits, d.GetIsNegativeHits()
		if h := d.GetHitsAddend(); h != nil {
			sd.Hits = h.GetValue()
		}
		if o := d.GetLimit(); o != nil {
			// The route's own limit for this descriptor, as the peer
			// honours it: in place of the rules, a fixed window.
			window := time.Duration(0)
			for _, u := range units {
				if int32(u.unit) == int32(o.GetUnit()) { // the peer casts one enum to the other
					window = u.d
				}
			}
			if window == 0 {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override unit %v", i, o.GetUnit())
			}
			sd.Override = &engine.LimitOverride{Limit: int64(o.GetRequestsPerUnit()), Window: window}
		}
		sd.Entries = make([]engine.DescriptorEntry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			sd.Entries[j] = engine.DescriptorEntry{Key: e.GetKey(), Value: e.GetValue()}
		}
	}
	v, statuses, err := s.engine.CheckDescriptors(ctx, dr)
	switch {
	case errors.Is(err, engine.ErrBadDescriptors):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return nil, status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return nil, status.Error(codes.DeadlineExceeded, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(statuses))}
	if !v.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	compat := true // every matched rule answers as the peer: no headers
	quota, quotaOver, otherOver := 0, 0, false
	for i, st := range statuses {
		resp.Statuses[i] = descriptorStatus(st)
		compat = compat && (!st.Matched || st.EnvoyCompatible)
		switch {
		case st.QuotaMode:
			quota++
			if !st.Allowed {
				quotaOver++
			}
		case !st.Allowed:
			otherOver = true
		}
	}
	if quota > 0 {
		// The peer's quota mode: OVER_LIMIT when an ordinary descriptor is
		// over, or every quota-mode one is.
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		if otherOver || quotaOver == quota {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if !compat {
		v.EachHeader(func(k, val string) {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: val})
		})
	}
	if s.engine.Config().RLS.ResponseDynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, statuses)
	}
	return resp, nil
}

// dynamicMetadata is the answer's dynamic metadata as envoyproxy/ratelimit
// gives it: the domain, each descriptor's entries ("key=value"), its own
// hits_addend and limit override, the request's hits_addend, and the
// metadata of the descriptors that passed, merged (a key already there
// stays, two structs merge).
func dynamicMetadata(req *rlsv3.RateLimitRequest, statuses []engine.DescriptorStatus) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	var descs []*structpb.Value
	for _, d := range req.GetDescriptors() {
		df := map[string]*structpb.Value{}
		var entries []*structpb.Value
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
		if l := d.GetLimit(); l != nil {
			df["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, st := range statuses {
		if !st.Allowed || st.Metadata == nil {
			continue
		}
		m, err := structpb.NewStruct(st.Metadata)
		if err != nil {
			continue // a value JSON cannot carry (a YAML timestamp): left out
		}
		mergeStruct(passed, m)
	}
	if len(passed.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a field dst has stays, unless both
// are structs, which merge.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if a, b := have.GetStructValue(), v.GetStructValue(); a != nil && b != nil {
			mergeStruct(a, b)
		}
	}
}

func descriptorStatus(st engine.DescriptorStatus) *rlsv3.RateLimitResponse_DescriptorStatus {
	out := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if !st.Allowed {
		out.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if st.Unlimited {
		out.LimitRemaining = math.MaxUint32
		return out
	}
	if !st.Matched {
		return out
	}
	out.CurrentLimit = currentLimit(st.RuleID, st.Limit, st.Window)
	out.LimitRemaining = uint32(min(max(st.Remaining, 0), math.MaxUint32))
	out.DurationUntilReset = durationpb.New(st.ResetAfter)
	if st.EnvoyCompatible {
		// As the peer answers: the name only when the rate_limit has one,
		// and the time to the window's end in whole seconds.
		out.CurrentLimit.Name = st.Name
		out.DurationUntilReset = durationpb.New(st.ResetAfter.Truncate(time.Second) + ceilSecond(st.ResetAfter))
	}
	return out
}

// ceilSecond is a second when d has a fraction of one, else nothing: with
// Truncate, d rounded up to whole seconds.
func ceilSecond(d time.Duration) time.Duration {
	if d%time.Second != 0 {
		return time.Second
	}
	return 0
}

// units are Envoy's units, largest first.
var units = []struct {
	d    time.Duration
	unit rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// currentLimit expresses a rule's limit per window in Envoy's terms: the
// largest unit the window is a whole number of, with a multiplier when
// more than one (10 per 30s: 10 per 30 seconds); a window under a second
// is reported per second, scaled.
func currentLimit(name string, limit int64, window time.Duration) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: uint32(min(max(limit, 0), math.MaxUint32))}
	if window <= 0 {
		return rl // concurrency: no window
	}
	for _, u := range units {
		if window >= u.d && window%u.d == 0 {
			rl.Unit = u.unit
			if n := window / u.d; n > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(n, math.MaxUint32)))
			}
			return rl
		}
	}
	// Not a whole number of seconds: the rate per second, rounded down.
	rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	rl.RequestsPerUnit = uint32(min(float64(limit)*float64(time.Second)/float64(window), math.MaxUint32))
	return rl
}

// Server is the service on its own gRPC listener.
type Server struct {
	grpc     *grpc.Server
	ln       net.Listener
	done     chan error
	health   *health.Server
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// HealthEvery is how often the gRPC health service's status is refreshed
// from the engine.
const HealthEvery = 500 * time.Millisecond

// Listen binds addr and serves the service for e in the background, with
// the standard gRPC health service (grpc.health.v1.Health) beside it, as
// envoyproxy/ratelimit offers: SERVING, for the server ("") and for
// envoy.service.ratelimit.v3.RateLimitService, only while the engine is
// ready and its store decides checks itself (with Redis: answered, circuit
// closed); NOT_SERVING otherwise, so that Envoy's and Kubernetes' gRPC
// health checks take the instance out while it cannot count.
func Listen(addr string, e *engine.Engine, opts ...grpc.ServerOption) (*Server, error) {
	network := "tcp"
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		// A unix socket (as the peer offers): a stale socket file of an
		// earlier run is removed, anything else at the path is an error.
		network, addr = "unix", path
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	g := grpc.NewServer(opts...)
	New(e).Register(g)
	s := &Server{grpc: g, ln: ln, done: make(chan error, 1), health: health.NewServer(), stop: make(chan struct{})}
	healthpb.RegisterHealthServer(g, s.health)
	s.refreshHealth(e)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(HealthEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.refreshHealth(e)
			}
		}
	}()
	go func() { s.done <- g.Serve(ln) }()
	return s, nil
}

// refreshHealth sets the health service's status from e.
func (s *Server) refreshHealth(e *engine.Engine) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if e.Ready() && e.State().Store.Healthy {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
}

// Addr is the bound address (a unix socket's path with "unix:" before it).
func (s *Server) Addr() string {
	if a := s.ln.Addr(); a.Network() == "unix" {
		return "unix:" + a.String()
	}
	return s.ln.Addr().String()
}

// TLSCredentials returns gRPC server credentials for a certificate and
// key; with a client CA file, mutual TLS: a client must present a
// certificate that CA signed.
func TLSCredentials(certFile, keyFile, clientCAFile string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", clientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// Shutdown stops accepting calls and waits for those in flight until ctx
// ends, then cuts them.
func (s *Server) Shutdown(ctx context.Context) {
	s.stopOnce.Do(func() { close(s.stop) })
	s.wg.Wait()
	s.health.Shutdown() // watchers see NOT_SERVING while the calls drain
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
	}
}
