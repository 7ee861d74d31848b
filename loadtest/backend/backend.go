// Package backend is a simulated service over real HTTP, with the model of
// internal/sim: it serves Slots requests at once, each for a lognormal
// service time around ServiceTime; requests past its capacity wait inside
// it, first come first served, so its latency grows when it is overloaded,
// and each waiting request makes service slower by Degrade (contention);
// a waiting request whose client leaves is dropped without being served.
// `sluice loadtest backend` runs it, so that limiter settings can be tried
// without a real service. /control reads and changes the model while it
// runs.
package backend

import (
	"container/list"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Model is the backend's behaviour.
type Model struct {
	// Slots is how many requests it serves at once.
	Slots int `json:"slots"`
	// ServiceTime is the mean service time of one request without
	// contention; capacity is Slots/ServiceTime requests per second.
	ServiceTime time.Duration `json:"-"`
	// Sigma is the lognormal shape of service times (0: all equal).
	Sigma float64 `json:"sigma"`
	// Degrade slows service by this fraction per waiting request per slot
	// (at most 4x): 0.1 with as many waiting as slots is 10% slower.
	Degrade float64 `json:"degrade"`
	// Hung stops the service: nothing finishes and nothing starts until it
	// is cleared (a stalled dependency, a GC pause, a deadlock).
	Hung bool `json:"hung"`
	// CPU makes a request burn its service time on a CPU instead of
	// waiting: a CPU-bound service, whose latency grows with whatever else
	// runs on its cores (a sidecar on the same core, the client).
	CPU bool `json:"cpu"`
	// SlowShare is the share of requests that take SlowFactor times as
	// long (a bimodal service: a cache miss, a cold path); 0: none.
	// ServiceTime is then the other requests' mean.
	SlowShare float64 `json:"slow_share"`
	// SlowFactor is how many times slower those requests are (>= 1; 0
	// reads as 1).
	SlowFactor float64 `json:"slow_factor"`
	// MaxQueue, when > 0, makes the service fail fast past a queue depth:
	// a request that arrives while MaxQueue wait for a slot is answered
	// 503 at once (a bounded accept queue or worker pool).
	MaxQueue int `json:"max_queue"`
}

// MeanService is the mean service time without contention, slow requests
// included.
func (m Model) MeanService() time.Duration {
	return time.Duration(float64(m.ServiceTime) * (1 + m.SlowShare*(max(1, m.SlowFactor)-1)))
}

// Validate reports a model that cannot run.
func (m Model) Validate() error {
	switch {
	case m.Slots < 1 || m.Slots > 1_000_000:
		return fmt.Errorf("slots: %d must be in [1, 1000000]", m.Slots)
	case m.ServiceTime < 0 || m.ServiceTime > time.Hour:
		return fmt.Errorf("service time: %v must be in [0, 1h]", m.ServiceTime)
	case !(m.Sigma >= 0 && m.Sigma <= 3):
		return fmt.Errorf("sigma: %v must be in [0, 3]", m.Sigma)
	case !(m.Degrade >= 0 && m.Degrade <= 10):
		return fmt.Errorf("degrade: %v must be in [0, 10]", m.Degrade)
	case !(m.SlowShare >= 0 && m.SlowShare <= 1):
		return fmt.Errorf("slow share: %v must be in [0, 1]", m.SlowShare)
	case !(m.SlowFactor == 0 || m.SlowFactor >= 1 && m.SlowFactor <= 1000):
		return fmt.Errorf("slow factor: %v must be 0 or in [1, 1000]", m.SlowFactor)
	case m.MaxQueue < 0 || m.MaxQueue > 1_000_000:
		return fmt.Errorf("max queue: %d must be in [0, 1000000]", m.MaxQueue)
	}
	return nil
}

// Stats are the backend's counters.
type Stats struct {
	// Arrived counts requests that reached the backend.
	Arrived int64 `json:"arrived"`
	Busy    int   `json:"busy"`
	Waiting int   `json:"waiting"`
	Served  int64 `json:"served"`
	Dropped int64 `json:"dropped"`
	// Refused counts requests answered 503 at once past MaxQueue.
	Refused int64 `json:"refused"`
}

// Backend is the simulated service. It is an http.Handler: /control
// (GET: the model and counters; POST a JSON model with "service_ms" to
// change it) and every other path is served by the model.
type Backend struct {
	mu      sync.Mutex
	model   Model
	resume  chan struct{} // closed when a hang ends
	rng     *rand.Rand
	busy    int
	waiting list.List // of *grant: its ready closed when handed a slot
	arrived int64
	served  int64
	dropped int64
	refused int64
	sleep   func(time.Duration) // the service's wait: precise to a fraction of a millisecond
	now     func() time.Time    // the clock a service is timed by
	sink    atomic.Uint64       // burn's result, so that its loop is not optimised away
}

// New returns a backend with the model m.
func New(m Model, seed uint64) (*Backend, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b := &Backend{model: m, rng: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)), sleep: newPreciseSleeper().sleep, now: time.Now, resume: make(chan struct{})}
	if !m.Hung {
		close(b.resume)
	}
	return b, nil
}

