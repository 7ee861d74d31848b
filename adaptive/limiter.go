// Package adaptive holds sluice's adaptive concurrency limit, in the style of
// Netflix concurrency-limits: a Limiter admits requests while fewer than its
// limit are in flight, measures how each ends, and lets an Algorithm (AIMD,
// Vegas, Gradient2, Fixed) move the limit at the end of each sample window.
//
// Design. Admission is one compare-and-swap on an in-flight counter against
// the current limit, so no more than the limit is ever admitted, without a
// lock. A release adds its round-trip time to the window's atomic sums; the
// release that finds the window complete closes it (one wins a CAS), computes
// the sample and the new limit under a mutex that no admission ever takes.
// Permits come from a pool and carry a generation, so that a second release
// of the same permit is detected and ignored without allocating.
//
// The package knows nothing of HTTP or Prometheus; Stats returns a snapshot.
package adaptive

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Config configures a Limiter. Zero fields take the documented defaults.
type Config struct {
	// Algorithm moves the limit. Required.
	Algorithm Algorithm
	// InitialLimit is the limit at start; default 20.
	InitialLimit int
	// MinLimit and MaxLimit bound the limit; defaults 1 and 1000.
	MinLimit, MaxLimit int
	// Window is the shortest sample window; default 100 ms. A window closes
	// once it is this old and holds MinSamples outcomes (or any drop); the
	// first one also as soon as it holds MinSamples, when the first
	// requests showed a deep queue (firstProbe.checkQueue).
	Window time.Duration
	// MinSamples is the fewest outcomes a window needs; default 10. A window
	// that has seen no outcome after 10 Windows is discarded; one that has
	// seen some goes on gathering (a slow service ends few requests a
	// second) and closes with at least 3 after 100 Windows.
	MinSamples int
	// Percentile, in (0, 1), is the percentile of a window's successes that
	// is its RTT; default 0.5 (the median: a heavy tail does not move it,
	// queueing does).
	Percentile float64
	// ProbeInterval is how long the limiter runs saturated before it
	// re-measures the service's RTT without queueing; default 2 s. See
	// Limiter.
	ProbeInterval time.Duration
	// Recovery is the factor by which the limit grows per healthy window
	// while it is below where it was before the last decrease (slow start
	// after an overload); default 1.5. 1 disables it.
	Recovery float64
	// SelfDelay, when set, reports how long the caller's own process kept
	// ready work waiting for a CPU, on average, since the previous call (a
	// SchedDelay's Mean). The limiter calls it as each window closes and
	// takes it out of the window's RTT, so that a proxy short of CPU (one
	// core shared with its service, more clients than it can serve) is not
	// read as a queue in the service it times. Set it only where the
	// service runs apart from the caller (a sidecar, a gateway): in a
	// middleware the service's own work waits for the same CPU, and that
	// wait is its queue. A probe's median of the no-load RTT keeps the
	// wait in (at the probe's lower concurrency it is smaller, and an
	// estimate from other windows would over-correct it): the baseline errs
	// high, towards fewer cuts. Nil: none taken out.
	SelfDelay func() time.Duration
	// Clock reads the time; default the system clock.
	Clock sluice.Clock
}

// SetDefaults fills the zero fields of c.
func (c *Config) SetDefaults() {
	if c.InitialLimit <= 0 {
		c.InitialLimit = 20
	}
	if c.MinLimit <= 0 {
		c.MinLimit = 1
	}
	if c.MaxLimit <= 0 {
		c.MaxLimit = 1000
	}
	if c.Window <= 0 {
		c.Window = 100 * time.Millisecond
	}
	if c.MinSamples <= 0 {
		c.MinSamples = 10
	}
	if c.Recovery == 0 {
		c.Recovery = 1.5
	}
	if c.Percentile == 0 {
		c.Percentile = 0.5
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 2 * time.Second
	}
	if c.Clock == nil {
		c.Clock = sluice.NewSystemClock()
	}
}

// Validate reports the first problem with c (after SetDefaults).
func (c *Config) Validate() error {
	switch {
	case c.Algorithm == nil:
		return errors.New("algorithm: required")
	case c.MinLimit > c.MaxLimit:
		return errors.New("min_limit: above max_limit")
	case c.InitialLimit < c.MinLimit || c.InitialLimit > c.MaxLimit:
		return errors.New("initial_limit: outside [min_limit, max_limit]")
	case c.Percentile <= 0 || c.Percentile >= 1:
		return errors.New("percentile: must be in (0, 1)")
	case c.Recovery < 1:
		return errors.New("recovery: must be at least 1")
	}
	return nil
}

// Limiter is an adaptive concurrency limit. It is safe for concurrent use.
//
// How it tells "the service got slower" from "requests queue in it". A
// window's RTT is the median of its successes (a heavy tail does not move
// it; a queue, which delays every request, does). The algorithm compares it
// with the no-load RTT, the baseline, and the baseline is only ever
// measured where no queue can be: in windows that used at most half the
// limit (the load left room), and in probes. When the limiter has run
// saturated for ProbeInterval (twice as long after each probe that found
// nothing new, up to 8 times), or its algorithm has cut the limit by a
// quarter in three windows or more in a row on latency alone, it probes: for
// a moment the limit is lowered so that the requests admitted meanwhile find
// the service without a queue, and the median of the first of them (2 x
// MinSamples, or, where the latest window's RTTs were alike, one round of
// the probe's limit, at least MinSamples; all of them, the first to end
// being the fastest, though the probe ends once those still in flight can
// no longer move the median) is the new baseline; then the limit is restored. When the load fits under the limit
// (nothing refused), no probe is due. A probe runs just under the
// concurrency at which the previous one saw the queue begin (the knee), at
// most 3/4 of the limit; if the RTT at the limit is as many times above the
// probe's as a queue down to the probe's concurrency would make it, the probe
// may have queued too and goes on at half the limit (the first probe, with
// nothing known, starts there). Queueing shows as an RTT above the baseline
// at the same concurrency; a slower service shows as a higher baseline below
// the knee, and a probe that finds the service as slow there as at the
// whole limit undoes the cuts that read it as a queue. When three probes in
// a row each found the service slower (by 10% in all), it is creeping: until
// the next probe the baseline follows the creep at the pace they measured
// (for at most the time they spanned and 30% up), so that a service slowing
// down steadily is not cut as if queueing between probes. No request is
// refused to probe: those over the lowered limit wait (in a queue.Queue) for
// a few of the service's RTTs.
//
// A stall (requests in flight, none ending for 8 baselines and at least two
// windows, or for a second before a baseline is known) cuts the limit to
// MinLimit at once: the requests already sent into it wait, and at most
// MinLimit more join them. Those already in flight at the first stall since
// the service last answered are stuck: still counted in flight, each freeing
// its place when it ends, but no longer against the limit (in flight never
// exceeds MaxLimit, though), so that a service that recovers while they
// hang, or loses them, gets new requests at once instead of after their
// timeouts. What ends after the stall from before it is not a sample.
//
// Before the first window is read, a start gate holds the first requests
// to twice the concurrency the service answered fast at, once the load
// outruns it or the first requests show a queue (firstProbe.ended): the
// initial limit sent at once into a few slow slots would queue there past
// its clients' timeouts.
type Limiter struct {
	// cfg is a pointer, and the padding after it fixed, so that the hot
	// fields below keep offsets measured best on two cores whatever Config
	// holds (a Limiter is over 1 KB, which the allocator aligns to 64
	// bytes): a field added to Config once moved them across cache lines
	// and acquire+release took 30% longer (TestHotFieldsLayout).
	cfg *Config
	_   [24]byte

	// Read on every acquire and release, written rarely (at a window's
	// close, a stall, a probe): kept off the cache lines the counters
	// below write on every request, so that on several cores they stay
	// shared instead of bouncing with every write.
	limit      atomic.Int64
	winStart   atomic.Int64 // Unix ns; the current sample window's start
	winMin     atomic.Int64 // ns; 0 = none
	winMaxIn   atomic.Int64
	winAnsMax  atomic.Int64 // the highest concurrency a sample of the window was admitted at
	closing    atomic.Bool
	stallAt    atomic.Int64 // Unix ns of the latest stall: earlier starts are no samples
	stuck      atomic.Int64 // requests in flight since before the latest stall: not counted against the limit
	stallAfter atomic.Int64 // ns without an outcome that make a stall
	probing    atomic.Bool
	probeStart atomic.Int64 // Unix ns; while probing, later starts feed probeHist
	onRelease  atomic.Pointer[func()]
	leftAfter  atomic.Int64 // ns after which a client's leaving is a sample of the wait (4 baselines); 0: a second
	quickN     atomic.Int64 // while slow start doubles: the answers after which a window may close before its time (0: it may not)
	quickAge   atomic.Int64 // ns: the least age of such a window
	quickRTT   atomic.Int64 // ns: slow start's bound on a window's mean RTT for a burst to close it early (0: it may not)
	_          [24]byte

	// Written on every acquire or release.
	inflight                    atomic.Int64
	admitted, rejected, dropped atomic.Uint64
	winSum                      atomic.Int64 // ns of successes in the window
	winCount                    atomic.Int64 // successes
	winDrops                    atomic.Int64
	lastOutcome                 atomic.Int64 // Unix ns of the latest release with an outcome
	lastSuccess                 atomic.Int64 // Unix ns of the latest successful release (to the ms)
	_                           [64]byte

	winHist    rttHistogram
	probeHist  rttHistogram
	probeCount atomic.Int64 // samples in probeHist
	probeFirst atomic.Int64 // Unix ns the first of them ended
	probeDone  atomic.Int64 // requests ended by then (released())
	probeSent  atomic.Int64 // requests admitted during the probe
	probeAll   atomic.Int64 // Unix ns the last of the probe's samples was admitted; 0: not yet
	probeWant  atomic.Int64 // how many samples the probe measures (probeSamples)
	first      firstProbe   // the first requests, a probe at no cost
	permitPool sync.Pool

	rtt           atomic.Int64 // ns; the latest window's RTT (0: none yet); written when a window closes
	mu            sync.Mutex   // guards what follows; taken only to close a window or stall
	estimate      float64
	ssthresh      float64
	baseline      float64 // no-load RTT, ns; 0 until measured
	lastLowAt     int64   // when the baseline was last measured
	lastProbeAt   int64
	probeWindows  int
	fullRTT       float64        // the RTT of the window before a probe, at the whole limit
	stepRate      float64        // requests ended per ns at the previous step of a probe (the whole limit first); 0: unknown
	doneAt        int64          // released() at the latest window's close
	fullRate      float64        // requests ended per ns in windows that used the limit (a moving average); 0: none yet
	lastRate      float64        // requests ended per ns in the latest window
	lastIn        float64        // the most in flight in the latest window
	stepIn        float64        // the concurrency of the previous step of a probe
	stepRTT       float64        // the median RTT of the previous step of a probe, ns; 0: unknown
	stepRefused   uint64         // rejected as the current step of a probe began
	minRTT        float64        // the fastest success ever, ns: what no queue at all looks like; 0: none yet
	saturated     float64        // the lowest limit a probe found the service saturated at; 0: none
	guessed       bool           // the step before guessed a queue (see deeper)
	guessedOver   float64        // saturated before that guess
	probeFraction float64        // of the estimate, the limit during the current probe
	probeTol      float64        // the latest probe's noise against the baseline (probeTolerance)
	spread        float64        // the latest window's p90 / p10 (0: none yet)
	p90           float64        // the latest window's p90 RTT (ns)
	doubledAt     int64          // when slow start last doubled the limit (Unix ns; 0: never)
	steppedAt     int64          // when slow start last took a step: doubled, or the first requests' step (Unix ns)
	probeEndedAt  int64          // when the latest probe ended (Unix ns; 0: none yet)
	winFrom       int64          // when the window being closed began (Unix ns)
	recent        [3]probeResult // the latest probes' results, oldest first
	probeFrom     float64        // the estimate when the current probe began
	knee          float64        // the concurrency at which the last probe saw a queue begin; 0: unknown
	cuts          int            // windows in a row in which the algorithm lowered the limit
	beforeCuts    float64        // the limit before those cuts
	cutsFrom      int64          // when the first of those cuts came (Unix ns)
	roomAt        int64          // when a window last left the limit room (its load under half of it; Unix ns)
	queueCutAt    int64          // when the limit was last cut on latency (a queue formed), Unix ns
	quietUntil    int64          // no probe on doubt before this
	probeEvery    int64          // ns of saturation between probes: ProbeInterval, doubled while probes find nothing new
	counts        [histBuckets]uint32
	gp            goodput           // checks the algorithm's cuts against goodput
	closedLoop    func() bool       // SetClosedLoop's; nil: none
	waitingLoop   func() bool       // SetWaitingLoop's; nil: none
	onReason      func(Reason, int) // SetOnReason's; nil: none
	lastRejected  atomic.Uint64     // rejected at the last window's close (read without mu by the first requests' verdict)
	reason        Reason            // why the limit last moved
	lastSample    Sample
	windowsDone   uint64
	probes        uint64
	stalls        uint64
	// preStall is the estimate before the latest stall; stallOpen: no
	// request the stall held has ended with an outcome yet (the first to
	// end says whether the stall was a pause: see stallEnded).
	preStall  float64
	stallOpen atomic.Bool // written under mu; read first without it on release
	drops     dropCheck
}

