package engine

import (
	"errors"
	"net/http"
	"testing"
)

// TestAHeaderTheRulesReadSentTwiceIsAmbiguous: a request that sends a
// header the configuration reads (the API key, the user, a header
// identifier, a required header) more than once is refused as ambiguous
// (the rules would key the first; a service may read the last or both,
// so "X-Api-Key: junk-N" before the real key got a fresh quota each time);
// a header no rule reads may repeat, and one line of each is decided.
func TestAHeaderTheRulesReadSentTwiceIsAmbiguous(t *testing.T) {
	e, _ := fakeClockEngine(t, `
rules:
  - {rule_id: key, identifier_type: api_key, algorithm: fixed_window, limit: 100, window: 1h}
  - {rule_id: user, identifier_type: user_id, algorithm: fixed_window, limit: 100, window: 1h}
  - {rule_id: tenant, identifier_type: "header:X-Tenant", algorithm: fixed_window, limit: 100, window: 1h}
  - {rule_id: prod, identifier_type: global, algorithm: fixed_window, limit: 100, window: 1h, match: {required_headers: {X-Env: prod}}}
`)
	cases := []struct {
		name      string
		header    http.Header
		ambiguous bool
	}{
		{"one of each", http.Header{"X-Api-Key": {"k"}, "X-User-Id": {"u"}, "X-Tenant": {"t"}, "X-Env": {"prod"}}, false},
		{"a header no rule reads, twice", http.Header{"X-Api-Key": {"k"}, "Accept": {"a", "b"}}, false},
		{"api key twice", http.Header{"X-Api-Key": {"junk", "k"}}, true},
		{"user twice", http.Header{"X-User-Id": {"u", "v"}}, true},
		{"header identifier twice", http.Header{"X-Tenant": {"t", "t"}}, true},
		{"required header twice", http.Header{"X-Env": {"dev", "prod"}}, true},
	}
	for _, c := range cases {
		v, err := e.Decide(t.Context(), &Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: c.header})
		if got := errors.Is(err, ErrAmbiguous); got != c.ambiguous {
			t.Errorf("%s: err %v, want ambiguous %v", c.name, err, c.ambiguous)
		}
		if err == nil && v.Allowed {
			v.Done(0)
		}
	}
	if !errors.Is(ErrAmbiguousPath, ErrAmbiguous) {
		t.Error("ErrAmbiguousPath is not an ErrAmbiguous")
	}
}

// TestAMethodOverrideSentTwiceIsAmbiguous: a POST whose method-override
// header the rules would read (a rule limits DELETE) is refused as
// ambiguous when it sends the header twice. Read with Get, the first line
// ("GET") decided and the rule on DELETE was stepped around, while a
// service that reads the last line (or both) deleted. One override, or a
// POST whose own method a rule matches, is decided as before.
func TestAMethodOverrideSentTwiceIsAmbiguous(t *testing.T) {
	e, _ := fakeClockEngine(t, `
rules:
  - {rule_id: deletes, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {methods: [DELETE]}}
  - {rule_id: posts, identifier_type: global, algorithm: fixed_window, limit: 100, window: 1h, match: {methods: [POST], path_pattern: /form}}
`)
	cases := []struct {
		name, path string
		header     http.Header
		ambiguous  bool
	}{
		{"one override", "/", http.Header{"X-Http-Method-Override": {"PATCH"}}, false},
		{"override twice", "/", http.Header{"X-Http-Method-Override": {"GET", "DELETE"}}, true},
		{"another override twice", "/", http.Header{"X-Method-Override": {"GET", "DELETE"}}, true},
		{"override twice on a POST a rule matches as POST", "/form", http.Header{"X-Http-Method-Override": {"GET", "DELETE"}}, true},
	}
	for _, c := range cases {
		v, err := e.Decide(t.Context(), &Request{Method: "POST", Path: c.path, RemoteAddr: "192.0.2.1:1", Header: c.header})
		if got := errors.Is(err, ErrAmbiguous); got != c.ambiguous {
			t.Errorf("%s: err %v, want ambiguous %v", c.name, err, c.ambiguous)
		}
		if err == nil && v.Allowed {
			v.Done(0)
		}
	}
}
