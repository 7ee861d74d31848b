package static

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// FailurePolicy says what to do with a limit when the store that holds it
// cannot decide (Redis down, timed out, circuit open).
type FailurePolicy uint8

// The failure policies.
const (
	// FailLocal checks the limit in process instead, at Limit/instances (and
	// Burst/instances), so that the sidecars together stay near the quota.
	FailLocal FailurePolicy = iota
	// FailOpen admits: the limit is skipped.
	FailOpen
	// FailClosed denies the request (sluice.ReasonStoreDown).
	FailClosed
)

var failureNames = [...]string{FailLocal: "local", FailOpen: "open", FailClosed: "closed"}

// String returns the configuration name of f.
func (f FailurePolicy) String() string {
	if int(f) < len(failureNames) {
		return failureNames[f]
	}
	return "unknown"
}

// FailurePolicyNames returns the configuration names of the failure
// policies.
func FailurePolicyNames() []string { return append([]string(nil), failureNames[:]...) }

// ParseFailurePolicy returns the FailurePolicy named s ("local", "open",
// "closed").
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	for i, n := range failureNames {
		if n == s {
			return FailurePolicy(i), nil
		}
	}
	return FailLocal, fmt.Errorf("unknown failure policy %q (want local, open or closed)", s)
}

// StoreDownRetry is the RetryAfter of a FailClosed denial.
const StoreDownRetry = time.Second

// Failover is a Store that asks a primary store (Redis) and, when it cannot
// decide, applies each limit's OnError: local limits are checked in a local
// Memory store at a share of the quota, open limits are skipped, closed
// limits deny. It is safe for concurrent use.
type Failover struct {
	primary   Store
	local     *Memory
	instances int64
	scaled    sync.Map // *Policy -> *Policy, the local share
	fallbacks atomic.Uint64
}

var _ Store = (*Failover)(nil)

// NewFailover returns a Failover over primary. local holds the local
// fallback's state; instances (at least 1) is how many sidecars share the
// quota, so that each enforces limit/instances locally.
func NewFailover(primary Store, local *Memory, instances int) *Failover {
	return &Failover{primary: primary, local: local, instances: int64(max(1, instances))}
}

// Fallbacks counts checks decided by failure policy.
func (f *Failover) Fallbacks() uint64 { return f.fallbacks.Load() }

// Check implements Store. It returns an error only when ctx ended; a failure
// of the primary store is reported in Result.Fallback.
func (f *Failover) Check(ctx context.Context, limits []Limit, each []sluice.Decision) (Result, error) {
	res, err := f.primary.Check(ctx, limits, each)
	if err == nil || ctx.Err() != nil {
		return res, err
	}
	f.fallbacks.Add(1)
	return f.fallback(ctx, limits, each, err)
}

func (f *Failover) fallback(ctx context.Context, limits []Limit, each []sluice.Decision, cause error) (Result, error) {
	decisions := make([]sluice.Decision, len(limits))
	var local []Limit
	var where []int
	for i := range limits {
		l := limits[i]
		switch l.OnError {
		case FailOpen:
			decisions[i] = sluice.Decision{Allowed: true, RuleID: l.RuleID, Limit: l.Policy.capacity(), Remaining: -1}
		case FailClosed:
			decisions[i] = sluice.Decision{RuleID: l.RuleID, Limit: l.Policy.capacity(), Remaining: -1,
				RetryAfter: StoreDownRetry, Reason: sluice.ReasonStoreDown}
		default:
			// Admitted for now; the local store decides below.
			decisions[i] = sluice.Decision{Allowed: true, RuleID: l.RuleID, Remaining: -1}
			l.Policy = f.share(l.Policy)
			local = append(local, l)
			where = append(where, i)
		}
	}
	d, idx := Combine(limits, decisions)
	res := Result{Decision: d, Permit: sluice.NopPermit{}, At: f.local.clock.Now(), Fallback: cause, Index: idx}
	// A closed limit denies without consuming the local ones.
	if d.Allowed && len(local) > 0 {
		localEach := make([]sluice.Decision, len(local))
		lres, err := f.local.Check(ctx, local, localEach)
		if err != nil {
			return res, err
		}
		for j, i := range where {
			decisions[i] = localEach[j]
		}
		res = lres
		res.Decision, res.Index = Combine(limits, decisions)
		res.Fallback = cause
	}
	if len(each) >= len(limits) {
		copy(each, decisions)
	}
	return res, nil
}

// share returns the local share of p: Limit and Burst divided by the number
// of instances, at least 1 where p had any.
func (f *Failover) share(p *Policy) *Policy {
	if f.instances == 1 {
		return p
	}
	if s, ok := f.scaled.Load(p); ok {
		return s.(*Policy)
	}
	s := *p
	if s.Limit > 0 {
		s.Limit = max(1, s.Limit/f.instances)
	}
	if s.Burst > 0 {
		s.Burst = max(1, s.Burst/f.instances)
	}
	if s.Validate() != nil {
		s = *p // a share that does not validate (rate too fine) keeps the whole policy
	}
	f.scaled.Store(p, &s)
	return &s
}

// ForgetShares drops the cached local shares of policies. Call it when the
// policies in use are replaced (a configuration reload), so that the cache
// holds only the policies of the current rules.
func (f *Failover) ForgetShares() { f.scaled.Clear() }

// Charge implements Store, in the primary store; when the primary cannot
// record it, the limits that fall back to local decisions (FailLocal) are
// charged locally, so that the local shares count the usage, and the
// primary's error is returned.
func (f *Failover) Charge(ctx context.Context, limits []Limit, at time.Time) error {
	err := f.primary.Charge(ctx, limits, at)
	if err == nil {
		return nil
	}
	local := make([]Limit, 0, len(limits))
	for _, l := range limits {
		if l.OnError == FailLocal {
			l.Policy = f.share(l.Policy)
			local = append(local, l)
		}
	}
	_ = f.local.Charge(ctx, local, at)
	return err
}

// Undo implements Store, undoing in whichever store decided.
func (f *Failover) Undo(ctx context.Context, limits []Limit, res Result) error {
	if res.Fallback == nil {
		return f.primary.Undo(ctx, limits, res)
	}
	local := make([]Limit, 0, len(limits))
	for _, l := range limits {
		if l.OnError == FailLocal {
			l.Policy = f.share(l.Policy)
			local = append(local, l)
		}
	}
	return f.local.Undo(ctx, local, res)
}
