package sidecar_test

import (
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/admin"
)

// The README's in-process snippet: the engine as middleware, with its admin
// port. (Compiled, not run: it serves until stopped.)
func ExampleMiddleware() {
	serve := func(log *slog.Logger, mux http.Handler) error {
		cfg, err := config.Load("sluice.yaml")
		if err != nil {
			return err
		}
		eng, err := engine.New(cfg, engine.Options{Logger: log}) // Options.Registerer: your Prometheus registry
		if err != nil {
			return err
		}
		eng.Start() // sweeps idle keys; waits for Redis
		defer eng.Close()
		adm := admin.NewServer(eng, cfg.Admin, admin.Options{}) // optional; Options.Reload, AllowedHosts
		if err := adm.Start(); err != nil {
			return err
		}
		return http.ListenAndServe("127.0.0.1:8081", sidecar.Middleware(eng, mux))
	}
	_ = serve
}
