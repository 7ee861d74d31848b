// Command fxapp embeds sluice in a go.uber.org/fx application through
// sidecarfx.Module: the application supplies the configuration (and may
// supply its logger and Prometheus registry); the module provides the
// middleware and runs the admin port with the application's lifecycle.
//
//	go run ./examples/fxapp -config examples/basic.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/fx"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sidecar/sidecarfx"
)

func main() {
	path := flag.String("config", "examples/basic.yaml", "rules file")
	listen := flag.String("listen", "127.0.0.1:8082", "address of the service")
	flag.Parse()
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fx.New(
		fx.Supply(cfg, slog.New(slog.NewTextHandler(os.Stderr, nil))),
		sidecarfx.Module,
		fx.Invoke(func(lc fx.Lifecycle, mw sidecarfx.Middleware, log *slog.Logger) {
			hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
			srv := &http.Server{Addr: *listen, Handler: mw(hello), ReadHeaderTimeout: 5 * time.Second}
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error {
					l, err := net.Listen("tcp", srv.Addr) // a taken port fails start-up
					if err != nil {
						return err
					}
					log.Info("serving", "listen", l.Addr().String())
					go func() { _ = srv.Serve(l) }()
					return nil
				},
				OnStop: srv.Shutdown,
			})
		}),
	).Run()
}
