package static

import (
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// KeyState is one key's state under one Policy. Its fields mean different things
// per algorithm (see the step functions); the zero KeyState is a fresh key that
// has seen no request. A KeyState is a value: Step returns the next one and never
// changes its argument, except that a sliding log's expired timestamps may be
// dropped from the shared log, which changes no decision.
type KeyState struct {
	// Last is the latest time seen, in Unix nanoseconds. Time never runs
	// backwards for a key: an earlier now is read as Last.
	Last int64
	// A, B and C are the algorithm's integers.
	A, B, C int64
	// F is the warm-up token bucket's deficit of stored permits.
	F float64
	// Log is the sliding log's timestamps; nil until the first request.
	Log *TimeLog
	// InFlight is the concurrency algorithm's requests in flight. It is kept
	// across a policy change, because Permits still hold it.
	InFlight int64
}

// Step is the result of evaluating one request against one key's state.
type Step struct {
	// Next is the KeyState to store if the request is committed.
	Next KeyState
	// Decision is the algorithm's answer (RuleID is left to the store).
	Decision sluice.Decision
	// Record is, for a sliding log, how many timestamps at Now to append
	// when committed.
	Record int64
	// CommitOnDeny marks a step that is committed even when the request is
	// denied (sliding log with CountBlocked).
	CommitOnDeny bool
	// Until is when, in Unix nanoseconds, the committed state is whole again:
	// past it, the key is equivalent to a fresh one and may be dropped.
	Until int64
}

// Evaluate computes the decision for a request of cost at now (Unix
// nanoseconds) against state st. It does not change st; the caller commits
// the returned Step with Commit when the whole request is admitted (or when
// CommitOnDeny is set). p must be valid.
func (p *Policy) Evaluate(st KeyState, now, cost int64) Step {
	var s Step
	p.evaluate(&s, &st, now, cost, 0)
	return s
}

// EvaluateReserving is Evaluate for a limit with a Reserve, in nanoseconds
// (see Limit.Reserve).
func (p *Policy) EvaluateReserving(st KeyState, now, cost, reserve int64) Step {
	var s Step
	p.evaluate(&s, &st, now, cost, reserve)
	return s
}

// evaluate is EvaluateReserving into *s, which it overwrites; *st is only
// read. Stores call it with both in place, so that a check copies the
// state once and the step not at all.
func (p *Policy) evaluate(s *Step, st *KeyState, now, cost, reserve int64) {
	// Every step function sets the Decision and Until.
	s.Next, s.Record, s.CommitOnDeny = *st, 0, false
	if now < s.Next.Last {
		now = s.Next.Last
	}
	s.Next.Last = now
	if cost < 0 {
		cost = 0
	}
	if p.Limit == 0 {
		// Nothing is ever admitted; a zero cost peeks at an empty quota.
		s.never(now, 0, 0)
		if cost == 0 {
			s.Decision.Allowed = true
		}
	} else {
		switch p.Algorithm {
		case FixedWindow:
			p.fixedWindow(s, now, cost)
		case SlidingWindow:
			p.slidingWindow(s, now, cost)
		case SlidingLog:
			p.slidingLog(s, now, cost)
		case TokenBucket:
			if p.Warmup > 0 {
				p.warmingBucket(s, now, cost)
			} else {
				p.gcra(s, now, cost, p.capacity(), reserve)
			}
		case GCRA:
			p.gcra(s, now, cost, p.Burst+1, reserve)
		case LeakyBucket:
			p.leakyBucket(s, now, cost)
		case Semaphore:
			p.semaphore(s, now, cost)
		case Concurrency:
			p.concurrency(s, now, cost)
		default:
			s.never(now, 0, 0) // not a valid policy: deny, never admit
		}
	}
	d := &s.Decision
	if d.Limit == 0 {
		d.Limit = p.capacity()
	}
	if d.Allowed {
		d.Reason = sluice.ReasonNone
		d.RetryAfter = 0
	} else if d.Reason == sluice.ReasonNone {
		d.Reason = sluice.ReasonQuota
	}
	if d.Remaining < 0 {
		d.Remaining = 0
	}
}

// Commit stores a Step into *st, appending a sliding log's timestamps (at
// the step's time, s.Next.Last).
func (p *Policy) Commit(st *KeyState, s *Step) {
	*st = s.Next
	if p.Algorithm == SlidingLog && st.Log != nil {
		st.Log.Expire(st.Last - int64(p.Window))
	}
	if s.Record > 0 {
		if st.Log == nil {
			st.Log = &TimeLog{}
		}
		st.Log.Push(st.Last, s.Record, p.Limit)
	}
}

// The step functions below read the key's state from s.Next (the stored
// state, its Last already now), change s.Next only when they admit, and set
// the Decision and Until. They leave everything else as evaluate zeroed it.

// never is the denial of a request no retry can admit.
func (s *Step) never(now, remaining, resetAfter int64) {
	s.Decision = sluice.Decision{
		Remaining:  remaining,
		ResetAfter: time.Duration(resetAfter),
		RetryAfter: sluice.Never,
	}
	s.Until = now + resetAfter
}

// windowStart is the start of the epoch-aligned window of length w holding now.
func windowStart(now, w int64) int64 { return now - now%w }

// fixedWindow: A = window start, B = count in that window.
func (p *Policy) fixedWindow(s *Step, now, cost int64) {
	st := &s.Next
	w := int64(p.Window)
	win := windowStart(now, w)
	count := st.B
	if st.A != win {
		count = 0
	}
	reset := func(c int64) int64 {
		if c > 0 {
			return win + w - now
		}
		return 0
	}
	if count+cost <= p.Limit {
		st.A, st.B = win, count+cost
		r := reset(count + cost)
		// With CountBlocked the hits count even when another rule of the
		// request denies it (as envoyproxy/ratelimit increments every
		// matching counter).
		s.CommitOnDeny = p.CountBlocked && cost > 0
		s.Decision = sluice.Decision{Allowed: true, Remaining: p.Limit - count - cost, ResetAfter: time.Duration(r)}
		s.Until = now + r
		return
	}
	if p.CountBlocked && cost > 0 {
		// Refused hits count too: the window stays over its limit for
		// the rest of it, and what is left is none (the peer's counting).
		st.A, st.B = win, count+cost
		r := reset(count + cost)
		s.CommitOnDeny = true
		s.Decision = sluice.Decision{Remaining: 0, ResetAfter: time.Duration(r), RetryAfter: time.Duration(win + w - now)}
		if cost > p.Limit {
			s.Decision.RetryAfter = sluice.Never
		}
		s.Until = now + r
		return
	}
	if cost > p.Limit {
		s.never(now, max(0, p.Limit-count), reset(count))
		return
	}
	// (A window that counted refused hits may be past its limit: none left.)
	s.Decision = sluice.Decision{
		Remaining: max(0, p.Limit-count), ResetAfter: time.Duration(reset(count)), RetryAfter: time.Duration(win + w - now),
	}
	s.Until = now + reset(count)
}

// slidingWindow: A = current window start, B = its count, C = the previous
// window's count.
func (p *Policy) slidingWindow(s *Step, now, cost int64) {
	st := &s.Next
	w := int64(p.Window)
	win := windowStart(now, w)
	cur, prev := st.B, st.C
	switch st.A {
	case win:
	case win - w:
		prev, cur = cur, 0
	default:
		prev, cur = 0, 0
	}
	elapsed := now - win
	weight := float64(w-elapsed) / float64(w)
	est := float64(prev)*weight + float64(cur)
	reset := func(cur, prev int64) int64 {
		switch {
		case cur > 0:
			return win + 2*w - now
		case prev > 0:
			return win + w - now
		}
		return 0
	}
	l := float64(p.Limit)
	if cost > p.Limit {
		s.never(now, int64(math.Floor(l-est)), reset(cur, prev))
		return
	}
	if est+float64(cost) <= l {
		st.A, st.B, st.C = win, cur+cost, prev
		r := reset(cur+cost, prev)
		s.Decision = sluice.Decision{
			Allowed: true, Remaining: int64(math.Floor(l - est - float64(cost))), ResetAfter: time.Duration(r),
		}
		s.Until = now + r
		return
	}
	// Denied: find when the estimate first leaves room for cost.
	var retry int64
	if cur+cost <= p.Limit {
		// Later in this window, as the previous window's weight decays:
		// prev*(w-e)/w + cur + cost <= l  <=>  e >= w*(1 - (l-cur-cost)/prev).
		e := float64(w) * (1 - (l-float64(cur+cost))/float64(prev))
		retry = win + int64(math.Ceil(e)) - now
	} else {
		// In the next window, where cur becomes the previous count.
		e := float64(w) * (1 - (l-float64(cost))/float64(cur))
		retry = win + w + int64(math.Ceil(e)) - now
	}
	r := reset(cur, prev)
	s.Decision = sluice.Decision{
		Remaining: int64(math.Floor(l - est)), ResetAfter: time.Duration(r), RetryAfter: time.Duration(max(retry, 1)),
	}
	s.Until = now + r
}

// slidingLog keeps the timestamps of admitted (and, with CountBlocked,
// blocked) requests in Log.
func (p *Policy) slidingLog(s *Step, now, cost int64) {
	w := int64(p.Window)
	lg := s.Next.Log
	// Evaluate must not change the log (a denied check commits nothing, and
	// a clock that steps back must find what it saw): the expired entries
	// are skipped here and dropped by Commit.
	skip := lg.CountAtOrBefore(now - w)
	count := int64(lg.Len() - skip)
	newest, hasNewest := lg.Newest()
	hasNewest = hasNewest && count > 0
	// until is when the log is empty and the min interval has passed.
	until := func(newest int64, has bool) int64 {
		if !has {
			return now
		}
		return newest + max(w, int64(p.MinInterval))
	}
	if cost > p.Limit {
		s.never(now, p.Limit-count, until(newest, hasNewest)-now)
		return
	}
	// retryAt is when a request of cost fits, given the log's state.
	retryAt := func(count int64, newest int64, has bool, extra int64) int64 {
		at := now
		if over := count + extra + cost - p.Limit; over > 0 {
			// The over-th oldest timestamp must leave the window.
			at = max(at, lg.At(skip+int(over-1))+w)
		}
		if has && p.MinInterval > 0 {
			at = max(at, newest+int64(p.MinInterval))
		}
		return at
	}
	blockedByInterval := hasNewest && p.MinInterval > 0 && cost > 0 && now-newest < int64(p.MinInterval)
	if count+cost <= p.Limit && !blockedByInterval {
		u := until(newest, hasNewest)
		if cost > 0 {
			u = now + max(w, int64(p.MinInterval))
		}
		// With CountBlocked the attempt is recorded even when another rule
		// of the request denies it.
		s.Record, s.CommitOnDeny = cost, p.CountBlocked && cost > 0
		s.Decision = sluice.Decision{Allowed: true, Remaining: p.Limit - count - cost, ResetAfter: time.Duration(u - now)}
		s.Until = u
		return
	}
	if !p.CountBlocked {
		u := until(newest, hasNewest)
		s.Decision = sluice.Decision{
			Remaining: p.Limit - count, ResetAfter: time.Duration(u - now), RetryAfter: time.Duration(retryAt(count, newest, hasNewest, 0) - now),
		}
		s.Until = u
		return
	}
	// The blocked attempt is recorded: the answer describes the log after it.
	// The log keeps at most Limit timestamps, so the oldest may be pushed out.
	after := min(count+cost, p.Limit)
	dropped := count + cost - after // timestamps pushed out by the record
	at := now
	if over := after + cost - p.Limit; over > 0 {
		// The over-th oldest timestamp of the log after recording must leave;
		// the first dropped ones of the old log are gone already.
		if idx := dropped + over - 1; idx < count {
			at = lg.At(skip+int(idx)) + w
		} else {
			at = now + w // one of this attempt's own timestamps
		}
	}
	if p.MinInterval > 0 {
		at = max(at, now+int64(p.MinInterval))
	}
	u := now + max(w, int64(p.MinInterval))
	s.Record, s.CommitOnDeny = cost, true
	s.Decision = sluice.Decision{
		Remaining: p.Limit - after, ResetAfter: time.Duration(u - now), RetryAfter: time.Duration(at - now),
	}
	s.Until = u
}

// gcra is redis-cell's GCRA with tolerance capacity*T; the strict token
// bucket is the same algorithm with capacity = Burst (or Limit). A = the
// theoretical arrival time (TAT).
func (p *Policy) gcra(s *Step, now, cost, capacity, reserve int64) {
	t := p.interval()
	dvt := t * capacity
	tat := max(s.Next.A, now)
	// A cost beyond the capacity can never pass; avoid an overflowing product.
	if cost > capacity {
		ttl := tat - now
		s.never(now, remainingGCRA(dvt, ttl, t), ttl)
		return
	}
	newTat := tat + t*cost
	var delay int64
	if diff := now - (newTat - dvt); diff < 0 {
		if -diff > reserve {
			ttl := tat - now
			s.Decision = sluice.Decision{
				Remaining: remainingGCRA(dvt, ttl, t), ResetAfter: time.Duration(ttl), RetryAfter: time.Duration(-diff),
			}
			s.Until = tat
			return
		}
		delay = -diff // reserved: the tokens are taken now, the request held until its turn
	}
	s.Next.A = newTat
	ttl := newTat - now
	s.Decision = sluice.Decision{
		Allowed: true, Remaining: remainingGCRA(dvt, ttl, t), ResetAfter: time.Duration(ttl), Delay: time.Duration(delay),
	}
	s.Until = newTat
}

// remainingGCRA is redis-cell's remaining: whole emission intervals left in
// the tolerance, truncated toward zero.
func remainingGCRA(dvt, ttl, t int64) int64 {
	if next := dvt - ttl; next > -t {
		return next / t
	}
	return 0
}

// Guava's cold factor: a cold key admits at a third of the stable rate.
const coldFactor = 3.0

// warmingBucket is Guava's SmoothWarmingUp over nanoseconds. A = the time the
// next request may be admitted (nextFreeTicket), F = maxPermits minus stored
// permits, so that the zero state is a cold key with every permit stored.
func (p *Policy) warmingBucket(s *Step, now, cost int64) {
	st := &s.Next
	stable := float64(p.Window) / float64(p.Limit)
	warm := float64(p.Warmup)
	maxP := warm / stable
	threshold := 0.5 * warm / stable
	slope := (coldFactor*stable - stable) / (maxP - threshold)
	// Stored permits refill at maxP per warmup: one per stable interval.
	stored := maxP - st.F
	nextFree := st.A
	if now > nextFree {
		stored = math.Min(maxP, stored+float64(now-nextFree)/stable)
		nextFree = now
	}
	untilWhole := func(nextFree int64, stored float64) int64 {
		return nextFree + int64(math.Ceil((maxP-stored)*stable))
	}
	if nextFree > now {
		u := untilWhole(nextFree, stored)
		s.Decision = sluice.Decision{
			Limit: p.Limit, Remaining: 0, ResetAfter: time.Duration(u - now), RetryAfter: time.Duration(nextFree - now),
		}
		s.Until = u
		return
	}
	// Admitted now; the cost of this request delays the next one.
	spend := math.Min(float64(cost), stored)
	fresh := float64(cost) - spend
	var wait float64
	if above := stored - threshold; above > 0 {
		take := math.Min(above, spend)
		toTime := func(permits float64) float64 { return stable + permits*slope }
		wait = take * (toTime(above) + toTime(above-take)) / 2
		wait += stable * (spend - take)
	} else {
		wait = stable * spend
	}
	wait += fresh * stable
	nextFree += int64(math.Ceil(wait))
	stored -= spend
	st.A, st.F = nextFree, maxP-stored
	u := untilWhole(nextFree, stored)
	remaining := int64(0)
	if nextFree <= now {
		remaining = int64(math.Floor(stored))
	}
	s.Decision = sluice.Decision{
		Allowed: true, Limit: p.Limit, Remaining: min(remaining, p.Limit), ResetAfter: time.Duration(u - now),
	}
	s.Until = u
}

// leakyBucket is nginx limit_req: A = the time the last admitted request is
// scheduled to leave the bucket. A request arriving at now leaves at
// max(now, A+T); it is admitted if it would wait at most B*T.
func (p *Policy) leakyBucket(s *Step, now, cost int64) {
	t := p.interval()
	room := p.Burst * t
	a := s.Next.A
	// wait is how long a unit request arriving at now would be held.
	wait := func(last int64) int64 { return max(0, last+t-now) }
	remaining := func(last int64) int64 {
		if w := wait(last); w <= room {
			return (room-w)/t + 1
		}
		return 0
	}
	ttl := max(0, a+t-now)
	if cost > p.Burst+1 {
		s.never(now, remaining(a), ttl)
		return
	}
	if cost == 0 {
		s.Decision = sluice.Decision{Allowed: true, Remaining: remaining(a), ResetAfter: time.Duration(ttl)}
		s.Until = now + ttl
		return
	}
	start := max(now, a+t)
	last := start + (cost-1)*t
	if last-now > room {
		s.Decision = sluice.Decision{
			Remaining: remaining(a), ResetAfter: time.Duration(ttl), RetryAfter: time.Duration(last - now - room),
		}
		s.Until = now + ttl
		return
	}
	s.Next.A = last
	delay := start - now
	if p.NoDelay {
		delay = 0
	}
	s.Decision = sluice.Decision{
		Allowed: true, Remaining: remaining(last), ResetAfter: time.Duration(last + t - now), Delay: time.Duration(delay),
	}
	s.Until = last + t
}

// semaphore is Resilience4j's AtomicRateLimiter on epoch-aligned periods:
// A = the period index, B = permits taken in it, which may exceed Limit when
// callers reserved permits of coming periods.
func (p *Policy) semaphore(s *Step, now, cost int64) {
	st := &s.Next
	w := int64(p.Window)
	cycle := now / w
	used := st.B
	if gone := cycle - st.A; gone > 0 {
		if gone > used/p.Limit {
			used = 0
		} else {
			used -= gone * p.Limit
		}
	}
	if used < 0 {
		used = 0
	}
	// resetAt(u) is when u permits taken are paid off.
	resetAt := func(u int64) int64 {
		if u == 0 {
			return now
		}
		return (cycle + (u+p.Limit-1)/p.Limit) * w
	}
	if cost > p.Limit {
		s.never(now, max(0, p.Limit-used), resetAt(used)-now)
		return
	}
	// The request takes all its permits from one period, the first with room
	// (period cycle+k), so that no period admits more than Limit. Resilience4j
	// lets a multi-permit request split across periods; for a cost of 1 the
	// two agree.
	k, filled := used/p.Limit, used%p.Limit
	after := used + cost
	if filled+cost > p.Limit {
		k++
		after = k*p.Limit + cost
	}
	var wait int64
	if k > 0 {
		wait = (cycle+k)*w - now
	}
	if wait <= int64(p.Timeout) {
		st.A, st.B = cycle, after
		s.Decision = sluice.Decision{
			Allowed: true, Remaining: max(0, p.Limit-after), ResetAfter: time.Duration(resetAt(after) - now), Delay: time.Duration(wait),
		}
		s.Until = resetAt(after)
		return
	}
	s.Decision = sluice.Decision{
		Remaining: max(0, p.Limit-used), ResetAfter: time.Duration(resetAt(used) - now), RetryAfter: time.Duration(wait),
	}
	s.Until = resetAt(used)
}

// concurrency counts requests in flight in InFlight; Permits give them back.
// B is the requests in flight elsewhere in a fleet (see Absorb); they count
// against the limit too.
func (p *Policy) concurrency(s *Step, now, cost int64) {
	busy := s.Next.InFlight + s.Next.B
	if cost > p.Limit {
		s.never(now, max(0, p.Limit-busy), 0)
		return
	}
	s.Until = now
	if busy+cost <= p.Limit {
		s.Next.InFlight += cost
		s.Decision = sluice.Decision{Allowed: true, Remaining: p.Limit - busy - cost}
		return
	}
	// When a slot frees is unknown; a second is the conventional hint.
	s.Decision = sluice.Decision{
		Remaining: max(0, p.Limit-busy), RetryAfter: time.Second, Reason: sluice.ReasonConcurrency,
	}
}

// Undo gives back, as far as the state still allows, what a request of cost
// committed at time at consumed. It is used when an admitted request is
// abandoned before it was forwarded (its Delay was cancelled), and by stores
// that must refund one part of a request another part denied. Concurrency is
// given back by its Permit, not here.
func (p *Policy) Undo(st *KeyState, at, cost int64) {
	if cost <= 0 {
		return
	}
	switch p.Algorithm {
	case FixedWindow:
		if st.A == windowStart(at, int64(p.Window)) {
			st.B = max(0, st.B-cost)
		}
	case SlidingWindow:
		w := int64(p.Window)
		switch windowStart(at, w) {
		case st.A:
			st.B = max(0, st.B-cost)
		case st.A - w:
			st.C = max(0, st.C-cost)
		}
	case SlidingLog:
		if st.Log != nil {
			st.Log.Remove(at, cost)
		}
	case TokenBucket:
		if p.Warmup > 0 {
			st.F = max(0, st.F-float64(cost))
			return
		}
		st.A -= cost * p.interval()
	case GCRA, LeakyBucket:
		st.A -= cost * p.interval()
	case Semaphore:
		if st.A == at/int64(p.Window) {
			st.B = max(0, st.B-cost)
		}
	}
}

// SharesState reports whether a key's state under p means the same under q,
// so that a store keeps it when a key's policy changes from p to q: the two
// differ at most in Limit and Burst. A new limit then applies to the usage
// recorded so far (a lower limit is not a fresh quota, a higher one only
// adds room), as Envoy's ratelimit keeps its counters when a limit changes.
// Any other change (algorithm, window, warm-up, flags, intervals) starts the
// key afresh.
func (p *Policy) SharesState(q *Policy) bool {
	a, b := *p, *q
	a.Limit, a.Burst, b.Limit, b.Burst = 0, 0, 0, 0
	return a == b
}

// Absorb records into *st a cost consumed elsewhere (by another sidecar of
// the fleet) at time at, Unix nanoseconds, no later than the state's now.
// It never denies: the usage has happened, so the state may go past its
// limit and deny here until it recovers. A negative cost gives usage back
// (Undo at at). For Concurrency the cost is a change of the requests in
// flight elsewhere, kept apart from InFlight (this store's permits) in B.
// Usage older than what the state tracks (a window that has passed) is
// dropped. It returns when the state is whole again, as Step.Until.
func (p *Policy) Absorb(st *KeyState, at, cost int64) int64 {
	if p.Algorithm == Concurrency {
		st.B = max(0, st.B+cost)
		return at
	}
	if cost < 0 {
		p.Undo(st, at, -cost)
		return st.Last
	}
	if p.Limit == 0 || cost == 0 {
		return st.Last
	}
	if at > st.Last {
		st.Last = at
	}
	switch p.Algorithm {
	case FixedWindow:
		w := int64(p.Window)
		switch win := windowStart(at, w); {
		case win == st.A:
			st.B += cost
		case win > st.A:
			st.A, st.B = win, cost
		}
		return st.A + w
	case SlidingWindow:
		w := int64(p.Window)
		switch win := windowStart(at, w); {
		case win == st.A:
			st.B += cost
		case win == st.A-w:
			st.C += cost
		case win == st.A+w:
			st.A, st.B, st.C = win, cost, st.B
		case win > st.A:
			st.A, st.B, st.C = win, cost, 0
		}
		return st.A + 2*w
	case SlidingLog:
		if st.Log == nil {
			st.Log = &TimeLog{}
		}
		// The log is kept in order: usage reported late is logged at the
		// newest time held, which makes it expire a little late (the safe
		// side).
		t := at
		if n, ok := st.Log.Newest(); ok && n > t {
			t = n
		}
		st.Log.Push(t, cost, p.Limit)
		return t + max(int64(p.Window), int64(p.MinInterval))
	case TokenBucket:
		if p.Warmup > 0 {
			// As if admitted at the first moment the bucket would have
			// admitted it: the warm-up's cost applies as here.
			s := Step{Next: *st}
			p.warmingBucket(&s, max(at, st.A), cost)
			last := st.Last
			*st = s.Next
			st.Last = last
			return s.Until
		}
		st.A = max(st.A, at) + cost*p.interval()
		return st.A
	case GCRA:
		st.A = max(st.A, at) + cost*p.interval()
		return st.A
	case LeakyBucket:
		t := p.interval()
		st.A = max(st.A, at-t) + cost*t
		return st.A + t
	case Semaphore:
		w := int64(p.Window)
		cycle := at / w
		switch {
		case cycle == st.A:
			st.B += cost
		case cycle > st.A:
			// Permits taken ahead in the periods that have passed are paid.
			used := st.B - (cycle-st.A)*p.Limit
			st.A, st.B = cycle, max(0, used)+cost
		default:
			return st.Last
		}
		return (st.A + (st.B+p.Limit-1)/p.Limit) * w
	}
	return st.Last
}