// dropCheck tells overload from a service's background failures (a flaky
// dependency answering 503 whatever the load): a run of cuts on drops that
// takes the limit a quarter down without lowering the drops' share of the
// outcomes found no overload. Guarded by Limiter.mu.
type dropCheck struct {
	from  float64 // the estimate when the run of cuts began; 0: none running
	share float64 // the drops' moving-average share (avg) when it began
	// drops and total count the outcomes of the windows since, at the
	// lower limits the cuts set.
	drops, total int64
	windows      int
	// floor is the share of drops learned to be background: a window's
	// drops within chance of it are no overload; 0: none.
	floor float64
	// avg is the drops' share of the outcomes, a moving average over
	// about eight windows: what a run of cuts is judged against (one
	// window's share is noisy, and a run begins on a window with drops).
	avg float64
}

// Bounds of the drop check. A share over maxBackgroundShare is never taken
// for background (a service failing that often is overloaded or broken,
// and a cut is the safe answer); a run of cuts is judged once the limit is
// backgroundCut of where it began, or given up after maxCheckWindows.
const (
	maxBackgroundShare = 0.25
	backgroundCut      = 0.75
	maxCheckWindows    = 40
	keptShare          = 0.8
)

// overBackground returns the window's drops that may be overload: none
// when they are within chance of the learned background share. It also
// runs the check: when a run of cuts on drops has taken the limit a
// quarter down and the drops' share at the lower limits is still at least
// keptShare of their share before (and at most maxBackgroundShare), the
// share is background: the limit goes back where the run began. A service
// that fails the requests over a bound in flight (a queue bound) sheds that
// share at the lower limits: with at most a quarter of its outcomes over
// its bound, the bound is at least three quarters of the limit, and the
// share falls on the way there (to about half of it on average), so the
// cuts stand. Called with l.mu held.
func (l *Limiter) overBackground(count, drops int64) int64 {
	total := count + drops
	d := &l.drops
	if total <= 0 {
		return drops
	}
	share := float64(drops) / float64(total)
	if d.avg == 0 {
		d.avg = share
	} else {
		d.avg += (share - d.avg) / 8
	}
	if d.floor > 0 {
		if share < d.floor/2 {
			d.floor *= 0.9 // the background fades: the service mended
		}
		if expect := d.floor * float64(total); float64(drops) <= expect+2*math.Sqrt(expect)+1 {
			drops = 0
		}
	}
	switch {
	case d.from == 0:
		if drops > 0 && d.avg <= maxBackgroundShare {
			*d = dropCheck{from: l.estimate, share: d.avg, floor: d.floor, avg: d.avg}
		}
	case l.estimate >= d.from || d.windows >= maxCheckWindows:
		d.from = 0 // grown back, or given up: no verdict
	default:
		d.drops, d.total, d.windows = d.drops+drops, d.total+total, d.windows+1
		if l.estimate > backgroundCut*d.from || l.probing.Load() {
			break // not yet judged; a probe holds the limit meanwhile
		}
		if after := float64(d.drops) / float64(max(d.total, 1)); after >= keptShare*d.share && after <= maxBackgroundShare {
			d.floor = math.Max(d.floor, math.Min(after, d.share))
			l.restore(d.from, ReasonBackgroundDrops)
			drops = 0
		}
		d.from = 0
	}
	return drops
}

// New returns a Limiter. It returns an error when cfg does not validate.
func New(cfg Config) (*Limiter, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{cfg: &cfg, estimate: float64(cfg.InitialLimit)}
	l.limit.Store(int64(cfg.InitialLimit))
	now := sluice.UnixNano(cfg.Clock)
	l.winStart.Store(now)
	l.lastOutcome.Store(now)
	l.lastLowAt, l.lastProbeAt = now, now
	l.probeEvery = int64(cfg.ProbeInterval)
	l.stallAfter.Store(int64(time.Second))
	l.permitPool.New = func() any { return &slot{l: l} }
	l.gp = newGoodput(cfg.Window)
	l.first.want = min(2*cfg.MinSamples, firstMax)
	l.first.open.Store(true)
	l.first.gated.Store(true)
	return l, nil
}

// slot backs a Permit. gen changes at every release, so a stale Permit's
// release finds it different and does nothing.
type slot struct {
	l     *Limiter
	gen   atomic.Uint64
	start atomic.Int64
	part  *Partitioned // set when admitted through a partition
	probe bool         // one of the first requests admitted during a probe
	first int8         // its index among the limiter's first requests (firstProbe), or -1
	in    int32        // requests in flight when it was admitted, itself included, the stuck not
	class int
}

// Permit is an admission by a Limiter. Release it exactly once when the work
// ends; later releases are ignored. The zero Permit releases nothing. A Permit
// is a small value: copy it freely, but release only one copy.
type Permit struct {
	s   *slot
	gen uint64
}

var _ sluice.Permit = Permit{}

// Release ends the admitted work, reporting how it went: a Success adds its
// round-trip time to the sample window, a Dropped counts as overload, an
// Ignore only frees the slot.
func (p Permit) Release(o sluice.Outcome) { p.release(o, false, 0) }

// ReleaseAt is Release for work that ended at now, in Unix nanoseconds,
// read by the caller from the limiter's clock: a caller that reads the
// time anyway (for its own latency metric) spares the limiter a second
// reading. A now of 0 or less reads the clock.
func (p Permit) ReleaseAt(o sluice.Outcome, now int64) { p.release(o, false, now) }

// Free gives the slot back while the work goes on outside the limit: the
// service has answered with a stream (an upgraded connection, an event
// stream) that stays open for as long as its client wants, holds none of
// the service's capacity the limit measures, and would otherwise read as a
// hang. The answer counts as the service answering (no stall is read while
// streams are answered) but is no sample: the time to a stream's first
// byte is not the service's round trip. Release after Free does nothing.
func (p Permit) Free() { p.release(sluice.Success, true, 0) }

