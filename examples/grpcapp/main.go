// Command grpcapp is a gRPC service limited by sluice's interceptors: the
// standard health service, with a per-user quota on its methods (the user
// from the x-user-id metadata) and the adaptive concurrency limit, and the
// admin port beside it for metrics and state.
//
//	go run ./examples/grpcapp
//	grpcurl -plaintext -H 'x-user-id: alice' 127.0.0.1:50051 grpc.health.v1.Health/Check
//
// The fourth call of a user within a minute gets RESOURCE_EXHAUSTED with
// RetryInfo and QuotaFailure; calls shed for overload get UNAVAILABLE with
// a grpc-retry-pushback-ms trailer.
package main

import (
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/sidecar/admin"
)

// rules: three Health calls per user per minute; the adaptive limit
// (gradient2) protects the service as a whole.
const rules = `
admin: 127.0.0.1:9902
identity: {user_header: x-user-id}
rules:
  - rule_id: health_per_user
    identifier_type: user_id
    algorithm: sliding_window
    limit: 3
    window: 1m
    match: {path_pattern: /grpc.health.v1.Health/*}
`

func main() {
	listen := flag.String("listen", "127.0.0.1:50051", "gRPC address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*listen, log); err != nil {
		log.Error("grpcapp", "error", err.Error())
		os.Exit(1)
	}
}

func run(listen string, log *slog.Logger) error {
	cfg, err := config.Parse("grpcapp", []byte(rules))
	if err != nil {
		return err
	}
	engine, err := engine.New(cfg, engine.Options{Logger: log})
	if err != nil {
		return err
	}
	engine.Start()
	defer engine.Close()
	adminSrv := admin.NewServer(engine, cfg.Admin, admin.Options{})
	if err := adminSrv.Start(); err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(engine, grpclimit.Options{})),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(engine, grpclimit.Options{MessagesPerSecond: 100, MessageBurst: 100})),
	)
	grpc_health_v1.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Info("grpcapp serving", "grpc", ln.Addr().String(), "admin", adminSrv.Addr())
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		srv.GracefulStop()
	}()
	return srv.Serve(ln)
}
