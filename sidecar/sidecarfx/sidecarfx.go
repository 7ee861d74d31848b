// Package sidecarfx wires sluice's in-process face into a go.uber.org/fx
// application. It holds no logic of its own: given a *config.Config (and,
// optionally, a *slog.Logger and a prometheus.Registerer), Module provides
// the engine.Engine, a Middleware to wrap handlers with, and the admin
// server, and ties the engine's background work and the admin port to the
// application's lifecycle.
//
//	fx.New(
//		fx.Supply(cfg),         // *config.Config, e.g. from config.Load
//		sidecarfx.Module,
//		fx.Invoke(func(mw sidecarfx.Middleware) { handler = mw(handler) }),
//	)
//
// Everything works without fx too: see engine.New and
// admin.NewServer, which this package calls.
package sidecarfx

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/admin"
)

// Module provides *engine.Engine, Middleware and *admin.Server.
var Module = fx.Module("sluice", fx.Provide(New))

// Middleware wraps an http.Handler with the engine's request path (see
// sidecar.Middleware).
type Middleware func(http.Handler) http.Handler

// Params are what Module needs.
type Params struct {
	fx.In

	Lifecycle fx.Lifecycle
	// Config is required: a validated configuration (config.Load or
	// config.Parse). Its listen and upstream fields are unused in process;
	// admin is where the admin server listens.
	Config *config.Config
	// Logger is optional; default: no logs.
	Logger *slog.Logger `optional:"true"`
	// Registerer is optional: where the metrics go, e.g. the registry the
	// application already serves (a *prometheus.Registry is also served on
	// the admin port); default a registry of the engine's own, served on the
	// admin port. One that already holds sluice's metric names is an error.
	Registerer prometheus.Registerer `optional:"true"`
}

// Result is what Module provides.
type Result struct {
	fx.Out

	Engine     *engine.Engine
	Middleware Middleware
	Admin      *admin.Server
}

// New builds the engine and the admin server and registers their lifecycle:
// OnStart starts the engine's background work and listens on the admin
// address (a taken port fails start-up); OnStop shuts the admin server down
// within the stop context and closes the engine.
func New(p Params) (Result, error) {
	e, err := engine.New(p.Config, engine.Options{Logger: p.Logger, Registerer: p.Registerer})
	if err != nil {
		return Result{}, err
	}
	adm := admin.NewServer(e, p.Config.Admin, admin.Options{AllowedHosts: p.Config.AdminHosts})
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			if err := adm.Start(); err != nil {
				return err
			}
			e.Start()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			err := adm.Shutdown(ctx)
			if cerr := e.Close(); err == nil {
				err = cerr
			}
			return err
		},
	})
	return Result{Engine: e, Middleware: func(h http.Handler) http.Handler { return sidecar.Middleware(e, h) }, Admin: adm}, nil
}
