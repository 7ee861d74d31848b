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
	"sort"
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
	// once it is this old and holds MinSamples outcomes (or any drop).
	Window time.Duration
	// MinSamples is the fewest outcomes a window needs; default 10. A window
	// that has not reached it after 10 Windows is discarded.
	MinSamples int
	// Percentile, when in (0, 1), makes the window's RTT that percentile of
	// its successes instead of their average (recorded under a mutex).
	Percentile float64
	// Recovery is the factor by which the limit grows per healthy window
	// while it is below where it was before the last decrease (slow start
	// after an overload); default 1.5. 1 disables it.
	Recovery float64
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
	if c.Clock == nil {
		c.Clock = sluice.SystemClock{}
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
	case c.Percentile < 0 || c.Percentile >= 1:
		return errors.New("percentile: must be in [0, 1)")
	case c.Recovery < 1:
		return errors.New("recovery: must be at least 1")
	}
	return nil
}

// noLoadWindows is how many windows the no-load RTT estimate remembers: a
// minute of default windows, so that a sustained queue does not become the
// new "no load" within a minute, while a service that really became slower
// is re-baselined after one.
const noLoadWindows = 600

// Limiter is an adaptive concurrency limit. It is safe for concurrent use.
type Limiter struct {
	cfg Config

	limit    atomic.Int64
	inflight atomic.Int64

	admitted, rejected, dropped atomic.Uint64

	// The current sample window.
	winStart    atomic.Int64 // Unix ns
	winSum      atomic.Int64 // ns of successes
	winCount    atomic.Int64 // successes
	winDrops    atomic.Int64
	winMin      atomic.Int64 // ns; 0 = none
	winMaxIn    atomic.Int64
	closing     atomic.Bool
	pctMu       sync.Mutex
	pctSamples  []int64
	permitPool  sync.Pool
	onRelease   atomic.Pointer[func()]
	mu          sync.Mutex // guards what follows; taken only to close a window
	estimate    float64
	ssthresh    float64
	noLoad      [noLoadWindows]int64
	noLoadIdx   int
	lastSample  Sample
	windowsDone uint64
}

// New returns a Limiter. It returns an error when cfg does not validate.
func New(cfg Config) (*Limiter, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{cfg: cfg, estimate: float64(cfg.InitialLimit)}
	l.limit.Store(int64(cfg.InitialLimit))
	l.winStart.Store(cfg.Clock.Now().UnixNano())
	l.permitPool.New = func() any { return &slot{l: l} }
	return l, nil
}

