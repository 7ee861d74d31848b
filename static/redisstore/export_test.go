package redisstore

import "github.com/sluicehq/sluice/static"

// CheckSource exposes the check script to tests.
func CheckSource() string { return checkSource }

// CachedPolicies counts the entries of the policy argument cache.
func (s *Store) CachedPolicies() int {
	n := 0
	s.policies.Range(func(any, any) bool { n++; return true })
	return n
}

// ArgsOf fills the policy argument cache for p.
func (s *Store) ArgsOf(p *static.Policy) { s.argsOf(p) }
