package sidecar_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// Every spelling that common routers send to a rule's handler counts
// against the rule, for each pattern kind.
func TestPathRuleVariants(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: exact, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /auth/login, methods: [POST]}}
  - {rule_id: star, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /orders/*/items}}
  - {rule_id: tail, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /admin/**}}
  - {rule_id: strict, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /Case/x, case_sensitive: true}}
`, nil)
	for _, c := range []struct {
		rule, method string
		paths        []string
	}{
		{"exact", "POST", []string{"/auth/login", "/auth/login/", "/AUTH/LOGIN", "/auth/login;x", "/auth/login;jsessionid=1/", "/x/../auth/login"}},
		{"exact", "post", []string{"/auth/login"}},
		{"star", "GET", []string{"/orders/1/items", "/orders/1/items/", "/ORDERS/1/Items", "/orders/1;p/items", "/orders//1/items"}},
		{"tail", "GET", []string{"/admin", "/admin/", "/Admin/x", "/admin;x/y", "/ADMIN;a=b/c/d", "/public/../admin/z"}},
	} {
		for _, p := range c.paths {
			v, err := e.Decide(context.Background(), &engine.Request{Method: c.method, Path: p, RemoteAddr: "192.0.2.1:1"})
			if err != nil {
				t.Fatal(err)
			}
			v.Done(sluice.Success)
			if v.Decision.RuleID != c.rule {
				t.Errorf("%s %q: decided by %q, want rule %q to count it", c.method, p, v.Decision.RuleID, c.rule)
			}
		}
	}
	// A case-sensitive rule counts only its own spelling.
	v, _ := e.Decide(context.Background(), &engine.Request{Method: "GET", Path: "/case/x", RemoteAddr: "192.0.2.1:1"})
	if v.Decision.RuleID == "strict" {
		t.Error("a case_sensitive rule matched another case")
	}
	// Ambiguous paths are refused, not guessed.
	if _, err := e.Decide(context.Background(), &engine.Request{Method: "GET", Path: "/public/..;/admin", RemoteAddr: "192.0.2.1:1"}); err == nil {
		t.Error("an ambiguous path was decided")
	}
}

// Ten addresses of one IPv6 /64 share one quota by default; with the JWT
// source, a client's own X-User-ID does not beat the token's sub.
func TestIdentitySources(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: ip, identifier_type: ip_address, algorithm: fixed_window, limit: 3, window: 1h, match: {path_pattern: /ip}}
`, nil)
	admitted := 0
	for i := range 10 {
		v, _ := e.Decide(context.Background(), &engine.Request{Method: "GET", Path: "/ip", RemoteAddr: fmt.Sprintf("[2001:db8:0:1::%x]:1", i+1)})
		if v.Allowed {
			admitted++
			v.Done(sluice.Success)
		}
	}
	if admitted != 3 {
		t.Errorf("ten addresses of one /64 admitted %d times against 3", admitted)
	}

	e = newEngine(t, `
identity: {user_from: jwt}
adaptive: {algorithm: off}
rules:
  - {rule_id: user, identifier_type: user_id, algorithm: fixed_window, limit: 3, window: 1h}
`, nil)
	tok := "Bearer e30." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"victim"}`)) + ".sig"
	admitted = 0
	for i := range 5 {
		h := http.Header{"Authorization": {tok}, "X-User-Id": {fmt.Sprintf("me-%d", i)}}
		v, _ := e.Decide(context.Background(), &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: h})
		if v.Allowed {
			admitted++
			v.Done(sluice.Success)
		}
	}
	if admitted != 3 {
		t.Errorf("JWT sub with changing X-User-ID: %d admitted against 3", admitted)
	}
}