// Model returns the current model.
func (b *Backend) Model() Model {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.model
}

// SetModel changes the model; waiting requests take new slots at once.
func (b *Backend) SetModel(m Model) error {
	if err := m.Validate(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case m.Hung && !b.model.Hung:
		b.resume = make(chan struct{})
	case !m.Hung && b.model.Hung:
		close(b.resume)
	}
	b.model = m
	for !m.Hung && b.busy < m.Slots && b.waiting.Len() > 0 {
		b.handOver(time.Time{})
	}
	return nil
}

// Stats returns the counters.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Arrived: b.arrived, Busy: b.busy, Waiting: b.waiting.Len(), Served: b.served, Dropped: b.dropped, Refused: b.refused}
}

// ServeHTTP implements http.Handler.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/control" {
		b.control(w, r)
		return
	}
	service, start, ok, full := b.acquire(r)
	if full {
		// Past its queue depth: it fails fast, as a bounded pool does.
		http.Error(w, "queue full", http.StatusServiceUnavailable)
		return
	}
	if !ok {
		return // the client left while waiting: no work done
	}
	// The work; a client that leaves now does not stop it.
	var due time.Time // when the slot is free again, if it keeps its pace
	if b.Model().CPU {
		b.sink.Store(burn(service))
	} else {
		// Timed from the slot's grant: waking the waiter it was handed to
		// is the backend's own overhead, not the service's (a 1 ms service
		// served 918/s instead of 1,000).
		due = start.Add(service)
		b.sleep(service - b.now().Sub(start))
	}
	b.mu.Lock()
	resume := b.resume
	b.mu.Unlock()
	<-resume // a hang holds what was in service, too
	b.release(due)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "served in %v\n", service.Round(time.Microsecond))
}

// grant is a request waiting for a slot since arrived: ready is closed
// when it is handed one, at at.
type grant struct {
	ready   chan struct{}
	arrived time.Time
	at      time.Time
}

// acquire takes a slot, waiting in line for one, and draws the request's
// service time; start is when it got the slot; ok is false when the client
// left first, full when the line is at MaxQueue (nothing waits then).
func (b *Backend) acquire(r *http.Request) (d time.Duration, start time.Time, ok, full bool) {
	b.mu.Lock()
	b.arrived++
	if b.busy < b.model.Slots && b.waiting.Len() == 0 && !b.model.Hung {
		b.busy++
		d := b.serviceTimeLocked()
		b.mu.Unlock()
		return d, b.now(), true, false
	}
	if q := b.model.MaxQueue; q > 0 && b.waiting.Len() >= q {
		b.refused++
		b.mu.Unlock()
		return 0, time.Time{}, false, true
	}
	g := &grant{ready: make(chan struct{}), arrived: b.now()}
	el := b.waiting.PushBack(g)
	b.mu.Unlock()
	select {
	case <-g.ready:
		b.mu.Lock()
		d := b.serviceTimeLocked()
		b.mu.Unlock()
		return d, g.at, true, false
	case <-r.Context().Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-g.ready: // handed a slot just as the client left: pass it on
			b.dropped++
			b.releaseLocked(g.at)
		default:
			b.waiting.Remove(el)
			b.dropped++
		}
		return 0, time.Time{}, false, false
	}
}

