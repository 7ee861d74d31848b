package engine

import "strings"

// CanonicalPath returns the spelling of a decoded URL path that rule
// patterns are matched against, so that a rule is never weaker than the
// routers behind sluice, which treat many spellings of one path alike:
// path parameters (";jsessionid=1" in any segment, which Tomcat, Jetty and
// Spring strip) are removed, "." and ".." segments are resolved, repeated
// slashes are merged, and a trailing slash is dropped. Letter case is left
// alone: rules fold it themselves (match.case_sensitive).
//
// ok is false for a path the routers disagree on, which sluice refuses
// rather than guess: a backslash (a separator to IIS and ASP.NET), a
// control character, or a dot segment spelled with parameters ("..;",
// Tomcat's ".." and everyone else's name). A path that needs none of this
// is returned as it is, without allocating.
func CanonicalPath(p string) (canonical string, ok bool) {
	if !needsCanonical(p) {
		return p, true
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == '\\' || c < 0x20 || c == 0x7f {
			return "", false
		}
	}
	out := make([]byte, 0, len(p)+1)
	rest := p
	for rest != "" {
		i := strings.IndexByte(rest, '/')
		var seg string
		if i < 0 {
			seg, rest = rest, ""
		} else {
			seg, rest = rest[:i], rest[i+1:]
		}
		name := seg
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			name = seg[:j]
			if name == "." || name == ".." {
				return "", false
			}
		}
		switch name {
		case "", ".":
		case "..":
			for len(out) > 0 && out[len(out)-1] != '/' {
				out = out[:len(out)-1]
			}
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, '/')
			out = append(out, name...)
		}
	}
	if len(out) == 0 {
		return "/", true
	}
	return string(out), true
}

// needsCanonical reports whether p is not already canonical, or is
// refused: it scans p once.
func needsCanonical(p string) bool {
	if p == "" || p[0] != '/' {
		return true
	}
	if len(p) > 1 && p[len(p)-1] == '/' {
		return true
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == ';', c == '\\', c < 0x20, c == 0x7f:
			return true
		case c == '/' && i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.'):
			return true
		}
	}
	return false
}
