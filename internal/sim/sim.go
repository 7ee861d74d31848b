// Package sim simulates a service under open-loop or closed-loop load, with
// or without a concurrency limiter in front, on virtual time: no HTTP, no
// sleeping, and the same seed gives the same run. It is how sluice's
// adaptive limits are tested and compared.
//
// The model. Requests arrive open-loop (Poisson, at a rate that may change
// over time), or from a closed loop of Clients that each send again as soon
// as answered (wrk, hey: a benchmark's clients). The limiter admits or
// rejects each; in a closed loop a request over the limit waits in the
// sidecar's queue, first come first served, for MaxWait at most, and its
// client sends again once it is refused. The backend serves Slots
// requests at once, each for a lognormal service time around ServiceTime;
// requests past its capacity queue inside it, first come first served, so
// its latency grows when it is overloaded. A client waits Deadline at most:
// then it leaves, and the limiter's permit is released as Dropped, but the
// backend, which does not know, still does the work when the request's turn
// comes (as most services do). Goodput counts requests completed within
// their deadline. Optionally the service slows as work queues in it
// (Degrade: contention), and the service and the sidecar share one CPU
// (CPU: processor sharing, with the sidecar's CPU per forwarded request,
// per refusal and per hand-off from its queue).
package sim

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/sluicehq/sluice"
)

// Limiter is what the simulation puts in front of the backend.
type Limiter interface {
	// TryAcquire admits a request or refuses it, without blocking.
	TryAcquire() (sluice.Permit, bool)
}

// Scenario is one simulated run.
type Scenario struct {
	// Duration is the simulated time.
	Duration time.Duration
	// Rate is the offered load, requests per second, at virtual time t.
	Rate func(t time.Duration) float64
	// Slots is the backend's concurrency at time t.
	Slots func(t time.Duration) int
	// ServiceTime is the mean service time without queueing (L), so that the
	// backend's capacity is Slots/ServiceTime requests per second.
	ServiceTime time.Duration
	// ServiceTimeAt, when set, is the mean service time of a request that
	// starts service at time t (the service getting slower or faster);
	// ServiceTime is then only the nominal one.
	ServiceTimeAt func(t time.Duration) time.Duration
	// HangFrom and HangUntil, when HangUntil > HangFrom, stop the backend:
	// nothing in it finishes during [HangFrom, HangUntil), work resumes
	// where it stopped afterwards.
	HangFrom, HangUntil time.Duration
	// Sigma is the lognormal shape of service times; default 0.25.
	Sigma float64
	// SlowShare is the share of requests whose mean service time is
	// SlowFactor times the rest's (a bimodal service), as
	// loadtest/backend.Model's; 0: none.
	SlowShare, SlowFactor float64
	// MaxQueue, when > 0, makes the backend fail fast: a request that
	// arrives while MaxQueue wait inside it is answered with an error at
	// once (Second.Failed; the proxy releases it as Dropped).
	MaxQueue int
	// Degrade slows service by this fraction per request queued inside
	// the backend per slot, at most 4x (contention: locks, GC, thrashing),
	// as loadtest/backend.Model.Degrade does: a request starts its service
	// with a mean of ServiceTime x (1 + min(3, Degrade x queued / slots)).
	Degrade float64
	// Deadline is how long a client waits; default 1 s.
	Deadline time.Duration
	// Seed makes the run reproducible.
	Seed uint64
	// Leave is what the proxy reports when a client leaves at its
	// deadline; default LeaveDropped.
	Leave Leave
	// Clients, when > 0, makes the load a closed loop of that many clients
	// (Rate is then not read): each sends at start, and again as soon as
	// its answer comes or it gives up at Deadline; a refused one sends
	// again after a millisecond (its 503's round trip).
	Clients int
	// MaxWait is, in a closed loop, the longest a request waits in the
	// sidecar's queue for the limiter to admit it; default 500 ms (the
	// queue's own default).
	MaxWait time.Duration
	// CPU, when set, makes the service and the sidecar share one CPU
	// (see CPU); the hang (HangFrom, HangUntil) is not modelled with it.
	CPU *CPU
	// SleepClock makes the run advance the process's clock with time.Sleep
	// to each event's time, for limiters that read time.Now themselves.
	// Only sensible inside a testing/synctest bubble, whose clock is fake.
	SleepClock bool
}

