package static

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Limit is one rule's limit on one key, as checked for one request.
type Limit struct {
	// RuleID names the rule; it is copied into the Decision.
	RuleID string
	// Key identifies the limited subject under this rule (e.g. the rule id
	// and a user id). Keys of different rules must differ. For the Redis
	// store, put the identifier in braces ("{user42}:orders"): keys with the
	// same braced part share a Cluster hash slot, so a request's rules on one
	// identifier are checked by one script call. A Store must not keep Key
	// past the call without copying it (strings.Clone): callers may build
	// keys in memory that is released when the request ends.
	Key string
	// Policy is the rule's limit. A key whose Policy changes starts afresh
	// (concurrency permits in flight are kept), unless only Limit and Burst
	// changed (Policy.SharesState): then the new limit applies to the usage
	// so far. Required and valid.
	Policy *Policy
	// Cost is what the request consumes; usually 1. Zero asks without
	// consuming.
	Cost int64
	// Shadow makes the limit advisory: it is evaluated and reported in the
	// per-limit decisions, and consumes when the request is admitted and it
	// allows, but its denial does not deny the request.
	Shadow bool
	// DryRun asks what a request of Cost would get without taking it: the
	// limit is evaluated as usual but nothing is committed, no permit is
	// held, and a busy concurrency limit is not waited for. A check is a
	// dry run when all its limits are.
	DryRun bool
	// OnError is what Failover does with this limit when the primary store
	// cannot decide. The zero value is FailLocal.
	OnError FailurePolicy
	// Reserve, for a token bucket without warm-up and GCRA, admits a
	// request over the quota whose turn comes within Reserve: its tokens
	// are taken now, in advance, and the Decision's Delay says how long to
	// hold it (as x/time/rate's Reserve; Hold waits it out and gives the
	// tokens back if the caller leaves first). Other algorithms, and
	// shadow limits, ignore it.
	Reserve time.Duration
	// Local sends the limit, in a Split, to the local-first store (a
	// fleet's eventual consistency) instead of the exact one.
	Local bool
}

// Result is the answer of a Store's Check.
type Result struct {
	// Decision is the combined decision over every enforced limit.
	sluice.Decision
	// Permit holds what an admitted request keeps until it ends (concurrency
	// slots). It is never nil when Allowed; release it exactly once.
	Permit sluice.Permit
	// At is the time the store decided at, for Undo.
	At time.Time
	// Index is the position in the checked limits of the limit Decision
	// describes (the first that denied, else the tightest), or -1 when
	// there were no limits.
	Index int
	// Fallback, when not nil, is the error of the primary store that made
	// Failover decide by the limits' failure policies instead.
	Fallback error
}

// Store checks the limits of a request. Implementations must be safe for
// concurrent use.
type Store interface {
	// Check decides a request against all its limits, atomically and
	// all-or-nothing: when any enforced limit denies, no limit consumes,
	// except those with CountBlocked. When each is at least as long as
	// limits, each[i] receives limit i's own decision. Limits whose only
	// denial is a busy Concurrency limit with a Timeout make Check wait, up
	// to that timeout or ctx's end, for a slot. An error means the store
	// could not decide; the caller applies the rule's failure policy.
	Check(ctx context.Context, limits []Limit, each []sluice.Decision) (Result, error)
	// Undo gives back what an admitted Check consumed, as far as the state
	// still allows (see Policy.Undo); the Permit is released separately.
	// Callers give an admitted check back through its Reservation (Cancel);
	// Undo is the store's part of that, and what a refund of hits taken
	// before (Envoy's negative hits) calls.
	Undo(ctx context.Context, limits []Limit, res Result) error
	// Charge records usage learned after a request was admitted (a cost
	// its response stated, beyond what its check reserved): each limit's
	// Cost is added to its key at at, past the limit if need be, never
	// denied (the usage has happened: the key then denies until it
	// recovers, as Policy.Absorb); a negative Cost gives usage back, as
	// Undo. Concurrency limits and dry runs are ignored. An error means
	// the usage could not be recorded.
	Charge(ctx context.Context, limits []Limit, at time.Time) error
}

