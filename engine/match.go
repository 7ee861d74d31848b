package engine

import (
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/sluicehq/sluice/sidecar/config"
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
		c.headers = append(c.headers, [2]string{textproto.CanonicalMIMEHeaderKey(k), v})
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

// match reports whether the request fits; path is its canonical path.
func (m *matcher) match(r *Request, path string, ip netip.Addr, user string) bool {
	if m.requiresAuth && user == "" {
		return false
	}
	if len(m.methods) > 0 {
		ok := false
		for _, meth := range m.methods {
			// Methods are case-sensitive tokens, but servers route "post"
			// to POST handlers: never weaker than they are.
			if meth == r.Method || strings.EqualFold(meth, r.Method) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if m.subnet.IsValid() && (!ip.IsValid() || !m.subnet.Contains(ip)) {
		return false
	}
	for _, h := range m.headers {
		if r.Header == nil || r.Header.Get(h[0]) != h[1] {
			return false
		}
	}
	return m.matchPath(path)
}
