package redisstore

import (
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/static"
)

// CheckSource exposes the check script to tests.
func CheckSource() string { return stateSource + checkSource }

// CachedPolicies counts the entries of the policy argument cache.
func (s *Store) CachedPolicies() int {
	n := 0
	s.policies.Range(func(any, any) bool { n++; return true })
	return n
}

// ArgsOf fills the policy argument cache for p.
func (s *Store) ArgsOf(p *static.Policy) { s.argsOf(p) }

// WithoutFast makes o's store send every limit to check.lua, the reference
// fast.lua is compared with.
func WithoutFast(o Options) Options { o.noFast = true; return o }

// ScriptHashes returns the SHA1 of check.lua and fast.lua.
func ScriptHashes() (check, fast string) {
	return redis.NewScript(stateSource + checkSource).Hash(), redis.NewScript(fastSource).Hash()
}
