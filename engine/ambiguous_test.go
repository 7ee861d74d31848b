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
