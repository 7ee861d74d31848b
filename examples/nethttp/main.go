// Command nethttp embeds sluice in a plain net/http service: the same rules
// file and engine as the sidecar, as an http.Handler middleware, with the
// admin port beside it.
//
//	go run ./examples/nethttp -config examples/basic.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/admin"
)

func main() {
	path := flag.String("config", "examples/basic.yaml", "rules file")
	listen := flag.String("listen", "127.0.0.1:8081", "address of the service")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*path, *listen, log); err != nil {
		log.Error("nethttp", "error", err.Error())
		os.Exit(1)
	}
}

func run(path, listen string, log *slog.Logger) error {
	cfg, err := config.Load(path)
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
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "order %s\n", r.PathValue("id"))
	})
	srv := &http.Server{Addr: listen, Handler: sidecar.Middleware(engine, mux), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		_ = adminSrv.Shutdown(shutdown)
	}()
	log.Info("serving", "listen", listen, "admin", adminSrv.Addr())
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}
