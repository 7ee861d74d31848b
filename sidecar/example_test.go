package sidecar_test

import (
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/config"
)

// The README's in-process snippet: the engine as middleware, with its admin
// port. (Compiled, not run: it serves until stopped.)
func ExampleEngine_Middleware() {
	serve := func(log *slog.Logger, mux http.Handler) error {
		cfg, err := config.Load("sluice.yaml")
		if err != nil {
			return err
		}
		engine, err := sidecar.New(cfg, sidecar.Options{Logger: log}) // Options.Registerer: your Prometheus registry
		if err != nil {
			return err
		}
		engine.Start() // sweeps idle keys; waits for Redis
		defer engine.Close()
		admin := sidecar.NewAdminServer(engine, cfg.Admin, nil) // optional
		if err := admin.Start(); err != nil {
			return err
		}
		return http.ListenAndServe("127.0.0.1:8081", engine.Middleware(mux))
	}
	_ = serve
}