// burn keeps a CPU busy for d of its own time (thread CPU time is not
// portable; wall time on a busy core is the usual approximation, so a
// request that is descheduled burns less than d of CPU).
func burn(d time.Duration) uint64 {
	end := time.Now().Add(d)
	x := uint64(1)
	for time.Now().Before(end) {
		for i := 0; i < 200; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}

func (b *Backend) serviceTimeLocked() time.Duration {
	m := b.model
	mean := float64(m.ServiceTime)
	if m.Degrade > 0 {
		mean *= 1 + min(3, m.Degrade*float64(b.waiting.Len())/float64(m.Slots))
	}
	if m.SlowShare > 0 && b.rng.Float64() < m.SlowShare {
		mean *= max(1, m.SlowFactor)
	}
	if m.Sigma == 0 {
		return time.Duration(mean)
	}
	median := mean * math.Exp(-m.Sigma*m.Sigma/2) // lognormal with this mean
	return time.Duration(median * math.Exp(m.Sigma*b.rng.NormFloat64()))
}

// release frees a slot that was due free at due (zero: now).
func (b *Backend) release(due time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.served++
	b.releaseLocked(due)
}

func (b *Backend) releaseLocked(due time.Time) {
	if b.busy <= b.model.Slots && b.waiting.Len() > 0 && !b.model.Hung {
		b.busy--
		b.handOver(due)
		return
	}
	b.busy--
}

// maxLag is the most of its own lateness a slot makes up: see handOver.
const maxLag = 500 * time.Microsecond

// handOver gives a slot, due free at due (zero: now), to the longest
// waiting request. The grant is dated when the slot was due, if that is
// within maxLag and after the request came: a busy slot then keeps its
// pace, and the time the backend itself took to wake the request that
// ended (its sleeper's lateness, the scheduler's) is not added to every
// request in line (a slot of 1 ms served 910-960 a second back to back
// on a busy machine instead of 1,000, and the sweep's single-worker
// cells scored every contender against a capacity the backend never
// offered). A slot freed later than maxLag (after a hang, or a pause of
// the machine) starts afresh: it banks no time.
func (b *Backend) handOver(due time.Time) {
	el := b.waiting.Front()
	b.waiting.Remove(el)
	b.busy++
	g := el.Value.(*grant)
	now := b.now()
	g.at = now
	if !due.IsZero() && due.Before(now) && now.Sub(due) <= maxLag {
		g.at = due
		if g.at.Before(g.arrived) {
			g.at = g.arrived
		}
	}
	close(g.ready)
}

// controlBody is /control's JSON.
type controlBody struct {
	Slots      *int     `json:"slots"`
	ServiceMS  *float64 `json:"service_ms"`
	Sigma      *float64 `json:"sigma"`
	Degrade    *float64 `json:"degrade"`
	Hung       *bool    `json:"hung"`
	CPU        *bool    `json:"cpu"`
	SlowShare  *float64 `json:"slow_share"`
	SlowFactor *float64 `json:"slow_factor"`
	MaxQueue   *int     `json:"max_queue"`
}

func (b *Backend) control(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost, http.MethodPut:
		var in controlBody
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			writeJSON(w, 400, map[string]string{"error": "body: " + err.Error()})
			return
		}
		m := b.Model()
		if in.Slots != nil {
			m.Slots = *in.Slots
		}
		if in.ServiceMS != nil {
			if !(*in.ServiceMS >= 0 && *in.ServiceMS <= float64(time.Hour/time.Millisecond)) {
				writeJSON(w, 400, map[string]string{"error": "service_ms: must be in [0, 3600000]"})
				return
			}
			m.ServiceTime = time.Duration(*in.ServiceMS * float64(time.Millisecond))
		}
		if in.Sigma != nil {
			m.Sigma = *in.Sigma
		}
		if in.Degrade != nil {
			m.Degrade = *in.Degrade
		}
		if in.Hung != nil {
			m.Hung = *in.Hung
		}
		if in.CPU != nil {
			m.CPU = *in.CPU
		}
		if in.SlowShare != nil {
			m.SlowShare = *in.SlowShare
		}
		if in.SlowFactor != nil {
			m.SlowFactor = *in.SlowFactor
		}
		if in.MaxQueue != nil {
			m.MaxQueue = *in.MaxQueue
		}
		if err := b.SetModel(m); err != nil {
			writeJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		writeJSON(w, 405, map[string]string{"error": "GET or POST"})
		return
	}
	m, s := b.Model(), b.Stats()
	writeJSON(w, 200, map[string]any{
		"slots": m.Slots, "service_ms": float64(m.ServiceTime) / float64(time.Millisecond), "sigma": m.Sigma, "degrade": m.Degrade, "hung": m.Hung, "cpu": m.CPU,
		"slow_share": m.SlowShare, "slow_factor": m.SlowFactor, "max_queue": m.MaxQueue,
		"capacity_rps": capacity(m), "busy": s.Busy, "waiting": s.Waiting, "served": s.Served, "dropped": s.Dropped, "refused": s.Refused,
	})
}

// capacity is requests per second, nil when unbounded (no service time).
func capacity(m Model) any {
	if m.ServiceTime <= 0 {
		return nil
	}
	return float64(m.Slots) / m.MeanService().Seconds()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
