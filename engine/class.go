package engine

import (
	"hash/maphash"
	"net/netip"
	"net/textproto"

	"github.com/sluicehq/sluice/config"
)

// This file compiles the priority classes and the queue's fairness key,
// and finds a request's class and tenant. It imports no net/http.

// class is a compiled priority class.
type class struct {
	name  string
	match matcher
}

// compileClasses compiles cfg's classes and fairness into rs.
func compileClasses(rs *ruleSet, cfg *config.Config) {
	a := cfg.Adaptive
	for i, c := range a.Classes {
		rs.classes = append(rs.classes, class{name: c.Name, match: compileMatch(c.Match, cfg.CaseSensitivePaths)})
		if c.Name == a.DefaultClass {
			rs.defaultClass = i
		}
	}
	rs.deadlines = compileDeadlines(cfg.Deadlines, a.Classes)
	if t := cfg.Queue.Fairness.Tenant(); t != "" {
		f := &rule{idKind: compileIdentifier(t)}
		if f.idKind == idHeader {
			f.header = textproto.CanonicalMIMEHeaderKey(t.Header())
		}
		rs.fairness = f
		// Random per rule set: a client cannot pick identifiers that land
		// in the buckets of the tenants it wants to crowd.
		rs.tenantSeed = maphash.MakeSeed()
	}
}

// classOf returns the index of the request's class: the first whose match
// it fits, else the default class (0 without classes).
func (rs *ruleSet) classOf(req *Request, path string, ip netip.Addr, user string) int {
	for i := range rs.classes {
		if rs.classes[i].match.match(req, path, ip, user) {
			return i
		}
	}
	return rs.defaultClass
}

// tenant returns the request's tenant for fair queuing: a hash of its
// identifier (the client's address block for ip_address), 0 without
// fairness or without an identifier (all such requests are one tenant).
func (rs *ruleSet) tenant(req *Request, ip netip.Addr, user string) uint64 {
	if rs.fairness == nil {
		return 0
	}
	_, value, useIP, ok := rs.fairness.identifier(rs, req, ip, user)
	switch {
	case !ok:
		return 0
	case useIP:
		b := rs.identity.keyAddr(ip).As16()
		return maphash.Bytes(rs.tenantSeed, b[:])
	}
	return maphash.String(rs.tenantSeed, value)
}