// Leave is how a proxy in front of the backend sees a client leave.
type Leave int

const (
	// LeaveDropped: the proxy times the request out with the client and
	// releases its permit as Dropped.
	LeaveDropped Leave = iota
	// LeaveIgnored: the proxy sees the client go (net/http's engine, whose
	// request context ends) and releases the permit as Ignore.
	LeaveIgnored
	// LeaveUnnoticed: the proxy does not see the client go (the fast
	// engine waits for the upstream's answer): the permit is held until
	// the backend finishes and released as Success with the whole latency.
	LeaveUnnoticed
)

// Second is what one second of virtual time saw.
type Second struct {
	Offered, Admitted, Rejected, Good, Late int
	// Failed counts admitted requests the backend failed at once
	// (Scenario.MaxQueue).
	Failed int
	// Limit is the limiter's limit at the end of the second (0 without one).
	Limit int
	// InSystem is the most requests inside the backend (served + queued).
	InSystem int
	// P50 and P99 are latencies of requests that completed in this second.
	P50, P99 time.Duration
}

// Report is the outcome of a run.
type Report struct {
	Seconds []Second
	// completions of admitted requests within their deadline, in time order.
	completions []completion
}

// Window sums the seconds in [from, to).
func (r *Report) Window(from, to time.Duration) Second {
	var s Second
	for i := int(from / time.Second); i < int(to/time.Second) && i < len(r.Seconds); i++ {
		x := r.Seconds[i]
		s.Offered += x.Offered
		s.Admitted += x.Admitted
		s.Rejected += x.Rejected
		s.Good += x.Good
		s.Late += x.Late
		s.Failed += x.Failed
		s.InSystem = max(s.InSystem, x.InSystem)
		s.Limit = x.Limit
	}
	return s
}

