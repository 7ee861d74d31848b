package engine

import (
	"context"
	"net/textproto"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// strictHeaders answers only names in canonical form, as a face that
// indexes a map of canonical names directly does (sidecar's middleware),
// and records every other name it was asked for.
type strictHeaders struct {
	values  map[string][]string
	offCase map[string]bool
}

func (h *strictHeaders) check(name string) {
	if textproto.CanonicalMIMEHeaderKey(name) != name {
		h.offCase[name] = true
	}
}

func (h *strictHeaders) Get(name string) string {
	h.check(name)
	if v := h.values[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h *strictHeaders) Values(name string) []string {
	h.check(name)
	return h.values[name]
}

// TestEngineAsksCanonicalHeaderNames: every header the engine reads
// (identity, header: identifiers, required headers, method overrides,
// deadlines, classes, the fair queue's tenant, forwarded-for) is asked
// for by its canonical name, whatever case the configuration wrote it
// in, as Headers promises: a face over net/http's canonical map finds
// it. (The method overrides were asked as "X-HTTP-Method-Override".)
func TestEngineAsksCanonicalHeaderNames(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte(`
adaptive:
  algorithm: gradient2
  classes:
    - {name: high, share: 0.5, match: {required_headers: {x-CLASS: high}}}
    - {name: low, share: 0.5}
queue: {fairness: header:x-tenant}
identity: {trusted_proxies: [127.0.0.0/8], user_header: x-user-id, api_key_header: x-api-KEY}
deadlines: {from: [grpc-timeout, x-request-TIMEOUT-ms]}
rules:
  - {rule_id: u, identifier_type: user_id, algorithm: token_bucket, limit: 100, window: 1s}
  - {rule_id: k, identifier_type: api_key, algorithm: token_bucket, limit: 100, window: 1s}
  - {rule_id: h, identifier_type: "header:x-client-type", algorithm: token_bucket, limit: 100, window: 1s, match: {required_headers: {x-env: prod}}}
  - {rule_id: m, identifier_type: ip_address, algorithm: token_bucket, limit: 100, window: 1s, match: {methods: [DELETE]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	e, err := New(cfg, Options{Observe: func(o Observations) {
		for i := range o.Len() {
			keys[o.Rule(i)] = o.Key(i)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h := &strictHeaders{offCase: map[string]bool{}, values: map[string][]string{
		"X-User-Id": {"u1"}, "X-Api-Key": {"k1"}, "X-Client-Type": {"mobile"}, "X-Env": {"prod"},
		"X-Class": {"high"}, "X-Tenant": {"t1"}, "X-Request-Timeout-Ms": {"5000"},
		"X-Forwarded-For": {"198.51.100.7"}, "X-Http-Method-Override": {"DELETE"},
	}}
	v, err := e.Decide(context.Background(), &Request{Method: "POST", Path: "/x", RemoteAddr: "127.0.0.1:5000", Header: h})
	if err != nil || !v.Allowed {
		t.Fatalf("decide: %+v, %v", v, err)
	}
	v.Done(0)
	for name := range h.offCase {
		t.Errorf("asked for header %q, not in canonical form", name)
	}
	// What the canonical names found: every rule matched, keyed by what
	// its header said (the client by the trusted proxy's X-Forwarded-For).
	want := map[string]string{"u": "u1", "k": "k1", "h": "mobile", "m": "198.51.100.7"}
	for rule, value := range want {
		if !strings.Contains(keys[rule], value) {
			t.Errorf("rule %s: key %q, want one of %q", rule, keys[rule], value)
		}
	}
}