func (p Permit) release(o sluice.Outcome, free bool, now int64) {
	s := p.s
	if s == nil || !s.gen.CompareAndSwap(p.gen, p.gen+1) {
		return
	}
	l := s.l
	if now <= 0 {
		now = sluice.UnixNano(l.cfg.Clock)
	}
	start, probe, first, in := s.start.Load(), s.probe, s.first, int64(s.in)
	if s.part != nil {
		s.part.inflight[s.class].Add(-1)
		s.part = nil
	}
	l.permitPool.Put(s)
	beforeStall := start < l.stallAt.Load()
	if beforeStall {
		// One of the stuck ends (before the slot is freed, so that the
		// limit is never exceeded in between).
		for {
			v := l.stuck.Load()
			if v <= 0 || l.stuck.CompareAndSwap(v, v-1) {
				break
			}
		}
	}
	l.inflight.Add(-1)
	if beforeStall && o != sluice.Ignore {
		l.stallEnded(o)
	}
	if o != sluice.Ignore && now-l.lastOutcome.Load() > int64(time.Millisecond) {
		l.lastOutcome.Store(now) // a millisecond is fine enough for a stall
	}
	if o == sluice.Success && now-l.lastSuccess.Load() > int64(time.Millisecond) {
		l.lastSuccess.Store(now)
	}
	sampled := false
	switch {
	case beforeStall:
		// Sent before a stall: the stall was the signal; no sample.
	case free:
		// A stream: answered, but its time is no round trip.
	case o == sluice.Success && first >= 0 && l.first.read.Load():
		// One of the first requests, read with them (firstProbe).
	case o == sluice.Success:
		l.record(now-start, start, probe, in)
		sampled = true
	case o == sluice.Dropped:
		l.dropped.Add(1)
		l.winDrops.Add(1)
	case o == sluice.Ignore && now-start >= l.leftAfterNs():
		// The client left after waiting far longer than the service
		// answers: its wait is a sample (a lower bound of the RTT), which
		// would otherwise be lost exactly when the service queues.
		l.record(now-start, start, probe, in)
		sampled = true
	}
	if first >= 0 {
		rtt := int64(-1) // no sample: the first requests measure nothing
		if sampled {
			rtt = max(now-start, 0)
		}
		if l.first.ended(first, rtt, now, int64(l.admitted.Load()+l.rejected.Load())) {
			l.applyGate()
		}
		l.first.checkQueue(now, l.rejected.Load() > l.lastRejected.Load())
	}
	if f := l.onRelease.Load(); f != nil {
		(*f)()
	}
	l.maybeClose(now)
}

// Restart moves the start of the permit's round-trip time to now: work
// that was not the protected service's (a client's slow upload) is left out
// of the sample. It is safe to call from another goroutine than Release's;
// after Release it does nothing.
func (p Permit) Restart() {
	s := p.s
	if s == nil || s.gen.Load() != p.gen {
		return
	}
	s.start.Store(sluice.UnixNano(s.l.cfg.Clock))
	if s.first >= 0 {
		// Its RTT no longer runs from its admission, which the first
		// requests' probe bounds the unfinished by: it measures nothing.
		s.l.first.ended(s.first, -1, 0, 0)
	}
}

// TryAcquire admits a request if fewer than the limit are in flight. It never
// blocks. Use a queue.Queue in front of it to wait for room.
func (l *Limiter) TryAcquire() (Permit, bool) {
	lim := l.limit.Load()
	for {
		n := l.inflight.Load()
		if n-l.stuck.Load() >= lim || n >= int64(l.cfg.MaxLimit) {
			l.rejected.Add(1)
			l.checkStall()
			return Permit{}, false
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			l.noteInflight(n + 1)
			return l.admit(n + 1), true
		}
	}
}

// admit hands out a slot taken, in flight with it: at 1, nothing was in
// flight before it, and a stall is a time without outcomes while requests
// are in flight, so the idle time before it (a sidecar waiting for its
// first request) is none.
func (l *Limiter) admit(in int64) Permit {
	l.admitted.Add(1)
	s := l.permitPool.Get().(*slot)
	now := sluice.UnixNano(l.cfg.Clock)
	s.start.Store(now)
	s.first = l.first.admitted(in, now)
	s.in = int32(min(in-l.stuck.Load(), math.MaxInt32))
	if in == 1 {
		idle := now - l.lastOutcome.Load()
		l.lastOutcome.Store(now)
		if l.probing.Load() && idle >= l.stallAfter.Load() {
			l.idleProbe(now)
		}
	}
	s.probe = false
	if l.probing.Load() {
		n := l.probeSent.Add(1)
		s.probe = n <= l.probeSamples()
		if n == l.probeSamples() {
			l.probeAll.Store(now)
		}
	}
	return Permit{s: s, gen: s.gen.Load()}
}

func (l *Limiter) noteInflight(n int64) { storeMax(&l.winMaxIn, n) }

// storeMax raises a to v if v is higher: a load, and a compare-and-swap
// only when it raises it.
func storeMax(a *atomic.Int64, v int64) {
	for {
		m := a.Load()
		if v <= m || a.CompareAndSwap(m, v) {
			return
		}
	}
}

// SetClosedLoop registers f, which reports whether the demand over the
// limit is a closed loop (the wait queue holds clients that send again
// only once answered: queue.Queue.ClosedLoop). Such clients wait as long
// wherever they wait, so an up-probe keeps a higher limit that costs no
// goodput, rather than one that buys a share of the proportional gain (a
// lower limit only moves their wait from the service to the queue, and
// costs the handing over of every slot), and up-probes run without a
// revert or a gain seen first. f is called once per window, under the
// limiter's lock; it must not call the limiter.
func (l *Limiter) SetClosedLoop(f func() bool) {
	l.mu.Lock()
	l.closedLoop = f
	l.mu.Unlock()
}

// SetWaitingLoop registers f, which reports whether the demand over the
// limit is a closed loop that waits within the queue, nobody turned away
// (queue.Queue.WaitingLoop). Such a loop is judged as SetClosedLoop's
// only while it is served at minWaitingLoop or more a second: then the
// handing over of every slot costs a share of a CPU that a higher limit
// saves; below it, a higher limit saves nothing, and before a service that
// serves less with more in flight its up-probes, each within chance, would
// take the loop into the service. f is called under the limiter's lock; it
// must not call the limiter.
func (l *Limiter) SetWaitingLoop(f func() bool) {
	l.mu.Lock()
	l.waitingLoop = f
	l.mu.Unlock()
}

// minWaitingLoop is the least rate (answers a second) at which a waiting
// loop is judged as a closed loop (see SetWaitingLoop): a hand-over costs
// the sidecar 15-20 us of CPU here (wrk -c64 before a service that answers
// at once: 50 us a request with 60 waiting, 30 without), so at 2,000 a
// second 3-4% of a core, about the goodput's noise.
const minWaitingLoop = 2000

// isClosed reports whether the demand over the limit is a closed loop
// (SetClosedLoop, SetWaitingLoop) at rate, the answers per ns of the
// latest window. Under l.mu.
func (l *Limiter) isClosed(rate float64) bool {
	if l.closedLoop != nil && l.closedLoop() {
		return true
	}
	return l.waitingLoop != nil && rate*float64(time.Second) >= minWaitingLoop && l.waitingLoop()
}

// SetOnReason registers f to be called when the limit moves for another
// reason than it last did, with the reason and the new limit: a sidecar
// logs what users should know (ReasonBusy: sluice or its client, not the
// service, is short of CPU). f is called under the limiter's lock, once
// per window at most; it must not call the limiter.
func (l *Limiter) SetOnReason(f func(why Reason, limit int)) {
	l.mu.Lock()
	l.onReason = f
	l.mu.Unlock()
}

// SetOnRelease registers f to be called after every release, once the slot
// is free (a queue uses it to hand the slot to a waiter). f must not block.
func (l *Limiter) SetOnRelease(f func()) {
	if f == nil {
		l.onRelease.Store(nil)
		return
	}
	l.onRelease.Store(&f)
}

// record adds a sample: a request admitted at start, at concurrency in,
// whose RTT was rtt.
func (l *Limiter) record(rtt, start int64, probe bool, in int64) {
	if rtt < 0 {
		rtt = 0
	}
	l.winSum.Add(rtt)
	storeMax(&l.winAnsMax, in)
	l.winCount.Add(1)
	l.winHist.add(rtt)
	// A probe measures the first requests it admitted, all of them: the
	// first to end would be the fastest, and their median too low.
	if probe && l.probing.Load() && start >= l.probeStart.Load() {
		l.probeHist.add(rtt)
		c := l.probeCount.Add(1)
		if c == 1 {
			l.probeDone.Store(l.released())
			l.probeFirst.Store(start + rtt)
		}
		if c >= l.probeSamples() || l.probeMedianKnown(c, start+rtt) {
			l.endProbe()
		}
	}
	for {
		m := l.winMin.Load()
		if (m != 0 && rtt >= m) || l.winMin.CompareAndSwap(m, max(rtt, 1)) {
			break
		}
	}
}

// released returns how many admitted requests have ended.
func (l *Limiter) released() int64 { return int64(l.admitted.Load()) - l.inflight.Load() }

// leftAfterNs returns how long a request must have waited for its client's
// leaving to be a sample.
func (l *Limiter) leftAfterNs() int64 {
	if v := l.leftAfter.Load(); v > 0 {
		return v
	}
	return int64(time.Second)
}

// probeSamples is how many requests the current probe measures: 2 x
// MinSamples, or, where RTTs are alike, one round of its limit (those it
// admits at once), at least MinSamples. A second round at a low limit
// doubled the probe's length for a slow service (a second at 10 before
// 500 ms), and with it the wait of every request over the lowered limit.
func (l *Limiter) probeSamples() int64 { return l.probeWant.Load() }

// probeMedianKnown reports, as the c-th of the probe's samples ends at now,
// whether their percentile is known before the rest end: every sample was
// admitted by probeAll, so one still in flight has taken at least
// now-probeAll, and once the percentile's rank among all of them is
// reached by samples that ended faster than that, the rest cannot move
// it. A heavy tail's slowest sample (lognormal sigma 1: ten times the
// median among 20) then no longer holds the limit down for the probe.
func (l *Limiter) probeMedianKnown(c, now int64) bool {
	rank, all := probeRank(l.probeSamples(), l.cfg.Percentile), l.probeAll.Load()
	if all == 0 || c < rank {
		return false
	}
	i := l.probeHist.bucketOfRank(rank)
	return i >= 0 && i < bucketOf(now-all)
}

// probeRank is the rank of the q-quantile among n samples, as quantile
// reads it.
func probeRank(n int64, q float64) int64 { return int64(q*float64(n)) + 1 }

