package sidecar

// RuleCount returns a rule's count of one decision (allowed, denied,
// would_deny, not_counted), for the tests.
func RuleCount(e *Engine, rule, decision string) uint64 {
	c := e.metrics.ruleCounters(rule)
	switch decision {
	case "allowed":
		return c.allowed.Load()
	case "denied":
		return c.denied.Load()
	case "would_deny":
		return c.wouldDeny.Load()
	case "not_counted":
		return c.notCounted.Load()
	}
	return 0
}
