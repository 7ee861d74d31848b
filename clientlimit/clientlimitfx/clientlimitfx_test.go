package clientlimitfx_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/sluicehq/sluice/clientlimit"
	"github.com/sluicehq/sluice/clientlimit/clientlimitfx"
)

// TestClient: the named client throttles itself and reports to the
// application's registry.
func TestClient(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer svc.Close()
	reg := prometheus.NewPedanticRegistry()
	var c *http.Client
	app := fxtest.New(t,
		fx.Supply(fx.Annotate(reg, fx.As(new(prometheus.Registerer)))),
		clientlimitfx.Client("orders"),
		fx.Invoke(fx.Annotate(func(cl *http.Client) { c = cl }, fx.ParamTags(`name:"orders"`))),
	)
	app.RequireStart()
	defer app.RequireStop()
	if _, ok := c.Transport.(*clientlimit.Transport); !ok {
		t.Fatalf("transport %T, want a clientlimit.Transport", c.Transport)
	}
	for range 50 {
		if resp, err := c.Get(svc.URL); err == nil {
			resp.Body.Close()
		}
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_client_requests_total", "sluice_client_throttled_total"); err != nil || n != 2 {
		t.Fatalf("%d series, %v", n, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "sluice_client_throttled_total" && mf.GetMetric()[0].GetCounter().GetValue() == 0 {
			t.Error("a client of a service refusing everything refused nothing itself")
		}
	}
}