// rankKnown reports whether the q-quantile of total samples, of which
// counts holds those that ended, is among them and below bound, which the
// others have each outlasted. Whole buckets are compared, so that a value
// rounded to its bucket is never taken for one below bound. (While the
// probe runs, probeMedianKnown asks the same of the live histogram.)
func rankKnown(counts *[histBuckets]uint32, total int64, q float64, bound int64) bool {
	rank, seen := probeRank(total, q), int64(0)
	for i, c := range counts {
		if seen += int64(c); seen >= rank {
			return i < bucketOf(bound)
		}
	}
	return false
}

// checkStall, on a refusal, cuts the limit to MinLimit when requests are in
// flight and none has ended for stallAfter.
func (l *Limiter) checkStall() {
	now := sluice.UnixNano(l.cfg.Clock)
	last := l.lastOutcome.Load()
	if now-last < l.stallAfter.Load() || l.inflight.Load() == 0 || l.stallAt.Load() > last {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stallAt.Load() > l.lastOutcome.Load() {
		return // another refusal got here first
	}
	l.ssthresh = math.Max(l.ssthresh, l.estimate)
	if prev := l.stallAt.Load(); prev == 0 || l.lastSuccess.Load() > prev {
		// The first stall since the service last answered: what hangs
		// now is stuck. (A stall with no success since the last one only
		// finds the few sent into the hang since: they count.)
		l.stuck.Store(l.inflight.Load())
		l.preStall = l.estimate
		l.stallOpen.Store(true)
	}
	l.estimate = float64(l.cfg.MinLimit)
	l.limit.Store(int64(l.cfg.MinLimit))
	l.stallAt.Store(now)
	l.probing.Store(false)
	l.cuts = 0
	l.stalls++
	l.gp.reset()
	l.reason = ReasonStall
}

// stallEnded is told the outcome of a request the latest stall held (sent
// before it). The first such outcome decides what the stall was: answered
// (Success), the service only paused (a stop-the-world collection, a lock
// held for a moment) and kept its capacity, so the limit goes back at once
// to where it stood before the stall, instead of regrowing from MinLimit
// while the load queues and is shed (a service paused 200 ms a second at
// 60% load lost 37% of its requests so); failed (Dropped: a timeout, a
// 503), it hung or broke, and the limit regrows as the algorithm finds
// the service.
func (l *Limiter) stallEnded(o sluice.Outcome) {
	if !l.stallOpen.Load() {
		return // decided already: the other stuck requests take no lock
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stallOpen.CompareAndSwap(true, false) {
		return
	}
	if o != sluice.Success || l.preStall <= l.estimate {
		return
	}
	l.restore(l.preStall, ReasonStallOver)
}

// restore puts the limit back to an estimate it stood at (at most
// MaxLimit) for why, between windows. Called with l.mu held.
func (l *Limiter) restore(to float64, why Reason) {
	next := math.Min(to, float64(l.cfg.MaxLimit))
	if l.onReason != nil && l.reason != why {
		l.onReason(why, int(next))
	}
	l.reason = why
	l.estimate = next
	l.storeLimit(next)
}

// tightSpread is how far apart a probe step's 10th and 90th percentile
// RTTs may be for the step to read as a service that answers alike
// (deeper): a lognormal service of sigma 0.25 spreads them 1.9x.
const tightSpread = 1.1

// slowStartHold is how long a cut on latency (a queue formed in the
// service) keeps the limit from slow start.
const slowStartHold = 30 * time.Second

// slowStartRTT is how far over the no-load RTT a window's RTT may be for
// slow start to read no queue in it (slowStarts, and the first requests'
// verdict in firstMeasured).
const slowStartRTT = 1.25

// slowStarts reports whether the limit may double this window: the
// algorithm is a SlowStarter, requests were refused (demand above the
// limit), nothing was dropped, the limit was in use, the window's RTT is
// within 25% of the no-load RTT (of its fastest request while none is
// known), and no cut on latency in the last 30 s (then the algorithm's own
// growth is the safer one: doubling would rebuild the queue it found).
// Called with l.mu held.
func (l *Limiter) slowStarts(now int64, cur float64, saturated bool, s Sample) bool {
	if !l.mayDouble(now) {
		return false
	}
	ref := s.NoLoadRTT
	if ref <= 0 {
		ref = s.MinRTT
	}
	return saturated && s.Drops == 0 && s.RTT > 0 && ref > 0 && float64(s.RTT) <= slowStartRTT*float64(ref) &&
		float64(s.MaxInFlight)*2 >= cur
}

// mayDouble reports whether slow start may double the limit at now, a
// window permitting: the algorithm is a SlowStarter, and no cut on
// latency came in the last slowStartHold. Called with l.mu held.
func (l *Limiter) mayDouble(now int64) bool {
	ss, ok := l.cfg.Algorithm.(SlowStarter)
	return ok && ss.SlowStarts() && (l.queueCutAt == 0 || now-l.queueCutAt >= int64(slowStartHold))
}

// maybeClose closes the window if it is complete; one caller wins.
func (l *Limiter) maybeClose(now int64) {
	age := now - l.winStart.Load()
	if age < int64(l.cfg.Window) && !l.first.queued.Load() && !l.quick(age) {
		return // (the first requests' verdict, or slow start, closes the window before its time)
	}
	count, drops := l.winCount.Load(), l.winDrops.Load()
	ready := count+drops >= int64(l.cfg.MinSamples) || drops > 0
	if !ready && age < 10*int64(l.cfg.Window) {
		return
	}
	if !ready && count > 0 {
		// A slow service (10 requests a second or fewer would never fill
		// a window in time, and the limit would never move): gather for
		// longer rather than discard what it said.
		if age < 100*int64(l.cfg.Window) {
			return
		}
		ready = count >= 3
	}
	if !l.closing.CompareAndSwap(false, true) {
		return
	}
	defer l.closing.Store(false)
	if l.winStart.Load() != now-age {
		return // another caller closed it meanwhile
	}
	l.first.queued.Store(false)
	sum, count, drops := l.winSum.Swap(0), l.winCount.Swap(0), l.winDrops.Swap(0)
	minRTT, maxIn := l.winMin.Swap(0), l.winMaxIn.Swap(l.inflight.Load())
	ansMax := float64(l.winAnsMax.Swap(0))
	l.winStart.Store(now)
	l.update(now, age, ready, sum, count, drops, minRTT, maxIn, ansMax)
}

// quick reports whether a window of age may close before its time because
// slow start is doubling the limit: TCP's slow start doubles once a round
// trip, and a window many round trips long held a fast service's limit
// at each doubling for the whole window while the demand over it queued
// in the sidecar (4,000 a second before a 20 ms service of unlimited
// concurrency: 20, 44, 88, 176 at 100 ms apart, a queue of 500 and the
// first second's p99 387 ms against 36 without a limit). Such a window
// closes once it has twice the limit's answers (those admitted before the
// doubling, and as many after it at the new limit) and is at least the
// latest window's p90 old (slow start doubles at most once per p90).
//
// And the first step of a burst: a window that refused as many requests
// as the limit and holds as many answers, whose mean RTT is within slow
// start's bound of the no-load RTT, closes then (a p90 old at least): the
// demand over the limit is known, and that none of it queues in the
// service. Before, a burst after a light load (200 a second, then 4,000,
// before 20 ms of unlimited concurrency) waited up to a whole window for
// slow start's first step. The mean, not the median (which would cost a
// histogram's walk per answer): a heavy tail's mean is over the bound,
// and its windows keep their time.
func (l *Limiter) quick(age int64) bool {
	if age < l.quickAge.Load() {
		return false
	}
	n := l.winCount.Load()
	if q := l.quickN.Load(); q > 0 && n >= q {
		return true
	}
	b := l.quickRTT.Load()
	if b <= 0 || n < int64(l.cfg.MinSamples) {
		return false
	}
	lim := l.limit.Load()
	return n >= lim && l.rejected.Load() >= l.lastRejected.Load()+uint64(lim) && l.winSum.Load() <= b*n
}

// setQuick, at the close of a window at now, lets the next close before
// its time (quick): after twice the limit's answers when the limit took a
// slow-start step at this close; on a burst whenever slow start may double
// the limit (a baseline is known, no cut on latency lately) and no probe
// runs. Called with l.mu held.
func (l *Limiter) setQuick(now int64) {
	l.quickAge.Store(int64(l.p90))
	l.quickN.Store(0)
	l.quickRTT.Store(0)
	if l.probing.Load() {
		return
	}
	if l.steppedAt == now {
		l.quickN.Store(max(int64(l.cfg.MinSamples), 2*l.limit.Load()))
	}
	if age, ok := l.closedProbeAge(); ok {
		// A closed loop's up-probe of a fast service: its windows close
		// once they hold enough answers to measure goodput, ten round
		// trips (its p90) old at least.
		l.quickAge.Store(age)
		l.quickN.Store(max(int64(l.cfg.MinSamples), closedProbeAnswers, 2*l.limit.Load()))
	}
	if l.baseline > 0 && l.mayDouble(now) {
		l.quickRTT.Store(int64(slowStartRTT * l.baselineAt(now)))
	}
}

// closedProbeAnswers is the fewest answers a closed loop's up-probe window
// that closes before its time holds: its goodput within about 5% by the
// counts' chance.
const closedProbeAnswers = 400

// closedProbeAge reports whether the window now opening belongs to a
// closed loop's up-probe of a service fast enough to measure in less than
// a window, and the least age of such a window: ten round trips (the
// latest window's p90), so that the answers to the limit before the probe
// are a tenth of it at most (see goodput.holding). Each step of a closed
// loop's climb held its windows' full time: before a service that answers
// in a millisecond or less, behind a sidecar on the same core, wrk -c256
// climbed from a start gate of 5-16 to the loop in 0.9-1.5 s, six steps of
// two 100 ms windows, the loop waiting in the queue meanwhile (0.75-0.85
// of the goodput without a limit over the first second). Called with l.mu
// held.
func (l *Limiter) closedProbeAge() (int64, bool) {
	if l.gp.up == 0 || !l.gp.upClosed || l.p90 <= 0 {
		return 0, false
	}
	age := int64(10 * l.p90)
	return age, age < int64(l.cfg.Window)
}

// update moves the limit at the close of a window: sum, count, drops and
// minRTT of its outcomes, maxIn its most in flight, ansMax the highest
// concurrency one of its samples was admitted at.
func (l *Limiter) update(now, age int64, ready bool, sum, count, drops, minRTT, maxIn int64, ansMax float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.setQuick(now)
	l.winFrom = now - age
	n := l.winHist.take(&l.counts)
	var self time.Duration
	if f := l.cfg.SelfDelay; f != nil {
		self = max(f(), 0)
	}
	rejected := l.rejected.Load()
	saturated := rejected > l.lastRejected.Load()
	turnedAway := rejected - l.lastRejected.Load() // arrivals the limit had no room for, in the window
	released := l.released()
	done := released - l.doneAt // requests ended in the window, whatever their outcome
	l.doneAt = released
	if minRTT > 0 && (l.minRTT == 0 || float64(minRTT) < l.minRTT) {
		l.minRTT = float64(minRTT)
	}
	l.lastRejected.Store(rejected)
	if !ready {
		return // too few outcomes to say anything: discard the window
	}
	drops = l.overBackground(count, drops)
	l.closeGate(now)
	s, raw := l.sample(n, now, sum, count, drops, minRTT, maxIn, self)
	cur := l.estimate
	l.gp.observe(gpWindow{limit: float64(l.limit.Load()), x: float64(count) / float64(max(age, 1)), n: count,
		sat: saturated && !l.probing.Load()})
	if l.probing.Load() {
		l.probeWindow(now, drops)
		s.NoLoadRTT = time.Duration(l.baselineAt(now))
		l.lastSample = s
		l.rtt.Store(int64(s.RTT))
		l.windowsDone++
		return
	}
	r := float64(done) / float64(max(age, 1))
	l.lastRate, l.lastIn = r, float64(maxIn)
	if float64(maxIn) >= 0.8*cur {
		// The limit in use: what the service finishes at it.
		if l.fullRate == 0 {
			l.fullRate = r
		} else {
			l.fullRate += (r - l.fullRate) / 4
		}
	}
	if float64(maxIn)*2 <= cur && drops == 0 && count > 0 && !saturated {
		// The load left room: no queue here, a baseline measurement. Not
		// when the window refused requests: then the limit in force was
		// under the estimate (the start gate bound it), and what left room
		// was the gate, not the load (before one slot of 3 ms at 3x its
		// capacity, the first window held 8 in flight at a gate of 4, its
		// median a queue of 12 ms became the baseline, and the limit held
		// 6-20 for seconds).
		l.measured(float64(s.RTT), now, false)
		l.roomAt = now
	}
	s.NoLoadRTT = time.Duration(l.baselineAt(now))
	closed := saturated && l.isClosed(r)
	if next, why, held := l.gp.holding(now, cur, float64(l.cfg.MaxLimit), closed, s.RTT); held && s.Drops == 0 {
		// An up-probe holds the limit, or has just chosen one.
		l.setEstimate(next, why, s)
		return
	}
	var deep firstStep
	if saturated && s.Drops == 0 && l.baseline == 0 && l.first.open.Load() {
		var measured bool
		if measured, deep = l.firstMeasured(now, s, age < int64(l.cfg.Window)); measured {
			return // the first requests measured the baseline
		}
	}
	next := l.cfg.Algorithm.Update(cur, s)
	why := ReasonGrow
	switch {
	case s.Drops > 0:
		l.gp.overloaded(now, cur)
		l.gp.reset()
		why = ReasonDrops
	case next < cur:
		why = ReasonQueue
	}
	if s.Drops == 0 {
		var over Reason
		// Arrivals the limit turned away by the score per success are
		// clients sending again at once (a closed loop refused until the
		// queue finds it holds one): no down-probe then.
		resending := turnedAway > maxTurnedAway*uint64(max(count, 1))
		next, over = l.gp.adjust(now, cur, next, float64(l.cfg.MaxLimit), closed, s.RTT, l.spread, resending)
		if over != 0 {
			why = over
		}
	}
	answered := ansMax
	if closed {
		answered = math.Inf(1) // a closed loop's demand bounds the limit's climb
	}
	next = l.afterCut(now, cur, next, why, saturated, s, answered)
	if next >= cur && cur >= l.ssthresh {
		l.ssthresh = 0 // recovered
	}
	next = l.setEstimate(next, why, s)
	if l.baseline > 0 {
		l.stallAfter.Store(max(int64(2*l.cfg.Window), int64(8*l.baseline)))
		l.leftAfter.Store(int64(4 * l.baseline))
	}
	l.maybeProbe(now, cur, next, raw, saturated, s, deep)
}

// sample is the window's Sample (RTTs without the process's own wait for
// a CPU, self) and raw, its RTT with that wait, as a probe measures it. It
// also keeps the window's spread (p90 / p10) for the next probe's size.
func (l *Limiter) sample(n int, now, sum, count, drops, minRTT, maxIn int64, self time.Duration) (s Sample, raw time.Duration) {
	s = Sample{Successes: int(count), Drops: int(drops), MaxInFlight: int(maxIn), MinRTT: time.Duration(minRTT), At: time.Unix(0, now)}
	if count > 0 {
		s.Mean = time.Duration(sum / count)
		s.RTT = time.Duration(quantile(&l.counts, n, l.cfg.Percentile))
		p10, p90 := float64(quantile(&l.counts, n, 0.1)), float64(quantile(&l.counts, n, 0.9))
		s.Noise = medianNoise(n, p10, p90)
		l.spread = p90 / math.Max(p10, 1)
		l.p90 = p90
		raw = s.RTT
		if self > 0 {
			s.SelfDelay = s.RTT - withoutSelf(s.RTT, self)
			s.RTT = withoutSelf(s.RTT, self)
			s.Mean = withoutSelf(s.Mean, self)
		}
	}
	return s, raw
}

// afterCut books a change of the limit from cur to next for why: a cut on
// drops remembers where the limit stood (ssthresh); cuts on latency alone
// are counted, for a probe to doubt them; otherwise the limit may grow in
// slow start (to at most twice answered, the highest concurrency the
// window's answers were admitted at), or back towards ssthresh once an
// overload is over.
func (l *Limiter) afterCut(now int64, cur, next float64, why Reason, saturated bool, s Sample, answered float64) float64 {
	if next < cur && (why == ReasonQueue || why == ReasonDrops) {
		if s.Drops > 0 {
			// Remember where the limit stood before the overload, to
			// grow back to it quickly once it is over. (Not after cuts
			// on latency alone: growing back fast would rebuild the
			// queue they removed.)
			l.ssthresh = math.Max(l.ssthresh, cur)
		} else {
			// A cut on latency alone: queueing, or a slower service?
			if l.cuts == 0 {
				l.beforeCuts, l.cutsFrom = cur, now
			}
			l.cuts++
			l.queueCutAt = now
		}
	} else {
		l.cuts = 0
		if l.slowStarts(now, cur, saturated, s) {
			// Demand above the limit, none of it queueing in the
			// service, and no queue found lately: double, as TCP's slow
			// start does (a closed-loop client or a burst after idle
			// finds its level in a few windows, not seconds), but to
			// at most twice the highest concurrency the window's
			// answers were admitted at, as TCP doubles once per round
			// trip: a service slower than a window answers for a limit
			// since left behind, and doubling every window before
			// those answers came took a 500 ms service of 200 slots to
			// 1,000 (a queue of 2 s: its clients timed out). Not for a
			// closed loop (answered is +Inf): its own size bounds the
			// climb, and its clients wait in the queue meanwhile.
			//
			// And once per round trip of the window's slow end (its p90):
			// before a heavy tail, a window's answers are mostly the fast
			// ones of those admitted since the last doubling, whose
			// median reads at or below the baseline while the slow ones,
			// still out, queue (50 x 100 ms, sigma 1, through the binary:
			// 44, 88, 158 in three windows of 100 ms, then a service
			// slowed by 100 waiting and a second at 60% of capacity).
			//
			// And not on a window whose answers a probe admitted (one
			// that began before a round trip past the probe's end): its
			// median is that of the probe's lower concurrency, not the
			// limit's (10 slots of 20 ms at 10x: a window closed 18 ms
			// after the first probe doubled 22 to 40, and the first
			// second's p99 was 140 ms against 68-82).
			afterProbe := l.winFrom >= l.probeEndedAt+int64(l.p90)
			if double := math.Min(float64(l.cfg.MaxLimit), 2*math.Min(cur, answered)); double > next && now-l.doubledAt >= int64(l.p90) && afterProbe {
				next, l.doubledAt, l.steppedAt = double, now, now
			}
		}
		if l.cfg.Recovery > 1 && cur < l.ssthresh && s.Drops == 0 && s.RTT > 0 && s.NoLoadRTT > 0 &&
			float64(s.RTT) <= 1.1*float64(s.NoLoadRTT) && float64(s.MaxInFlight)*2 >= cur {
			// The overload is over: no queueing, the limit in use. Grow
			// multiplicatively back towards the former limit.
			next = math.Max(next, math.Min(l.ssthresh, cur*l.cfg.Recovery))
		}
	}
	return next
}

// maybeProbe starts a probe of the service's no-load latency when one is
// due, or when cuts in a row on latency alone deserve a doubt. A probe is
// due only in a window that refused a request (saturated): a load that
// fits under the limit is not held back by it, whatever the baseline, and
// a probe would lower the limit below that load (a closed loop of 16 in
// front of a 500 ms service, under the initial 20, waited a second in
// each probe at 10: 0.85 of the goodput without a limit).
func (l *Limiter) maybeProbe(now int64, cur, next float64, raw time.Duration, saturated bool, s Sample, deep firstStep) {
	// While the limit grows back after an overload, probe half as often.
	interval := l.probeEvery
	if l.ssthresh > 0 && next < l.ssthresh {
		interval *= 2
	}
	probeDue := saturated && (l.baseline == 0 || now-l.lastLowAt >= interval)
	if probeDue && l.baseline == 0 && l.first.open.Load() {
		probeDue = false // the first requests' answer is still to come (firstMeasured)
	}
	// Cuts in a row on latency are doubted by a probe; after a probe found
	// a queue, only once the cuts have gone deep enough that a queue would
	// have drained. Not cuts that began within 5 windows of one in which
	// the load left the limit room (and measured the baseline), before a
	// service that answers within a window: a load that grew into the
	// limit found a queue, not a slower service, and each cut is read
	// within the next window. (A flash crowd at 15x over 0.6x of 10 slots
	// of 20 ms: the probe held the crowd's first requests at half the
	// limit for 100 ms, the service below its slots.)
	surge := l.roomAt > 0 && l.cutsFrom-l.roomAt < int64(5*l.cfg.Window) && l.baseline <= float64(l.cfg.Window)
	doubt := l.cuts >= 3 && next < 0.75*l.beforeCuts && now-l.lastProbeAt >= int64(5*l.cfg.Window) &&
		(now >= l.quietUntil || next < 0.7*l.beforeCuts) && !surge
	if (probeDue || doubt) && s.Drops == 0 {
		l.fullRTT = float64(raw) // a probe's median is compared with it as measured
		l.stepRate, l.stepIn, l.stepRTT = l.fullRate, cur, l.fullRTT
		if float64(s.MaxInFlight) < 0.8*cur {
			l.fullRTT = 0 // the window did not use the limit: no comparison
			l.stepRate, l.stepIn = l.lastRate, l.lastIn
		}
		fraction := l.probeDepth(cur)
		l.saturated, l.guessed = 0, false
		if deep.rtt > 0 {
			// The first requests' deep queue closed the window early
			// (firstMeasured): their earlier half, which queued at the
			// concurrency it was admitted at, is the step before (the
			// window's few answers are their ramp, no RTT at the limit),
			// the first step is at half that concurrency, not at half
			// the limit (before one slot of 1 ms, steps at 11 and 5 read
			// again the queue the earlier half had read at 5: 80 ms of
			// the first second's p99), and the service was saturated
			// there: the probe ends at most at it.
			l.fullRTT, l.stepRTT, l.stepIn, l.stepRate = 0, deep.rtt, deep.in, 0
			fraction = math.Min(fraction, deep.in/2/math.Max(l.estimate, 1))
			l.saturated = math.Max(deep.in, float64(l.cfg.MinLimit))
		}
		l.probeFrom = cur
		l.startProbe(now, fraction)
	}
}

// withoutSelf returns rtt less the caller's own wait for a CPU, self, but
// not below an eighth of rtt (self is the mean over all the caller's work,
// an estimate).
func withoutSelf(rtt, self time.Duration) time.Duration {
	return max(rtt-self, rtt/8)
}

// setEstimate clamps next to the bounds, makes it the estimate and the
// limit, and records the window. Called with l.mu held.
func (l *Limiter) setEstimate(next float64, why Reason, s Sample) float64 {
	cur := l.estimate
	next = math.Max(float64(l.cfg.MinLimit), math.Min(float64(l.cfg.MaxLimit), next))
	if math.IsNaN(next) {
		next = cur
	}
	if int64(next) != int64(cur) {
		if why != l.reason && l.onReason != nil {
			l.onReason(why, int(next))
		}
		l.reason = why
	}
	l.estimate = next
	l.storeLimit(next)
	l.lastSample = s
	l.rtt.Store(int64(s.RTT))
	l.windowsDone++
	return next
}

// The fractions of the limit a probe runs at. A shallow probe costs less
// throughput; it runs just under the concurrency at which the last probe
// saw the queue begin (the knee), and never above shallowProbe. If it still
// finds the service queueing, a deep one follows.
const (
	shallowProbe = 0.75
	deepProbe    = 0.5
)

// probeDepth returns the fraction of limit to probe at. Called with l.mu
// held.
func (l *Limiter) probeDepth(limit float64) float64 {
	if l.baseline == 0 || l.knee == 0 || limit <= 0 {
		return deepProbe // nothing known yet: no guess at how deep the queue is
	}
	return math.Max(deepProbe, math.Min(shallowProbe, 0.9*l.knee/limit))
}

// startProbe lowers the limit to fraction of the estimate so that requests
// admitted from now on find the service without a queue. Called with l.mu
// held.
func (l *Limiter) startProbe(now int64, fraction float64) {
	l.quickN.Store(0) // a probe's windows keep their time (setQuick)
	l.quickRTT.Store(0)
	l.probeFraction = fraction
	l.probeHist.take(&l.counts)
	l.probeCount.Store(0)
	l.probeFirst.Store(0)
	l.stepRefused = l.rejected.Load()
	l.probeSent.Store(0)
	l.probeAll.Store(0)
	level := l.probeLevel()
	want := 2 * l.cfg.MinSamples
	if l.spread > 0 && l.spread <= 2 {
		// RTTs alike (the latest window's p90 within 2x its p10): one
		// round's median is as good. A heavy tail's needs them all
		// (sigma 1.5 before 4 slots: 0.82 of no limiter in a closed
		// loop of 1,024 on 10 samples, 0.89 on 20).
		want = min(want, max(l.cfg.MinSamples, int(level)))
	}
	l.probeWant.Store(int64(want))
	l.probeStart.Store(now)
	l.probing.Store(true)
	l.probeWindows = 0
	l.lastProbeAt = now
	l.cuts = 0
	l.probes++
	l.gp.up = 0
	l.reason = ReasonProbe
	l.storeLimit(level)
}

// probeWindow, at the close of a window during a probe, ends a probe that
// saw drops (overload: no moment to measure) or has lasted 10 windows
// without enough samples. Called with l.mu held.
func (l *Limiter) probeWindow(now int64, drops int64) {
	l.probeWindows++
	if drops > 0 || l.probeWindows >= 10 {
		l.finishProbe(now, drops == 0)
	}
}

// idleProbe ends, unmeasured, a probe that outlived the load it began in
// (nothing in flight and nothing ended for as long as a stall takes): its
// lowered limit would otherwise greet the next load, which may be a
// different one. The next probe measures that. (The first probe, with no
// baseline yet, goes on: it is how the load that begins is first
// measured, and a sidecar's first request often comes long before the
// load does.)
func (l *Limiter) idleProbe(now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.probing.Load() && l.baseline > 0 {
		l.finishProbe(now, false)
	}
}

// endProbe ends the probe once enough requests admitted during it have
// ended: the release that brings the count there calls it.
func (l *Limiter) endProbe() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.probing.Load() {
		l.finishProbe(sluice.UnixNano(l.cfg.Clock), true)
	}
}

// finishProbe adopts the probe's median as the baseline (when measure) and
// restores the limit. Called with l.mu held.
func (l *Limiter) finishProbe(now int64, measure bool) {
	var counts [histBuckets]uint32
	n := l.probeHist.take(&counts)
	l.probeCount.Store(0)
	if measure && n > 0 {
		// The probe's samples: all that ended, or all of them when its
		// percentile was known before the slowest ended (they are each
		// slower than bound: a rank past the ended reads as bound).
		total, bound := n, int64(0)
		if all, want := l.probeAll.Load(), l.probeSamples(); int64(n) < want && all > 0 && rankKnown(&counts, want, l.cfg.Percentile, now-all) {
			total, bound = int(want), now-all
		}
		at := func(q float64) float64 {
			if probeRank(int64(total), q) > int64(n) {
				return float64(bound)
			}
			return float64(quantile(&counts, total, q))
		}
		m := at(l.cfg.Percentile)
		// How narrow the step's RTTs are: a queue that every request
		// waits through makes them alike; a heavy tail does not. (Read
		// before the slowest ended, p90 is at least bound, and a probe
		// ends early only once bound is past the median.)
		p10, p90 := at(0.1), at(0.9)
		narrow := p90 <= 2*p10
		l.probeTol = probeTolerance(total, p10, p90)
		tight := p90 <= tightSpread*p10
		if l.deeper(now, n, m, stepSpread{narrow: narrow, tight: tight, moderate: p90 <= 4*p10, noise: medianNoise(total, p10, p90)}) {
			return
		}
		// A step whose answers are all but equal and as fast as the
		// fastest answer seen queued nowhere, whatever the RTT of the
		// window before it (the queue of a higher limit just cut).
		unqueued := tight && l.minRTT > 0 && m <= tightSpread*l.minRTT
		if b := l.baselineAt(now); !unqueued && l.probeFraction > deepProbe && l.fullRTT >= 0.97*m/l.probeFraction &&
			(l.creep() == 0 || m > 1.15*b || m < b/1.15) && l.deepLevel() < l.probeLevel() {
			// As much faster at the probe's concurrency as a queue that
			// grows with the concurrency would make it (unless it is
			// where a creeping service was heading): the shallow probe
			// may have queued too. Measure again at half, when half is
			// fewer requests: the same concurrency again would read the
			// same (a shallow probe at 0.51 of 7 before 5 slots stepped
			// to 3, then to 3 again for 20 more samples).
			l.startProbe(now, deepProbe)
			l.probes-- // one probe, in two steps
			return
		}
		l.recent = [3]probeResult{l.recent[1], l.recent[2], {at: now, rtt: m}}
		if l.fullRTT > 0 {
			// Where the queue begins: as many times below the limit as
			// the RTT at the limit is above the one without a queue.
			l.knee = l.probeFrom / math.Max(1, l.fullRTT/m)
			if l.fullRate > 0 && narrow {
				// Or, by Little's law, as many as the service finishes
				// in the RTT without a queue at the rate it finishes
				// them with the limit in use: the window before a probe
				// may still hold the queue of a higher limit just cut
				// (7 in force, 11 in flight, 3x the baseline: the knee
				// read 2.4 before 5 slots, and the next probe halved).
				// The higher of the two; only for RTTs alike, whose
				// median is their mean (a heavy tail's mean is far
				// above its median, and the law would read fewer).
				l.knee = math.Max(l.knee, math.Min(l.probeFrom, l.fullRate*m))
			}
		}
		// A probe that finds the baseline where it was makes the next one
		// wait twice as long (up to 8 ProbeIntervals): a steady service
		// pays less for being watched; one that moved, or is creeping, is
		// watched closely.
		if old := l.baseline; old > 0 && m > old/l.probeTol && m < l.probeTol*old && l.creep() == 0 {
			l.probeEvery = min(2*l.probeEvery, 8*int64(l.cfg.ProbeInterval))
		} else {
			l.probeEvery = int64(l.cfg.ProbeInterval)
		}
		switch {
		case l.saturated > 0:
			// The probe went deeper: the whole limit queued, whatever
			// its RTT read while the queue was still growing. The
			// deepest step is the baseline; no cut is undone.
			l.measured(m, now, true)
			l.quietUntil = now + int64(l.cfg.ProbeInterval)/2
		case l.fullRTT > 0 && 1.05*m >= l.fullRTT:
			// As slow at half the concurrency as at the whole: there was
			// no queue, the service itself is this slow. Take it as the
			// baseline, and undo the cuts that read it as a queue.
			if m > 1.1*l.baseline {
				l.baseline, l.lastLowAt = m, now
				l.estimate = math.Max(l.estimate, math.Min(l.beforeCuts, 1.5*l.estimate))
			} else {
				l.measured(m, now, true)
			}
		case l.fullRTT > 0 && 1.2*m >= l.fullRTT:
			// A small queue, if any: a baseline, and the cuts stand.
			l.measured(m, now, true)
			l.quietUntil = now + int64(l.cfg.ProbeInterval)/2
		default:
			// A queue at the whole limit: the cuts were right; do not
			// doubt them again for a while.
			l.measured(m, now, true)
			l.quietUntil = now + int64(l.cfg.ProbeInterval)/2
		}
	}
	if l.saturated > 0 {
		// The probe went deeper: the limit was at least twice what keeps
		// the service busy. Resume at most at the lowest step that still
		// kept it busy (the knee is at most that step), not where the
		// queue was, and do not slow-start back to it.
		l.estimate = math.Min(l.estimate, l.saturated)
		l.knee = l.saturated
		l.queueCutAt = now // a queue found: no slow start past it for a while
		l.saturated = 0
	}
	l.beforeCuts = 0
	l.probing.Store(false)
	l.probeEndedAt = now
	l.storeLimit(l.estimate)
}

// storeLimit makes v, floored, at least 1 and bounded by the start gate
// (gated), the limit in force, and returns it. Called with l.mu held.
func (l *Limiter) storeLimit(v float64) int64 {
	lim := l.gated(floorLimit(v))
	l.limit.Store(lim)
	return lim
}

// floorLimit is v as a limit: floored, at least 1.
func floorLimit(v float64) int64 { return int64(math.Max(1, math.Floor(v))) }

// probeLevel is the limit during the current step of a probe: its
// fraction of the estimate, at least MinLimit. Called with l.mu held.
func (l *Limiter) probeLevel() float64 {
	return l.levelAt(l.probeFraction)
}

// deepLevel is the limit a deep probe (deepProbe) would run at. Called
// with l.mu held.
func (l *Limiter) deepLevel() float64 { return l.levelAt(deepProbe) }

// levelAt is the limit a probe at fraction of the estimate runs at.
// Called with l.mu held.
func (l *Limiter) levelAt(fraction float64) float64 {
	return math.Max(float64(l.cfg.MinLimit), math.Floor(l.estimate*fraction))
}

// gated returns limit v bounded by the first requests' start gate while
// it is open and binds (firstProbe.ended).
func (l *Limiter) gated(v int64) int64 {
	if g := l.first.gate.Load(); g > 0 && g < v && l.first.gated.Load() && l.first.binds.Load() {
		return max(g, int64(l.cfg.MinLimit))
	}
	return v
}

// applyGate sets the limit anew once the start gate moved. Called only by
// the first requests' releases.
func (l *Limiter) applyGate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.first.gated.Load() || l.stallAt.Load() != 0 {
		return
	}
	v := l.estimate
	if l.probing.Load() {
		v = l.probeLevel()
	}
	if lim := l.storeLimit(v); lim < floorLimit(v) {
		if l.reason != ReasonStart && l.onReason != nil {
			l.onReason(ReasonStart, int(lim))
		}
		l.reason = ReasonStart
	}
}

