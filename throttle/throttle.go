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

type bucket struct {
	start              int64 // Unix ns the slice began; 0: empty
	requests, accepted float64
}

// Throttle is one client's adaptive throttle (per service it calls). It is
// safe for concurrent use.
type Throttle struct {
	k     float64
	slice int64 // ns per bucket
	clock sluice.Clock
	rand  func() float64

	mu   sync.Mutex
	ring [buckets]bucket
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
	return &Throttle{k: cfg.K, slice: max(int64(cfg.Window)/buckets, 1), clock: cfg.Clock, rand: cfg.Rand}
}

// current returns the bucket of now, emptied if its slice is new. Called
// with t.mu held.
func (t *Throttle) current(now int64) *bucket {
	start := now - now%t.slice
	b := &t.ring[(start/t.slice)%buckets]
	if b.start != start {
		*b = bucket{start: start}
	}
	return b
}

// totals returns the requests and accepts of the window ending now.
// Called with t.mu held.
func (t *Throttle) totals(now int64) (requests, accepted float64) {
	oldest := now - now%t.slice - (buckets-1)*t.slice
	for i := range t.ring {
		if b := &t.ring[i]; b.start >= oldest && b.start <= now {
			requests += b.requests
			accepted += b.accepted
		}
	}
	return requests, accepted
}

// Allow reports whether to send a request. It counts the request, sent or
// refused here (as the SRE book counts it: a refused request is still
// demand), so call it once per attempt, and Accepted when the service
// accepted it.
func (t *Throttle) Allow() bool {
	now := sluice.UnixNano(t.clock)
	t.mu.Lock()
	req, acc := t.totals(now)
	t.current(now).requests++
	t.mu.Unlock()
	p := math.Max(0, (req-t.k*acc)/(req+1))
	return p == 0 || t.rand() >= p
}

// Accepted records that the service accepted a request: it answered, and
// not with an overload refusal (429, 503, RESOURCE_EXHAUSTED, UNAVAILABLE).
func (t *Throttle) Accepted() {
	now := sluice.UnixNano(t.clock)
	t.mu.Lock()
	t.current(now).accepted++
	t.mu.Unlock()
}

// Probability returns the chance that Allow refuses the next request.
func (t *Throttle) Probability() float64 {
	now := sluice.UnixNano(t.clock)
	t.mu.Lock()
	req, acc := t.totals(now)
	t.mu.Unlock()
	return math.Max(0, (req-t.k*acc)/(req+1))
}