// Percentile returns the p-th latency (0..1) of admitted requests that
// completed in [from, to).
func (r *Report) Percentile(p float64, from, to time.Duration) time.Duration {
	lo := sort.Search(len(r.completions), func(i int) bool { return r.completions[i].at >= from })
	hi := sort.Search(len(r.completions), func(i int) bool { return r.completions[i].at >= to })
	xs := make([]time.Duration, 0, hi-lo)
	for _, c := range r.completions[lo:hi] {
		xs = append(xs, c.latency)
	}
	if len(xs) == 0 {
		return 0
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	return xs[min(len(xs)-1, int(p*float64(len(xs))))]
}

type completion struct {
	at, latency time.Duration
}

// event kinds
const (
	evArrival = iota
	evFinish
	evDeadline
	evSend    // a closed-loop client sends
	evWaitOut // a request waiting in the sidecar's queue is refused
	evCPU     // the shared CPU's next job may have ended (gen says which schedule)
	evFailed  // the backend failed an admitted request at once (MaxQueue)
)

// refusedRTT is how soon a closed-loop client whose request was refused
// sends again.
const refusedRTT = time.Millisecond

type event struct {
	at   time.Duration
	kind int
	req  *request
	seq  uint64
	gen  uint64 // evCPU: the shared CPU's schedule it was pushed for
}

type request struct {
	arrived  time.Duration
	permit   sluice.Permit
	released bool
	service  time.Duration
	waiting  bool // in the sidecar's queue (closed loops)
	done     bool // its client has moved on (answered, refused or gone)
}

type events []*event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// Run simulates sc with newLimiter's limiter in front of the backend (nil:
// no limiter). newLimiter receives the virtual clock the limiter must read.
// limitOf, when not nil, reads the limiter's current limit for the report.
func Run(sc Scenario, newLimiter func(clock sluice.Clock) Limiter, limitOf func() int) *Report {
	if sc.Sigma == 0 {
		sc.Sigma = 0.25
	}
	if sc.Deadline == 0 {
		sc.Deadline = time.Second
	}
	if sc.MaxWait == 0 {
		sc.MaxWait = 500 * time.Millisecond
	}
	epoch := time.Unix(1_699_920_000, 0)
	clock := sluice.NewFakeClock(epoch)
	var lim Limiter
	if newLimiter != nil {
		lim = newLimiter(clock)
	}
	rng := rand.New(rand.NewPCG(sc.Seed, sc.Seed^0x9e3779b97f4a7c15))
	rep := &Report{Seconds: make([]Second, int(sc.Duration/time.Second)+1)}
	var q events
	var seq uint64
	push := func(at time.Duration, kind int, r *request) {
		seq++
		heap.Push(&q, &event{at: at, kind: kind, req: r, seq: seq})
	}
	nextArrival := func(now time.Duration) time.Duration {
		rate := sc.Rate(now)
		if rate <= 0 {
			return now + 10*time.Millisecond // idle: look again shortly
		}
		return now + time.Duration(rng.ExpFloat64()/rate*float64(time.Second))
	}
	// Lognormal with mean ServiceTime: median L*exp(-sigma^2/2).
	serviceTime := func(now time.Duration, queued int) time.Duration {
		mean := float64(sc.ServiceTime)
		if sc.ServiceTimeAt != nil {
			mean = float64(sc.ServiceTimeAt(now))
		}
		if sc.Degrade > 0 {
			mean *= 1 + min(3, sc.Degrade*float64(queued)/float64(max(1, sc.Slots(now))))
		}
		if sc.SlowShare > 0 && rng.Float64() < sc.SlowShare {
			mean *= max(1, sc.SlowFactor)
		}
		median := mean * math.Exp(-sc.Sigma*sc.Sigma/2)
		return time.Duration(median * math.Exp(sc.Sigma*rng.NormFloat64()))
	}
	// finish is when work of d started at now ends, the hang paused.
	finish := func(now, d time.Duration) time.Duration {
		end := now + d
		if sc.HangUntil > sc.HangFrom && end > sc.HangFrom && now < sc.HangUntil {
			end += sc.HangUntil - max(now, sc.HangFrom)
		}
		return end
	}
	busy := 0
	var backlog []*request // queued inside the backend
	var cpu sharedCPU
	// schedule pushes the shared CPU's next end, superseding the last.
	schedule := func() {
		cpu.gen++
		if at, ok := cpu.next(); ok {
			seq++
			heap.Push(&q, &event{at: at, kind: evCPU, seq: seq, gen: cpu.gen})
		}
	}
	// onCPU puts work w on the shared CPU at now, for r (nil: the sidecar's).
	onCPU := func(now, w time.Duration, r *request) {
		cpu.add(now, w, r)
		schedule()
	}
	start := func(now time.Duration, r *request) {
		busy++
		r.service = serviceTime(now, len(backlog))
		if sc.CPU != nil {
			onCPU(now, r.service+sc.CPU.Admit, r)
			return
		}
		push(finish(now, r.service), evFinish, r)
	}
	// refused books the sidecar's CPU for a refusal.
	refused := func(now time.Duration) {
		if sc.CPU != nil && sc.CPU.Refuse > 0 {
			onCPU(now, sc.CPU.Refuse, nil)
		}
	}
	sec := func(t time.Duration) *Second { return &rep.Seconds[min(int(t/time.Second), len(rep.Seconds)-1)] }
	var waiting []*request // the sidecar's queue (closed loops)
	// admit sends r, admitted, to the backend.
	admit := func(now time.Duration, r *request) {
		sec(now).Admitted++
		if sc.MaxQueue > 0 && busy >= sc.Slots(now) && len(backlog) >= sc.MaxQueue {
			push(now, evFailed, r) // its error answer, at once
			return
		}
		push(r.arrived+sc.Deadline, evDeadline, r)
		if busy < sc.Slots(now) {
			start(now, r)
		} else {
			backlog = append(backlog, r)
		}
		sec(now).InSystem = max(sec(now).InSystem, busy+len(backlog))
	}
	// drain admits the sidecar's waiters while the limiter lets it.
	drain := func(now time.Duration) {
		for len(waiting) > 0 {
			r := waiting[0]
			if !r.waiting {
				waiting = waiting[1:]
				continue
			}
			p, ok := lim.TryAcquire()
			if !ok {
				return
			}
			waiting = waiting[1:]
			r.waiting, r.permit = false, p
			if sc.CPU != nil && sc.CPU.Handoff > 0 {
				onCPU(now, sc.CPU.Handoff, nil)
			}
			admit(now, r)
		}
	}
	release := func(now time.Duration, r *request, o sluice.Outcome) {
		if !r.released && r.permit != nil {
			r.released = true
			r.permit.Release(o)
			if sc.Clients > 0 {
				drain(now)
			}
		}
	}
	// moveOn ends r for its client, which sends again after d.
	moveOn := func(now time.Duration, r *request, d time.Duration) {
		if sc.Clients > 0 && !r.done {
			r.done = true
			push(now+d, evSend, nil)
		}
	}
	// finished ends r's service at now: its answer, then the backlog's next.
	finished := func(now time.Duration, r *request) {
		busy--
		s := sec(now)
		lat := now - r.arrived
		if lat <= sc.Deadline {
			s.Good++
			rep.completions = append(rep.completions, completion{at: now, latency: lat})
			release(now, r, sluice.Success)
			moveOn(now, r, 0)
		} else {
			s.Late++
			if sc.Leave == LeaveUnnoticed {
				release(now, r, sluice.Success)
			}
		}
		for len(backlog) > 0 && busy < sc.Slots(now) {
			next := backlog[0]
			backlog = backlog[1:]
			start(now, next)
		}
	}
	var done []*request
	if sc.Clients > 0 {
		for range sc.Clients {
			push(0, evSend, nil)
		}
	} else {
		push(nextArrival(0), evArrival, nil)
	}
	for q.Len() > 0 {
		ev := heap.Pop(&q).(*event)
		now := ev.at
		if now > sc.Duration {
			break
		}
		if sc.SleepClock {
			if d := epoch.Add(now).Sub(clock.Now()); d > 0 {
				time.Sleep(d)
			}
		}
		clock.Set(epoch.Add(now))
		s := sec(now)
		switch ev.kind {
		case evSend:
			s.Offered++
			r := &request{arrived: now}
			if lim == nil {
				admit(now, r)
				break
			}
			if len(waiting) == 0 { // else not ahead of those waiting
				if p, ok := lim.TryAcquire(); ok {
					r.permit = p
					admit(now, r)
					break
				}
			}
			r.waiting = true
			waiting = append(waiting, r)
			push(now+min(sc.MaxWait, sc.Deadline), evWaitOut, r)
		case evWaitOut:
			if r := ev.req; r.waiting {
				r.waiting = false
				s.Rejected++
				refused(now)
				moveOn(now, r, refusedRTT)
			}
		case evArrival:
			push(nextArrival(now), evArrival, nil)
			if sc.Rate(now) <= 0 {
				continue
			}
			s.Offered++
			r := &request{arrived: now}
			if lim != nil {
				p, ok := lim.TryAcquire()
				if !ok {
					s.Rejected++
					refused(now)
					continue
				}
				r.permit = p
			}
			admit(now, r)
		case evCPU:
			if ev.gen != cpu.gen {
				break // superseded by a later schedule
			}
			done = cpu.ended(now, done[:0])
			for _, r := range done {
				finished(now, r)
			}
			schedule()
		case evFinish:
			finished(now, ev.req)
		case evFailed:
			s.Failed++
			release(now, ev.req, sluice.Dropped)
			moveOn(now, ev.req, refusedRTT)
		case evDeadline:
			// The client leaves; the proxy sees a timeout. The backend still
			// holds the request.
			switch sc.Leave {
			case LeaveDropped:
				release(now, ev.req, sluice.Dropped)
			case LeaveIgnored:
				release(now, ev.req, sluice.Ignore)
			}
			moveOn(now, ev.req, 0)
		}
		if limitOf != nil {
			s.Limit = limitOf()
		}
	}
	for i := range rep.Seconds {
		from, to := time.Duration(i)*time.Second, time.Duration(i+1)*time.Second
		rep.Seconds[i].P50 = rep.Percentile(0.5, from, to)
		rep.Seconds[i].P99 = rep.Percentile(0.99, from, to)
	}
	return rep
}