// closeGate closes the start gate at the first window with enough
// samples (the algorithm reads the service from then on): when the first
// requests show a queue behind the concurrency the gate allowed
// (firstProbe.queuedAt), and what the estimate would send over the gate
// takes longer than a window to drain, the estimate starts from the gate,
// not above it. Called with l.mu held.
func (l *Limiter) closeGate(now int64) {
	f := &l.first
	if !f.gated.Swap(false) {
		return
	}
	g, fast := float64(f.gate.Load()), float64(f.fast.Load())
	if g <= 0 || g >= l.estimate || !f.queuedAt(now) {
		return
	}
	// What the estimate would send over the gate drains, at the half of
	// it that answered fast, in (estimate - gate) x fast / (gate / 2). A
	// queue that drains within a window is the algorithm's to read (one
	// the first requests of a closed loop find in the sidecar's own CPU
	// before a service answering at once is such a queue); one that
	// outlasts it is what the gate is for.
	//
	// Before a service that answers alike (firstProbe.alike), a queue
	// is no sidecar's: the estimate starts from the gate whatever the
	// drain (5 slots of 50 ms: (20 - 10) x 50 ms / 5 is the 100 ms window
	// itself, and the limit grew on from 20 with four service times
	// queued).
	if f.alike() || (l.estimate-g)*fast/(g/2) > float64(l.cfg.Window) {
		l.estimate = math.Max(g, float64(l.cfg.MinLimit))
	}
}

