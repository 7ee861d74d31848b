package grpclimit_test

import (
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/grpclimit"
)

// A gRPC server whose calls the engine decides: unary calls by every rule
// and the adaptive limit, streams by the static rules when they open and
// at most 50 messages per second each.
func Example() {
	cfg, err := config.Load("sluice.yaml")
	if err != nil {
		return
	}
	eng, err := engine.New(cfg, engine.Options{})
	if err != nil {
		return
	}
	eng.Start()
	defer eng.Close()
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(eng, grpclimit.Options{})),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(eng, grpclimit.Options{MessagesPerSecond: 50, MessageBurst: 50})),
	)
	_ = srv // register services, then srv.Serve(listener)
}
