package engine

import (
	"net/http"
	"testing"
)

// TestHostRulesKeyTheHostAsResolved: a rule on the Host header keys a host
// however it is spelled (case, a trailing dot), so that a client cannot
// reach one host under many keys; the request's Host wins over its header
// (net/http keeps it apart), and ports and IPv6 literals stay as they are.
func TestHostRulesKeyTheHostAsResolved(t *testing.T) {
	cases := []struct{ host, header, want string }{
		{"a.example", "", "a.example"},
		{"A.Example", "", "a.example"},
		{"a.example.", "", "a.example"},
		{"A.EXAMPLE.:8080", "", "a.example:8080"},
		{"", "B.example", "b.example"},
		{"a.example", "other", "a.example"},
		{"[2001:DB8::1]:443", "", "[2001:db8::1]:443"},
		{"[::1]", "", "[::1]"},
		{"", "", ""},
	}
	for _, c := range cases {
		r := &Request{Host: c.host}
		if c.header != "" {
			r.Header = http.Header{"Host": {c.header}}
		}
		if got := r.header("Host"); got != c.want {
			t.Errorf("Host %q, header %q: keyed %q, want %q", c.host, c.header, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = canonicalHost("api.example:8080") }); n != 0 {
		t.Errorf("a host already canonical allocates %v times", n)
	}
}

// TestRequiredHostMatchesAnySpelling: a rule that requires a Host matches
// it however the configuration and the request spell it.
func TestRequiredHostMatchesAnySpelling(t *testing.T) {
	e, _ := fakeClockEngine(t, `
rules:
  - {rule_id: h, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {required_headers: {host: API.Example}}}
`)
	for i, host := range []string{"api.example", "API.EXAMPLE."} {
		v, err := e.Decide(t.Context(), &Request{Method: "GET", Path: "/", Host: host, RemoteAddr: "192.0.2.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed != (i == 0) {
			t.Errorf("request %d (Host %q): allowed %v; the rule should have matched both", i, host, v.Allowed)
		}
		if v.Allowed {
			v.Done(0)
		}
	}
}
