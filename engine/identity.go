package engine

import (
	"encoding/base64"
	"encoding/json"
	"net/netip"
	"strings"
	"time"
)

// Headers is what the engine needs of a request's headers. net/http's
// http.Header satisfies it. The engine asks only for names in canonical
// form (net/textproto.CanonicalMIMEHeaderKey), so an implementation over a
// map of canonical names may index it directly.
type Headers interface {
	// Get returns the first value of the named header, or "".
	Get(name string) string
	// Values returns every value of the named header, in order.
	Values(name string) []string
}

// Request is the engine's view of a request: enough to identify and match
// it, nothing of the HTTP engine that carries it, so that the proxy's HTTP
// engine stays replaceable.
type Request struct {
	// Method is the HTTP method, upper case.
	Method string
	// Path is the decoded URL path.
	Path string
	// RemoteAddr is the peer's "ip:port" (the socket's, not a header's).
	RemoteAddr string
	// Peer, when valid, is the peer's address, used instead of parsing
	// RemoteAddr (an HTTP engine that has it as an address saves the
	// formatting).
	Peer netip.Addr
	// Header looks up request headers.
	Header Headers
	// Host, when not empty, is the request's host as it is forwarded
	// (net/http keeps it out of its header map, and takes it from an
	// absolute-form request-target): a rule on the Host header reads it.
	Host string
	// ambiguous names a header the configuration reads that the request
	// sent more than once (see header); set while deciding.
	ambiguous string
	// Deadline, when not zero, is a deadline the face already knows (a
	// gRPC call's context): a budget beside those of deadlines.from, the
	// tightest winning.
	Deadline time.Time
}

// identity turns requests into identifiers. It is immutable once built.
type identity struct {
	trusted      []netip.Prefix
	userHeader   string
	apiKeyHeader string
	userFromJWT  bool // the user id is the JWT's sub, never the header
	v4Bits       int  // leading bits of an address that key ip_address rules
	v6Bits       int
}

// keyAddr returns the part of a client address that keys ip_address
// rules: its leading v4Bits or v6Bits.
func (id *identity) keyAddr(a netip.Addr) netip.Addr {
	bits := id.v4Bits
	if a.Is6() {
		bits = id.v6Bits
	}
	if !a.IsValid() || bits >= a.BitLen() {
		return a
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a
	}
	return p.Addr()
}

func (id *identity) isTrusted(a netip.Addr) bool {
	for _, p := range id.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP returns the client's address: the peer's, unless the peer is a
// trusted proxy, in which case the rightmost address of X-Forwarded-For (or,
// without it, Forwarded) that is not itself a trusted proxy. A malformed
// entry stops the walk at the last trusted hop. An unparsable peer yields
// the zero Addr.
func (id *identity) clientIP(r *Request) netip.Addr {
	peer := r.Peer.Unmap()
	if !peer.IsValid() {
		peer = parseHostPort(r.RemoteAddr)
	}
	if !peer.IsValid() || len(id.trusted) == 0 || !id.isTrusted(peer) || r.Header == nil {
		return peer
	}
	client := peer
	walk := func(values []string, parse func(string) netip.Addr) bool {
		seen := false
		for i := len(values) - 1; i >= 0; i-- {
			v := values[i]
			for v != "" {
				j := strings.LastIndexByte(v, ',')
				entry := strings.TrimSpace(v[j+1:])
				if j < 0 {
					v = ""
				} else {
					v = v[:j]
				}
				if entry == "" {
					continue
				}
				seen = true
				a := parse(entry)
				if !a.IsValid() {
					return seen // garbage: keep the last trusted hop
				}
				client = a
				if !id.isTrusted(a) {
					return seen
				}
			}
		}
		return seen
	}
	if !walk(r.Header.Values("X-Forwarded-For"), parseHostPort) {
		walk(r.Header.Values("Forwarded"), parseForwardedFor)
	}
	return client
}

// parseHostPort parses "ip", "ip:port", "[ipv6]:port" or "[ipv6]".
func parseHostPort(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.Unmap()
	}
	return netip.Addr{}
}

// parseForwardedFor extracts the for= address of one Forwarded element
// (RFC 7239: for=192.0.2.60;proto=http, for="[2001:db8::17]:4711").
func parseForwardedFor(elem string) netip.Addr {
	for _, pair := range strings.Split(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(k, "for") {
			return parseHostPort(strings.Trim(v, `"`))
		}
	}
	return netip.Addr{}
}

// header returns the value of the request's header name (canonical), the
// request's Host for "Host" when the face set it: the one lookup of a
// header a configuration names (identifiers, required headers), so that a
// rule on Host sees the host the service will get.
func (r *Request) header(name string) string {
	if name == "Host" {
		h := r.Host
		if h == "" && r.Header != nil {
			h = r.Header.Get(name)
		}
		return canonicalHost(h)
	}
	if r.Header == nil {
		return ""
	}
	if c, ok := r.Header.(HeaderCounter); ok {
		v := r.Header.Get(name)
		if v != "" && c.Count(name) > 1 {
			r.ambiguous = name
		}
		return v
	}
	vs := r.Header.Values(name) // one lookup for a map's Headers
	if len(vs) == 0 {
		return ""
	}
	if len(vs) > 1 {
		r.ambiguous = name
	}
	return vs[0]
}

// HeaderCounter is a Headers that counts a header's lines without
// building their values; the engine uses it, where a face's Headers has
// it, to find a header sent more than once.
type HeaderCounter interface {
	// Count returns how many times the named header was sent.
	Count(name string) int
}

// canonicalHost is a host as a service resolves it: names are not case
// sensitive, and "a.example." is "a.example" (a rule on Host keyed each
// spelling apart, and a client could reach one host under many). No
// allocation for a host already lower case without the dot.
func canonicalHost(h string) string {
	name, port := h, ""
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		name, port = h[:i], h[i:]
	}
	trimmed := strings.TrimSuffix(name, ".")
	lower := strings.ToLower(trimmed)
	if lower == name {
		return h
	}
	return lower + port
}

// user returns the request's user id from its one configured source: the
// user header, or the sub claim of a Bearer JWT (not verified). With the
// JWT source the header is ignored: a client cannot name itself.
func (id *identity) user(r *Request) string {
	if id.userFromJWT {
		return jwtSubject(r.header("Authorization"))
	}
	return r.header(id.userHeader)
}

// jwtSubject returns the sub claim of "Bearer <jwt>", or "" for anything
// else (a bad token identifies no one).
func jwtSubject(auth string) string {
	const prefix = "bearer "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return ""
	}
	parts := strings.Split(strings.TrimSpace(auth[len(prefix):]), ".")
	if len(parts) != 3 || len(parts[1]) > 8192 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return ""
	}
	var claims struct {
		Sub any `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	if s, ok := claims.Sub.(string); ok && len(s) <= 512 {
		return s
	}
	return ""
}
