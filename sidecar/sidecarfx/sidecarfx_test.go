package sidecarfx_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar/admin"
	"github.com/sluicehq/sluice/sidecar/sidecarfx"
)

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("fx.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const onePerHour = `
admin: 127.0.0.1:0
rules:
  - {rule_id: one, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h}
`

func TestModule(t *testing.T) {
	reg := prometheus.NewRegistry()
	var (
		mw  sidecarfx.Middleware
		adm *admin.Server
	)
	app := fxtest.New(t,
		fx.Supply(parse(t, onePerHour), fx.Annotate(reg, fx.As(new(prometheus.Registerer)))),
		sidecarfx.Module,
		fx.Populate(&mw, &adm),
	)
	app.RequireStart()

	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") }))
	codes := []int{}
	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Errorf("through the middleware: %v, want [200 429]", codes)
	}
	// The metrics went on the application's registry.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "sluice_requests_total"
	}
	if !found {
		t.Error("sluice_requests_total not on the supplied registry")
	}
	// The admin port answers while the app runs...
	resp, err := http.Get("http://" + adm.Addr() + "/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"rule_id": "one"`) {
		t.Errorf("state: %d %s", resp.StatusCode, body)
	}
	// ...and is closed once it stops.
	addr := adm.Addr()
	app.RequireStop()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("admin port still open after stop")
	}
}

// A taken admin port fails start-up, as fx's OnStart contract asks.
func TestModuleAdminPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := parse(t, "admin: "+l.Addr().String()+"\n")
	app := fxtest.New(t, fx.Supply(cfg), sidecarfx.Module, fx.Invoke(func(*engine.Engine) {}))
	if err := app.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "admin") {
		t.Errorf("start with the admin port taken: %v", err)
	}
}

// A bad configuration fails the app's construction with the config error.
func TestModuleBadStore(t *testing.T) {
	cfg := parse(t, "store: {type: redis, redis: {addrs: ['127.0.0.1:1']}}\nadmin: 127.0.0.1:0\n")
	cfg.Store.Redis.Addrs = nil // as a program might after Parse
	app := fx.New(fx.Supply(cfg), sidecarfx.Module, fx.Invoke(func(*engine.Engine) {}), fx.NopLogger)
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "addrs") {
		t.Errorf("construction with no Redis address: %v", err)
	}
}