// reserve is the limit's Reserve in nanoseconds, 0 for a shadow limit
// (advisory: nothing is taken in advance for it).
func (l *Limit) reserve() int64 {
	if l.Shadow || l.Reserve < 0 {
		return 0
	}
	return int64(l.Reserve)
}

// Reservation is what one admitted Check took (quota, a reservation of
// future quota, concurrency slots) and the one handle that gives it back,
// whatever the exit, as x/time/rate's Reservation is: Wait holds the
// request for the check's Delay, Cancel gives everything back when the
// request will not be served after all, Done ends a served one. The zero
// Reservation holds nothing.
type Reservation struct {
	store  Store
	limits []Limit
	res    Result
}

// Reserved returns the reservation of res, the result of an admitted Check
// of limits on s. limits must stay as they are while the reservation may
// be cancelled.
func Reserved(s Store, limits []Limit, res Result) Reservation {
	return Reservation{store: s, limits: limits, res: res}
}

// Delay is how long the request must wait before it may proceed (a leaky
// bucket's pacing, a reservation's wait).
func (r Reservation) Delay() time.Duration { return r.res.Delay }

// Wait waits out the Delay. If ctx ends first, or has ended already (the
// caller left while the store decided), it gives back what the check took
// (Cancel) and returns ctx's error.
func (r Reservation) Wait(ctx context.Context) error {
	if r.res.Delay > 0 {
		t := time.NewTimer(r.res.Delay)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
		}
	} else if ctx.Err() == nil {
		return nil
	}
	r.Cancel(ctx)
	return ctx.Err()
}

// Cancel gives back what the check took when the request will not be
// served after all (its client left, the wait queue refused it): the quota
// through the store's Undo, on a context detached from ctx's cancellation,
// and the concurrency slots, released with sluice.Ignore.
func (r Reservation) Cancel(ctx context.Context) {
	if r.store == nil {
		return
	}
	_ = r.store.Undo(context.WithoutCancel(ctx), r.limits, r.res)
	if r.res.Permit != nil {
		r.res.Permit.Release(sluice.Ignore)
	}
}

// Done ends a served request: its concurrency slots are released with the
// outcome; the quota stays spent.
func (r Reservation) Done(o sluice.Outcome) {
	if r.res.Permit != nil {
		r.res.Permit.Release(o)
	}
}

// Combine folds the per-limit decisions of one request into the request's
// decision: denied if any enforced (non-shadow) limit denied, reporting the
// first that denied with the latest RetryAfter of all denials (sluice.Never
// wins); else admitted, reporting the tightest limit (least Remaining) with
// the longest Delay. A request with only shadow limits is admitted and
// reports the tightest of them. decisions[i] goes with limits[i]; RuleIDs
// are taken from limits. The index is that of the limit reported.
func Combine(limits []Limit, decisions []sluice.Decision) (sluice.Decision, int) {
	denied, tightest := -1, -1
	var retry, delay time.Duration
	for i := range decisions {
		d := &decisions[i]
		if limits[i].Shadow {
			continue
		}
		if !d.Allowed {
			if denied < 0 {
				denied = i
			}
			if retry >= 0 && (d.RetryAfter < 0 || d.RetryAfter > retry) {
				retry = d.RetryAfter
			}
			continue
		}
		delay = max(delay, d.Delay)
		if tightest < 0 || d.Remaining < decisions[tightest].Remaining {
			tightest = i
		}
	}
	if denied >= 0 {
		d := decisions[denied]
		d.RuleID = limits[denied].RuleID
		d.RetryAfter = retry
		d.Delay = 0
		return d, denied
	}
	if tightest < 0 {
		for i := range decisions {
			if tightest < 0 || decisions[i].Remaining < decisions[tightest].Remaining {
				tightest = i
			}
		}
	}
	d := decisions[tightest]
	d.RuleID = limits[tightest].RuleID
	d.Allowed, d.Reason, d.RetryAfter, d.Delay = true, sluice.ReasonNone, 0, delay
	return d, tightest
}
