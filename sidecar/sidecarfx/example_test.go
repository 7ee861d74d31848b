package sidecarfx_test

import (
	"go.uber.org/fx"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sidecar/sidecarfx"
)

// The README's fx snippet. (Compiled, not run: Run blocks until a signal.)
func Example() {
	run := func(cfg *config.Config) {
		fx.New(
			fx.Supply(cfg),
			sidecarfx.Module, // provides *engine.Engine, sidecarfx.Middleware, *admin.Server; starts and stops them with the app
			fx.Invoke(func(mw sidecarfx.Middleware) { /* wrap your handler: mw(h) */ }),
		).Run()
	}
	_ = run
}