// deeper, at the end of a step of a probe whose median m is over twice the
// fastest success ever seen, goes on at half the step's concurrency when
// the service finished as many requests a second during the step as at
// the step before it (twice the concurrency, or the whole limit): still
// saturated, so the step measured a queue, not the service. By Little's
// law a service that is not saturated finishes requests in proportion to
// its concurrency; a limit far above a slow service's concurrency (the
// initial 20 in front of 2 slots) would otherwise take the queue's RTT for
// the baseline and grow on it. A step the load did not fill (nothing
// refused) or that confirms the baseline stops. sp says how alike the
// step's RTTs were: narrow (p90 within 2x p10) a queue's, tight (within
// tightSpread) all but equal, when a median 1.5x the fastest success is a
// queue too. Before any baseline (the first probe), a step also reads
// saturated when its median fell with the concurrency as a queue's does
// (fell), whatever its rate; and a step whose RTTs spread wider than a
// queue's but less than a heavy tail's (moderate) guesses a queue: the
// next step confirms the guess, or undoes it and stops (guessed). It
// reports whether a deeper step began. Called with l.mu held.
func (l *Limiter) deeper(now int64, n int, m float64, sp stepSpread) bool {
	level := l.probeLevel()
	var rate float64 // requests ended per ns since the step's first sample ended
	if first := l.probeFirst.Load(); n >= 3 && first > 0 && now > first {
		rate = float64(l.released()-l.probeDone.Load()) / float64(now-first)
	}
	prev, prevIn, prevRTT := l.stepRate, l.stepIn, l.stepRTT
	l.stepRate, l.stepIn, l.stepRTT = rate, level, m
	// fell: the median fell with the concurrency as a queue's does (by
	// Little's law, a saturated service's RTT is proportional to what is
	// in flight; one with room answers as fast at half), past the
	// geometric mean of the two and the median's own noise. The rate says
	// the same, but over the few milliseconds a step lasts before a fast
	// service it is noisy: a step at 5 before one slot of 1 ms, after one
	// at 11, read 4.2-7.0 ms against 12.5, yet ended 0.7-1.7x as many a
	// second, and a step at 5 stood as the baseline (7-9 in flight, p50
	// 10 ms, for two seconds). Only for the first probe (no baseline).
	fell := l.baseline == 0 && prevRTT > 0 && prevIn > level &&
		m*math.Max(1, sp.noise) < math.Sqrt(level/prevIn)*prevRTT
	if l.guessed {
		// The step before guessed a queue: this one says whether there
		// was one. A median that did not fall with the concurrency
		// measured the service at both: no queue, nothing saturated,
		// and this step's median is the baseline.
		l.guessed = false
		if !fell {
			l.saturated = l.guessedOver
			return false
		}
	}
	next := math.Floor(l.estimate * l.probeFraction / 2)
	if next < math.Max(1, float64(l.cfg.MinLimit)) || next >= level || (l.baseline > 0 && m <= 1.5*l.baselineAt(now)) ||
		l.rejected.Load() == l.stepRefused {
		return false // as deep as it goes, a baseline it confirms, or a load that fit under the step
	}
	if l.isClosed(l.lastRate) {
		// Clients that send again only once answered: their throughput
		// is as flat at half the concurrency when the sidecar or the
		// client is what is busy (one CPU for all, 1,024 connections)
		// as when the service's slots are, and a lower limit buys them
		// no latency (they wait as long in the queue), only the cost of
		// handing every slot over. Up-probes judge their limit by
		// goodput instead.
		return false
	}
	over := 2.0
	if sp.tight {
		// A service whose answers are all but equal (a constant one):
		// at twice its slots in flight, every request waits exactly one
		// service time, and its median is twice the fastest, at the
		// bound a lognormal spread needs (a step at 10 before 5 slots
		// of 50 ms read 100 ms for the baseline, and the limit grew
		// back to 24: p99 250 ms in the first second against 154).
		over = 1.5
	}
	if l.minRTT <= 0 || m < over*l.minRTT {
		return false // at most a short queue: this step's median will do
	}
	if !sp.narrow && !fell {
		// RTTs as spread as a heavy tail makes them (a queue every
		// request waits through makes them alike), or as a busy
		// sidecar's scheduling makes a queue's (5,000 a second before
		// one slot of 1 ms: a step at 11 read 12-14 ms, p90 2-3x p10,
		// and stood as the baseline; goodput probes then took the
		// limit to 31). Before any baseline, and for RTTs spread less
		// than a heavy tail's (sigma 1 spreads p90 13x p10), guess a
		// queue: the next step, at half, tells (see guessed), for the
		// cost of one step. (Not for a closed loop: see above.)
		if l.baseline > 0 || !sp.moderate {
			return false
		}
		l.guessed, l.guessedOver = true, l.saturated
		return l.stepDeeper(now, level)
	}
	switch {
	case level > 0.6*prevIn:
		// The step did not halve the concurrency (the load used little
		// of the limit): its rate says nothing of a queue. Before any
		// baseline, a median this far above the fastest success with
		// RTTs this alike halves again; otherwise the baseline's checks
		// judge it.
		if l.baseline > 0 {
			return false
		}
	case l.baseline == 0:
		if (prev <= 0 || rate < 0.8*prev) && !fell {
			return false // fewer ended at half, and as fast: not saturated
		}
	default:
		if prev <= 0 || rate < 0.9*prev {
			return false // a baseline is known: only a clear plateau
		}
	}
	if rate > 0 && l.minRTT > 0 && next < 0.8*rate*l.minRTT {
		// Saturated, but by Little's law the service, finishing rate a
		// second, keeps rate x its fastest answer busy without any
		// queue: a step below that (less the rate's noise, as above)
		// would leave slots idle for its whole length. The probe ends
		// here, saturated at this step. (Before 2 slots of 200 ms, a
		// step at 3 finished 10 a second, 1.7 slots' worth at 167 ms;
		// a step at 1 served half the capacity for 2 s.)
		l.saturated = level
		return false
	}
	return l.stepDeeper(now, level)
}

