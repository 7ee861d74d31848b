package engine

import (
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/sluicehq/sluice/config"
)

// matcher is a rule's compiled match: no regexp, no allocation per request.
type matcher struct {
	segs         []string // pattern segments; "*" matches one
	tail         bool     // the pattern ended in "**"
	anyPath      bool
	methods      []string
	headers      [][2]string
	subnet       netip.Prefix
	requiresAuth bool
	fold         bool // compare path segments without regard to case
}

// compileMatch compiles m; caseSensitive is the configuration's default for
// rules that do not say.
func compileMatch(m config.Match, caseSensitive bool) matcher {
	c := matcher{methods: m.Methods, requiresAuth: m.RequiresAuthentication, fold: !caseSensitive}
	if m.CaseSensitive != nil {
		c.fold = !*m.CaseSensitive
	}
	switch p := m.PathPattern; p {
	case "", "/**":
		c.anyPath = true
	default:
		segs := strings.Split(p[1:], "/")
		if segs[len(segs)-1] == "**" {
			c.tail = true
			segs = segs[:len(segs)-1]
		}
		c.segs = segs
	}
	for k, v := range m.RequiredHeaders {
		k = textproto.CanonicalMIMEHeaderKey(k)
		if k == "Host" {
			v = canonicalHost(v) // as the request's is read (Request.header)
		}
		c.headers = append(c.headers, [2]string{k, v})
	}
	if m.IPSubnet != "" {
		c.subnet, _ = config.ParsePrefix(m.IPSubnet) // validated by config
	}
	return c
}

// matchPath reports whether path (canonical: see CanonicalPath) fits the
// pattern: as many segments as the pattern (or at least as many, with a
// trailing **), each equal to the pattern's (ignoring case unless the rule
// is case sensitive) or, for *, any non-empty segment.
func (m *matcher) matchPath(path string) bool {
	if m.anyPath {
		return true
	}
	if path == "" || path[0] != '/' {
		return false
	}
	rest := path[1:]
	exhausted := false
	for _, seg := range m.segs {
		if exhausted {
			return false
		}
		part := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			part, rest = rest[:j], rest[j+1:]
		} else {
			exhausted, rest = true, ""
		}
		if seg == "*" {
			if part == "" {
				return false
			}
		} else if seg != part && (!m.fold || !strings.EqualFold(seg, part)) {
			return false
		}
	}
	return m.tail || exhausted
}

// methodOverrides are the headers through which a client asks a service for
// another method than the request's (Rails, Laravel, Express's
// method-override, Google APIs honour them on a POST).
var methodOverrides = [...]string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"} // canonical, as Headers asks

// methodMatches reports whether the request's method is one of m's, in the
// ways a service could take it: in any case (servers route "post" to POST
// handlers), HEAD as GET (a GET without the body: servers answer it with
// their GET handler), and a POST as the method an override header asks
// for (an override header sent twice makes the request ambiguous, see
// Request.header). Never weaker than the service.
func (m *matcher) methodMatches(r *Request) bool {
	is := func(meth string) bool {
		for _, want := range m.methods {
			if want == meth || strings.EqualFold(want, meth) || strings.EqualFold(meth, "HEAD") && want == "GET" {
				return true
			}
		}
		return false
	}
	if is(r.Method) {
		return true
	}
	if r.Header != nil && strings.EqualFold(r.Method, "POST") {
		for _, h := range methodOverrides {
			// r.header: an override sent twice is ambiguous (the rules
			// would take the first line; a service may take the last).
			if v := r.header(h); v != "" && is(strings.TrimSpace(v)) {
				return true
			}
		}
	}
	return false
}

// match reports whether the request fits; path is its canonical path.
func (m *matcher) match(r *Request, path string, ip netip.Addr, user string) bool {
	if m.requiresAuth && user == "" {
		return false
	}
	if len(m.methods) > 0 && !m.methodMatches(r) {
		return false
	}
	if m.subnet.IsValid() && (!ip.IsValid() || !m.subnet.Contains(ip)) {
		return false
	}
	for _, h := range m.headers {
		if r.header(h[0]) != h[1] {
			return false
		}
	}
	return m.matchPath(path)
}
