// Package clientlimitfx wires package clientlimit into a go.uber.org/fx
// application: Client provides a named *http.Client that throttles itself
// while its service refuses and retries within a budget, with its metrics
// on the application's prometheus.Registerer when there is one.
//
//	fx.New(
//		clientlimitfx.Client("orders"),
//		fx.Invoke(fx.Annotate(func(c *http.Client) { /* call the orders service */ }, fx.ParamTags(`name:"orders"`))),
//	)
package clientlimitfx

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/sluicehq/sluice/clientlimit"
	"github.com/sluicehq/sluice/throttle"
)

// Client provides an *http.Client named name (fx's `name:"..."` tag) over
// http.DefaultTransport with the SRE book's adaptive throttling (K 2 over
// 2 minutes) and a retry budget (10% + 10/s over 10 s), and registers its
// clientlimit.Collector labelled client=name on the prometheus.Registerer
// of the application, if it provides one.
func Client(name string) fx.Option {
	return fx.Provide(fx.Annotate(func(p params) (*http.Client, error) {
		th := throttle.New(throttle.Config{})
		tr := &clientlimit.Transport{Throttle: th, Budget: throttle.NewRetryBudget(throttle.BudgetConfig{})}
		if p.Registerer != nil {
			if err := p.Registerer.Register(clientlimit.Collector(name, tr, th)); err != nil {
				return nil, err
			}
		}
		return &http.Client{Transport: tr}, nil
	}, fx.ResultTags(`name:"`+name+`"`)))
}

type params struct {
	fx.In
	Registerer prometheus.Registerer `optional:"true"`
}