// stepDeeper records the step at level as saturated and goes on at half
// its fraction: one probe, in steps. Called with l.mu held.
func (l *Limiter) stepDeeper(now int64, level float64) bool {
	l.saturated = level
	l.startProbe(now, l.probeFraction/2)
	l.probes--
	return true
}

// stepSpread is how alike the RTTs of a probe's step were: narrow (p90
// within 2x p10), tight (within tightSpread), moderate (within 4x), and
// the noise of their median (medianNoise).
type stepSpread struct {
	narrow, tight, moderate bool
	noise                   float64
}

// probeTolerance returns the factor within which a probe's median of n
// RTTs, whose 10th and 90th percentiles are p10 and p90, stands off the
// baseline by chance alone, at least 1.1: the baseline is a median as
// noisy, and the ratio of two medians wanders by their noises combined
// (medianNoise to the power sqrt 2). Read as one median's noise, probes
// of 20 found an unchanged service moved in over a third of them
// (TestProbeToleranceFindsTheSameServiceTheSame), reset the probe
// interval, and before a heavy tail (sigma 1, 50 slots) probed every 2 s
// at half the limit: the sweep's 50 x 100 ms sigma 1 cells served 82-87%
// of capacity.
func probeTolerance(n int, p10, p90 float64) float64 {
	return math.Max(1.1, math.Pow(medianNoise(n, p10, p90), math.Sqrt2))
}