// slot backs a Permit. gen changes at every release, so a stale Permit's
// release finds it different and does nothing.
type slot struct {
	l     *Limiter
	gen   atomic.Uint64
	start atomic.Int64
	part  *Partitioned // set when admitted through a partition
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
func (p Permit) Release(o sluice.Outcome) {
	s := p.s
	if s == nil || !s.gen.CompareAndSwap(p.gen, p.gen+1) {
		return
	}
	l := s.l
	now := l.cfg.Clock.Now().UnixNano()
	rtt := now - s.start.Load()
	if s.part != nil {
		s.part.inflight[s.class].Add(-1)
		s.part = nil
	}
	l.permitPool.Put(s)
	l.inflight.Add(-1)
	switch o {
	case sluice.Success:
		l.record(rtt)
	case sluice.Dropped:
		l.dropped.Add(1)
		l.winDrops.Add(1)
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
	s.start.Store(s.l.cfg.Clock.Now().UnixNano())
}

// TryAcquire admits a request if fewer than the limit are in flight. It never
// blocks. Use a queue.Queue in front of it to wait for room.
func (l *Limiter) TryAcquire() (Permit, bool) {
	lim := l.limit.Load()
	for {
		n := l.inflight.Load()
		if n >= lim {
			l.rejected.Add(1)
			return Permit{}, false
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			l.noteInflight(n + 1)
			break
		}
	}
	return l.admit(), true
}

func (l *Limiter) admit() Permit {
	l.admitted.Add(1)
	s := l.permitPool.Get().(*slot)
	s.start.Store(l.cfg.Clock.Now().UnixNano())
	return Permit{s: s, gen: s.gen.Load()}
}

func (l *Limiter) noteInflight(n int64) {
	for {
		m := l.winMaxIn.Load()
		if n <= m || l.winMaxIn.CompareAndSwap(m, n) {
			return
		}
	}
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

func (l *Limiter) record(rtt int64) {
	if rtt < 0 {
		rtt = 0
	}
	l.winSum.Add(rtt)
	l.winCount.Add(1)
	for {
		m := l.winMin.Load()
		if (m != 0 && rtt >= m) || l.winMin.CompareAndSwap(m, max(rtt, 1)) {
			break
		}
	}
	if l.cfg.Percentile > 0 {
		l.pctMu.Lock()
		l.pctSamples = append(l.pctSamples, rtt)
		l.pctMu.Unlock()
	}
}

// maybeClose closes the window if it is complete; one caller wins.
func (l *Limiter) maybeClose(now int64) {
	age := now - l.winStart.Load()
	if age < int64(l.cfg.Window) {
		return
	}
	count, drops := l.winCount.Load(), l.winDrops.Load()
	ready := count+drops >= int64(l.cfg.MinSamples) || drops > 0
	if !ready && age < 10*int64(l.cfg.Window) {
		return
	}
	if !l.closing.CompareAndSwap(false, true) {
		return
	}
	defer l.closing.Store(false)
	if l.winStart.Load() != now-age {
		return // another caller closed it meanwhile
	}
	sum, count, drops := l.winSum.Swap(0), l.winCount.Swap(0), l.winDrops.Swap(0)
	minRTT, maxIn := l.winMin.Swap(0), l.winMaxIn.Swap(l.inflight.Load())
	var pct []int64
	if l.cfg.Percentile > 0 {
		l.pctMu.Lock()
		pct, l.pctSamples = l.pctSamples, nil
		l.pctMu.Unlock()
	}
	l.winStart.Store(now)
	if !ready {
		return // too few outcomes to say anything: discard the window
	}
	l.update(sum, count, drops, minRTT, maxIn, pct)
}

func (l *Limiter) update(sum, count, drops, minRTT, maxIn int64, pct []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Sample{Successes: int(count), Drops: int(drops), MaxInFlight: int(maxIn), MinRTT: time.Duration(minRTT)}
	if count > 0 {
		s.RTT = time.Duration(sum / count)
		if len(pct) > 0 {
			sort.Slice(pct, func(i, j int) bool { return pct[i] < pct[j] })
			s.RTT = time.Duration(pct[min(len(pct)-1, int(l.cfg.Percentile*float64(len(pct))))])
		}
		l.noLoad[l.noLoadIdx%noLoadWindows] = int64(s.RTT)
		l.noLoadIdx++
	}
	s.NoLoadRTT = l.noLoadRTT()
	cur := l.estimate
	next := l.cfg.Algorithm.Update(cur, s)
	if next < cur {
		// Remember where the limit stood before the overload.
		l.ssthresh = math.Max(l.ssthresh, cur)
	} else if l.cfg.Recovery > 1 && cur < l.ssthresh && s.Drops == 0 && s.RTT > 0 &&
		float64(s.RTT) <= 1.1*float64(s.NoLoadRTT) && float64(s.MaxInFlight)*2 >= cur {
		// The overload is over: no queueing, the limit in use. Grow
		// multiplicatively back towards the former limit.
		next = math.Max(next, math.Min(l.ssthresh, cur*l.cfg.Recovery))
	}
	if next >= cur && cur >= l.ssthresh {
		l.ssthresh = 0 // recovered
	}
	next = math.Max(float64(l.cfg.MinLimit), math.Min(float64(l.cfg.MaxLimit), next))
	if math.IsNaN(next) {
		next = cur
	}
	l.estimate = next
	l.limit.Store(int64(math.Max(1, math.Floor(next))))
	l.lastSample = s
	l.windowsDone++
}

// noLoadRTT estimates the RTT without queueing: a low percentile of the
// remembered windows' RTTs (the 1st, and at most the 5th while few are
// remembered), so that one unusually fast window does not drag it down.
// Called with l.mu held.
func (l *Limiter) noLoadRTT() time.Duration {
	var xs [noLoadWindows]int64
	n := 0
	for _, v := range l.noLoad {
		if v > 0 {
			xs[n] = v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	sort.Slice(xs[:n], func(i, j int) bool { return xs[i] < xs[j] })
	return time.Duration(xs[min(n/100+n/20*boolInt(n < 100), n-1)])
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Limit returns the current limit.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

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
}

// Stats returns a snapshot of the limiter.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	last, windows := l.lastSample, l.windowsDone
	l.mu.Unlock()
	return Stats{
		Algorithm: l.cfg.Algorithm.Name(), Limit: l.Limit(), InFlight: l.InFlight(),
		Admitted: l.admitted.Load(), Rejected: l.rejected.Load(), Dropped: l.dropped.Load(),
		Windows: windows, Last: last,
	}
}
