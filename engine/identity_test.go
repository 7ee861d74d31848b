package engine

import (
	"encoding/base64"
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/config"
)

func TestClientIP(t *testing.T) {
	id := &identity{trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}}
	cases := []struct {
		name, peer string
		headers    map[string][]string
		want       string
	}{
		{"socket", "192.0.2.1:5555", nil, "192.0.2.1"},
		{"spoofed header from an untrusted peer changes nothing", "192.0.2.1:5555", map[string][]string{"X-Forwarded-For": {"6.6.6.6"}}, "192.0.2.1"},
		{"trusted proxy", "127.0.0.1:1", map[string][]string{"X-Forwarded-For": {"198.51.100.7"}}, "198.51.100.7"},
		{"rightmost untrusted", "127.0.0.1:1", map[string][]string{"X-Forwarded-For": {"6.6.6.6, 198.51.100.7, 10.1.2.3"}}, "198.51.100.7"},
		{"several header lines", "127.0.0.1:1", map[string][]string{"X-Forwarded-For": {"6.6.6.6", "198.51.100.7"}}, "198.51.100.7"},
		{"all trusted: the leftmost", "127.0.0.1:1", map[string][]string{"X-Forwarded-For": {"10.9.9.9, 10.1.1.1"}}, "10.9.9.9"},
		{"garbage stops at the last trusted hop", "127.0.0.1:1", map[string][]string{"X-Forwarded-For": {"198.51.100.7, bogus, 10.1.1.1"}}, "10.1.1.1"},
		{"ipv6 with port", "127.0.0.1:1", map[string][]string{"X-Forwarded-For": {"[2001:db8::1]:4711"}}, "2001:db8::1"},
		{"forwarded", "127.0.0.1:1", map[string][]string{"Forwarded": {`for=192.0.2.60;proto=http, for="[2001:db8::17]:4711"`}}, "2001:db8::17"},
		{"xff wins over forwarded", "127.0.0.1:1", map[string][]string{"X-Forwarded-For": {"198.51.100.7"}, "Forwarded": {"for=192.0.2.60"}}, "198.51.100.7"},
		{"ipv4-mapped peer", "[::ffff:192.0.2.9]:80", nil, "192.0.2.9"},
		{"bad peer", "nonsense", nil, "invalid IP"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for k, vs := range c.headers {
				for _, v := range vs {
					h.Add(k, v)
				}
			}
			got := id.clientIP(&Request{RemoteAddr: c.peer, Header: h})
			if got.String() != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

func jwt(payload string) string {
	return "Bearer e30." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
}

func TestUser(t *testing.T) {
	id := &identity{userHeader: "X-User-ID", userFromJWT: true}
	cases := map[string]struct {
		h    http.Header
		want string
	}{
		// With the JWT source, a client's own header names no one.
		"header ignored":    {http.Header{"X-User-Id": {"alice"}}, ""},
		"jwt sub":           {http.Header{"Authorization": {jwt(`{"sub":"bob","exp":1}`)}}, "bob"},
		"jwt over header":   {http.Header{"X-User-Id": {"alice"}, "Authorization": {jwt(`{"sub":"bob"}`)}}, "bob"},
		"not bearer":        {http.Header{"Authorization": {"Basic Ym9iOnB3"}}, ""},
		"bad base64":        {http.Header{"Authorization": {"Bearer a.!!!.c"}}, ""},
		"sub not a string":  {http.Header{"Authorization": {jwt(`{"sub":42}`)}}, ""},
		"two parts":         {http.Header{"Authorization": {"Bearer a.b"}}, ""},
		"no identification": {http.Header{}, ""},
	}
	for name, c := range cases {
		if got := id.user(&Request{Header: c.h}); got != c.want {
			t.Errorf("%s: got %q, want %q", name, got, c.want)
		}
	}
	off := &identity{userHeader: "X-User-ID"}
	if got := off.user(&Request{Header: http.Header{"X-User-Id": {"alice"}}}); got != "alice" {
		t.Errorf("header source: got %q, want alice", got)
	}
	if got := off.user(&Request{Header: http.Header{"Authorization": {jwt(`{"sub":"bob"}`)}}}); got != "" {
		t.Errorf("JWT read while not configured: %q", got)
	}
}

func TestMatchPath(t *testing.T) {
	cases := []struct {
		pattern, path string
		want          bool
	}{
		{"/orders/*", "/orders/1", true},
		{"/orders/*", "/orders/", false},
		{"/orders/*", "/orders", false},
		{"/orders/*", "/orders/1/items", false},
		{"/orders/*/items", "/orders/1/items", true},
		{"/orders/*/items", "/orders/1/other", false},
		{"/api/**", "/api", true},
		{"/api/**", "/api/", true},
		{"/api/**", "/api/a/b/c", true},
		{"/api/**", "/apix", false},
		{"/**", "/anything/at/all", true},
		{"", "/x", true},
		{"/", "/", true},
		{"/", "/x", false},
		{"/health", "/health", true},
		{"/health", "/health/", false},
		{"/a/*/**", "/a/b", true},
		{"/a/*/**", "/a", false},
		{"/x", "x", false},
	}
	for _, c := range cases {
		m := compileMatch(config.Match{PathPattern: c.pattern}, true)
		if got := m.matchPath(c.path); got != c.want {
			t.Errorf("%q on %q: got %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

func TestMatch(t *testing.T) {
	m := compileMatch(config.Match{PathPattern: "/orders/*", Methods: []string{"GET"}, RequiresAuthentication: true,
		RequiredHeaders: map[string]string{"X-Client-Type": "mobile"}, IPSubnet: "2001:db8::/32"}, false)
	ip := netip.MustParseAddr("2001:db8::5")
	ok := &Request{Method: "GET", Path: "/orders/7", Header: http.Header{"X-Client-Type": {"mobile"}}}
	if !m.match(ok, ok.Path, ip, "u") {
		t.Fatal("a fitting request did not match")
	}
	for name, f := range map[string]func() bool{
		"method": func() bool { r := *ok; r.Method = "POST"; return m.match(&r, r.Path, ip, "u") },
		"anon":   func() bool { return m.match(ok, ok.Path, ip, "") },
		"subnet": func() bool { return m.match(ok, ok.Path, netip.MustParseAddr("192.0.2.1"), "u") },
		"no ip":  func() bool { return m.match(ok, ok.Path, netip.Addr{}, "u") },
		"header": func() bool {
			r := *ok
			r.Header = http.Header{"X-Client-Type": {"web"}}
			return m.match(&r, r.Path, ip, "u")
		},
		"path": func() bool { r := *ok; r.Path = "/users/7"; return m.match(&r, r.Path, ip, "u") },
	} {
		if f() {
			t.Errorf("%s: matched", name)
		}
	}
	if n := testing.AllocsPerRun(100, func() { m.match(ok, ok.Path, ip, "u") }); n != 0 {
		t.Errorf("matching allocates %v times", n)
	}
}

// TestMethodAsTheServiceTakesIt: a methods rule matches the ways a service
// could run its method: any case, HEAD for GET (its GET handler answers
// it), and a POST that asks for the method in an override header; nothing
// else widens it.
func TestMethodAsTheServiceTakesIt(t *testing.T) {
	getM := compileMatch(config.Match{PathPattern: "/x", Methods: []string{"GET"}}, false)
	get := &getM
	postM := compileMatch(config.Match{PathPattern: "/x", Methods: []string{"POST"}}, false)
	post := &postM
	cases := []struct {
		m      *matcher
		method string
		header http.Header
		want   bool
	}{
		{get, "GET", nil, true},
		{get, "get", nil, true},
		{get, "HEAD", nil, true},
		{get, "POST", http.Header{"X-Http-Method-Override": {"GET"}}, true},
		{get, "POST", http.Header{"X-Http-Method": {" get "}}, true},
		{get, "POST", http.Header{"X-Method-Override": {"GET"}}, true},
		{get, "POST", nil, false},
		{get, "PUT", http.Header{"X-Http-Method-Override": {"GET"}}, false}, // only a POST is overridden
		{get, "POST", http.Header{"X-Http-Method-Override": {"DELETE"}}, false},
		{post, "HEAD", nil, false},
		{post, "POST", http.Header{"X-Http-Method-Override": {"GET"}}, true}, // still a POST to the proxy
	}
	for _, c := range cases {
		r := &Request{Method: c.method, Path: "/x", Header: c.header}
		if got := c.m.match(r, r.Path, netip.Addr{}, ""); got != c.want {
			t.Errorf("methods %v, %s %v: matched %v, want %v", c.m.methods, c.method, c.header, got, c.want)
		}
	}
}

func FuzzClientIP(f *testing.F) {
	f.Add("127.0.0.1:1", "198.51.100.7, 10.0.0.1", `for="[2001:db8::17]:4711"`)
	f.Add("[::1]:80", ",,,", "for=")
	id := &identity{trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	f.Fuzz(func(t *testing.T, peer, xff, fwd string) {
		h := http.Header{"X-Forwarded-For": {xff}, "Forwarded": {fwd}}
		got := id.clientIP(&Request{RemoteAddr: peer, Header: h})
		p := parseHostPort(peer)
		if !id.isTrusted(p) && got != p {
			t.Fatalf("untrusted peer %v: headers changed the client to %v", p, got)
		}
	})
}

func TestKeyAddr(t *testing.T) {
	id := &identity{v4Bits: 24, v6Bits: 64}
	for in, want := range map[string]string{
		"192.0.2.77": "192.0.2.0", "2001:db8:1:2:aaaa::1": "2001:db8:1:2::", "2001:db8:1:2:ffff:ffff:ffff:ffff": "2001:db8:1:2::",
	} {
		if got := id.keyAddr(netip.MustParseAddr(in)).String(); got != want {
			t.Errorf("keyAddr(%s) = %s, want %s", in, got, want)
		}
	}
	full := &identity{v4Bits: 32, v6Bits: 128}
	if got := full.keyAddr(netip.MustParseAddr("2001:db8::1")).String(); got != "2001:db8::1" {
		t.Errorf("/128 keyAddr = %s", got)
	}
}