// medianNoise returns the factor within which the median of n RTTs whose
// 10th and 90th percentiles are p10 and p90 stands off the median of the
// distribution they come from, by chance alone: 1.5 standard errors of a
// sample median (1.2533 sigma / sqrt(n) in log terms), the spread read as
// a lognormal's (ln(p90/p10) = 2.563 sigma). 1 when n or the spread says
// nothing. A probe's median within it of the baseline finds nothing new;
// a window's median within it of the baseline is no queue.
func medianNoise(n int, p10, p90 float64) float64 {
	if n < 2 || p10 <= 0 || p90 <= p10 {
		return 1
	}
	sigma := math.Log(p90/p10) / 2.563
	return math.Exp(1.5 * 1.2533 * sigma / math.Sqrt(float64(n)))
}

// probeResult is what one probe measured: the RTT without a queue, ns, at
// a time, Unix ns.
type probeResult struct {
	at  int64
	rtt float64
}

// creep returns how fast the service is getting slower, in ns of RTT per ns,
// when the last three probes each found it slower and by 10% in all (a
// creep, not a step, which the latest probe alone shows), else 0. Called
// with l.mu held.
func (l *Limiter) creep() float64 {
	a, b, c := l.recent[0], l.recent[1], l.recent[2]
	if a.at == 0 || !(a.rtt < b.rtt && b.rtt < c.rtt) || c.rtt < 1.1*a.rtt || c.at <= a.at {
		return 0
	}
	return (c.rtt - a.rtt) / float64(c.at-a.at)
}

// baselineAt returns the baseline to compare an RTT with at now: the
// measured one, or, while the service creeps, where the creep has taken it
// since the last probe (projected over at most the time the three probes
// spanned, and at most 30% up), so that the limit is not cut for a slowdown
// that the next probe would have found. Called with l.mu held.
func (l *Limiter) baselineAt(now int64) float64 {
	v := l.creep()
	if v == 0 || l.baseline == 0 {
		return l.baseline
	}
	last, first := l.recent[2].at, l.recent[0].at
	dt := float64(min(now-last, last-first))
	if dt <= 0 {
		return l.baseline
	}
	return math.Min(l.baseline+v*dt, 1.3*l.baseline)
}

// measured takes an RTT measured without a queue into the baseline: a probe
// that finds it moved by more than 15% and more than its own noise (the
// latest probe's, probeTol: a heavy tail's median of 20 wanders by 50%),
// or a creeping service, is believed at once (the service changed);
// otherwise it is averaged in (a probe's median of 20 is within about 7%
// at sigma 0.25). Called with l.mu held.
func (l *Limiter) measured(rtt float64, now int64, probe bool) {
	l.lastLowAt = now
	if rtt > 0 {
		l.first.open.Store(false) // measured: the first requests' probe is moot
	}
	tol := math.Max(1.15, l.probeTol)
	switch {
	case rtt <= 0:
	case l.baseline == 0, probe && (rtt > tol*l.baseline || rtt < l.baseline/tol || l.creep() > 0):
		l.baseline = rtt
	default:
		w := 0.25
		if probe {
			w = 0.5
		}
		l.baseline += (rtt - l.baseline) * w
	}
}

// Limit returns the current limit.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// RTT is the latest sample window's round-trip time (the median of its
// successes, as Sample.RTT), 0 before the first; read without a lock.
func (l *Limiter) RTT() time.Duration { return time.Duration(l.rtt.Load()) }

// InFlight returns the requests admitted and not yet released.
func (l *Limiter) InFlight() int { return int(l.inflight.Load()) }

// Spare reports whether the limiter has spare capacity: fewer than
// fraction x limit in flight. It is two atomic loads; the static layer asks
// it for elastic throttling.
func (l *Limiter) Spare(fraction float64) bool {
	return float64(l.inflight.Load()) < fraction*float64(l.limit.Load())
}

// Stats is a snapshot of a Limiter.
type Stats struct {
	// Algorithm is the algorithm's name.
	Algorithm string
	// Limit and InFlight are the current limit and requests in flight.
	Limit, InFlight int
	// Admitted, Rejected and Dropped count admissions, refusals and
	// releases with a Dropped outcome since start.
	Admitted, Rejected, Dropped uint64
	// Windows counts closed sample windows; Last is the latest one's sample.
	Windows uint64
	Last    Sample
	// Baseline is the RTT without a queue the limiter measured (0: not
	// yet); Probes and Stalls count the probes taken and the stalls seen.
	Baseline       time.Duration
	Probes, Stalls uint64
	// Probing reports whether a probe holds the limit at half right now.
	Probing bool
	// Stuck counts the requests in flight since before the latest stall,
	// which no longer count against the limit.
	Stuck int
	// Reason says why the limit last moved.
	Reason Reason
	// Reverts counts runs of cuts on latency that were undone because they
	// cost goodput (the latency rose outside the service: a busy sidecar or
	// client); UpProbes counts tries of a higher limit, UpGains those kept
	// (goodput rose with it, or demand fit under it) and UpUndone those
	// undone (a try in progress is neither).
	Reverts, UpProbes, UpGains, UpUndone uint64
	// DownProbes counts tries of a lower limit, DownKept those kept (more
	// goodput at the lower limit: what it cut was queue) and DownUndone
	// those undone (a try in progress is neither).
	DownProbes, DownKept, DownUndone uint64
	// Floor, when positive, is the limit that goodput vouched for: cuts on
	// latency alone stop there for a while. Ceiling, when positive, is the
	// limit a down-probe kept: the algorithm's growth stops there for a
	// while.
	Floor, Ceiling int
}

// Stats returns a snapshot of the limiter.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	last, windows, base, probes, stalls := l.lastSample, l.windowsDone, l.baseline, l.probes, l.stalls
	reason, gp := l.reason, l.gp
	l.mu.Unlock()
	return Stats{
		Algorithm: l.cfg.Algorithm.Name(), Limit: l.Limit(), InFlight: l.InFlight(),
		Admitted: l.admitted.Load(), Rejected: l.rejected.Load(), Dropped: l.dropped.Load(),
		Windows: windows, Last: last, Baseline: time.Duration(base), Probes: probes, Stalls: stalls,
		Probing: l.probing.Load(), Reason: reason, Reverts: gp.reverts, UpProbes: gp.upProbes, UpGains: gp.upGains,
		UpUndone: gp.upUndone, DownProbes: gp.downProbes, DownKept: gp.downKept, DownUndone: gp.downUndone,
		Floor: int(gp.floor), Ceiling: int(gp.ceiling), Stuck: int(l.stuck.Load()),
	}
}
