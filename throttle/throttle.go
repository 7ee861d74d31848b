// Package throttle is the client's side of load shedding: adaptive
// throttling and retry budgets, as Google's SRE book describes them
// ("Handling Overload"). With adaptive throttling, each client counts over
// a sliding window the requests it made and those the service accepted,
// and refuses a new request itself with probability
//
//	max(0, (requests - K x accepts) / (requests + 1))
//
// so that a service refusing most requests is not also sent them (each
// refusal costs it CPU, and the refused clients send again). A retry
// budget lets retries be at most a share of first tries, so that a retry
// storm cannot multiply an overload (three retries per request make a 2x
// overload an 8x one).
//
// These are mechanisms (explicit clock, no I/O); package clientlimit puts
// them in an http.RoundTripper and gRPC client interceptors.
package throttle

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Config configures a Throttle. The zero value is the SRE book's: K 2 over
// two minutes.
type Config struct {
	// K is how many requests per accepted one the client still sends
	// before it refuses any itself: 2 (default) tolerates a service that
	// refuses half; lower is more aggressive, higher sends more to a
	// service that is refusing.
	K float64
	// Window is how far back requests and accepts count; default 2 min.
	Window time.Duration
	// Clock tells time; default sluice's system clock.
	Clock sluice.Clock
	// Rand returns a number in [0, 1); default math/rand/v2's Float64.
	Rand func() float64
}

// buckets is how many slices a window is counted in: the window slides by
// a twentieth of itself.
const buckets = 20

// ring counts two things over a sliding window, in buckets slices.
type ring struct {
	slice int64 // ns per slice
	slots [buckets]struct {
		start int64 // Unix ns the slice began; 0: empty
		n     [2]float64
	}
}

func newRing(window time.Duration) ring { return ring{slice: max(int64(window)/buckets, 1)} }

// add adds v to count i in now's slice, emptying it first if it is new.
func (r *ring) add(now int64, i int, v float64) {
	start := now - now%r.slice
	s := &r.slots[(start/r.slice)%buckets]
	if s.start != start {
		s.start, s.n = start, [2]float64{}
	}
	s.n[i] += v
}

// sums returns both counts over the window ending now.
func (r *ring) sums(now int64) (a, b float64) {
	oldest := now - now%r.slice - (buckets-1)*r.slice
	for i := range r.slots {
		if s := &r.slots[i]; s.start >= oldest && s.start <= now {
			a += s.n[0]
			b += s.n[1]
		}
	}
	return a, b
}

// Throttle is one client's adaptive throttle (per service it calls). It is
// safe for concurrent use.
type Throttle struct {
	k     float64
	clock sluice.Clock
	rand  func() float64

	mu     sync.Mutex
	counts ring // requests, accepted
}

// New returns a Throttle.
func New(cfg Config) *Throttle {
	if cfg.K <= 0 {
		cfg.K = 2
	}
	if cfg.Window <= 0 {
		cfg.Window = 2 * time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = sluice.NewSystemClock()
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Throttle{k: cfg.K, clock: cfg.Clock, rand: cfg.Rand, counts: newRing(cfg.Window)}
}

// Allow reports whether to send a request. It counts the request, sent or
// refused here (as the SRE book counts it: a refused request is still
// demand), so call it once per attempt, and Accepted when the service
// accepted it.
func (t *Throttle) Allow() bool {
	now := sluice.UnixNano(t.clock)
	t.mu.Lock()
	req, acc := t.counts.sums(now)
	t.counts.add(now, 0, 1)
	t.mu.Unlock()
	p := math.Max(0, (req-t.k*acc)/(req+1))
	return p == 0 || t.rand() >= p
}

// Accepted records that the service accepted a request: it answered, and
// not with an overload refusal (429, 503, RESOURCE_EXHAUSTED, UNAVAILABLE).
func (t *Throttle) Accepted() {
	now := sluice.UnixNano(t.clock)
	t.mu.Lock()
	t.counts.add(now, 1, 1)
	t.mu.Unlock()
}

// Probability returns the chance that Allow refuses the next request.
func (t *Throttle) Probability() float64 {
	now := sluice.UnixNano(t.clock)
	t.mu.Lock()
	req, acc := t.counts.sums(now)
	t.mu.Unlock()
	return math.Max(0, (req-t.k*acc)/(req+1))
}
