// Package sidecartest holds what the sidecar's packages' tests share: an
// engine from YAML, a request through a handler, an upstream that answers
// 200.
package sidecartest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
)

// TwoPerMinute is a configuration of one rule: two requests a minute per
// client address, the adaptive limit off.
const TwoPerMinute = `
adaptive: {algorithm: off}
rules:
  - {rule_id: per_ip, identifier_type: ip_address, algorithm: fixed_window, limit: 2, window: 1m}
`

// Engine returns an engine for yaml on clock (nil: the system's), failing
// t on an error.
func Engine(t testing.TB, yaml string, clock sluice.Clock) *engine.Engine {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(cfg, engine.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// OK answers 200 with no body.
var OK = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })

// Do sends method path through h from 192.0.2.1, with hdr as name, value
// pairs, and returns the recorded response.
func Do(h http.Handler, method, path string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
