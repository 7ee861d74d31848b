package adaptive

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
)

// Class is a priority class of requests with a guaranteed share of the
// limit.
type Class struct {
	// Name names the class (e.g. "live", "batch").
	Name string
	// Share is the fraction of the limit guaranteed to the class, in [0, 1].
	Share float64
}

// Partitioned admits requests of priority classes through one Limiter,
// each class with a guaranteed share of the limit. Admission is
// work-conserving: any class is admitted while the total is below the
// limit, so a class borrows whatever the others leave unused, and nothing
// is held idle for a class that does not want it. The guarantee is kept
// where slots are handed out under contention: a queue.Queue built with
// Guaranteed: UnderShare gives each freed slot first to the highest class
// still under its share, so a class that comes back takes its share back
// from borrowers as their requests end (one service time), and among
// classes over their share the highest goes first, so the lowest classes
// are shed first. The global limit is never exceeded: admission is one
// compare-and-swap on the Limiter's counter (the borrowing race Netflix's
// partitioned limiter had, concurrency-limits #233, cannot happen). Safe
// for concurrent use.
type Partitioned struct {
	l        *Limiter
	classes  []Class
	inflight []atomic.Int64
	admitted []atomic.Uint64
	rejected []atomic.Uint64
}

// Partition returns a Partitioned view of l over classes, listed from the
// highest priority to the lowest. Shares must sum to at most 1.
func (l *Limiter) Partition(classes []Class) (*Partitioned, error) {
	if len(classes) == 0 {
		return nil, errors.New("partitions: at least one class is required")
	}
	total := 0.0
	for _, c := range classes {
		if c.Share < 0 || c.Share > 1 || math.IsNaN(c.Share) {
			return nil, fmt.Errorf("partitions: class %q: share %v outside [0, 1]", c.Name, c.Share)
		}
		total += c.Share
	}
	if total > 1+1e-9 {
		return nil, fmt.Errorf("partitions: shares sum to %v, more than 1", total)
	}
	return &Partitioned{l: l, classes: append([]Class(nil), classes...),
		inflight: make([]atomic.Int64, len(classes)), admitted: make([]atomic.Uint64, len(classes)),
		rejected: make([]atomic.Uint64, len(classes))}, nil
}

// guarantee is class c's guaranteed slots at limit lim.
func (p *Partitioned) guarantee(c int, lim int64) int64 {
	return int64(math.Floor(p.classes[c].Share * float64(lim)))
}

// TryAcquire admits a request of class c (an index into the classes), or
// refuses it. It never blocks.
func (p *Partitioned) TryAcquire(c int) (Permit, bool) {
	if c < 0 || c >= len(p.classes) {
		c = len(p.classes) - 1 // an unknown class is treated as the lowest
	}
	l := p.l
	lim := l.limit.Load()
	for {
		g := l.inflight.Load()
		if g-l.stuck.Load() >= lim || g >= int64(l.cfg.MaxLimit) {
			break
		}
		if l.inflight.CompareAndSwap(g, g+1) {
			p.inflight[c].Add(1)
			p.admitted[c].Add(1)
			l.noteInflight(g + 1)
			perm := l.admit(g + 1)
			perm.s.part, perm.s.class = p, c
			return perm, true
		}
	}
	l.rejected.Add(1)
	p.rejected[c].Add(1)
	l.checkStall()
	return Permit{}, false
}

// UnderShare reports whether class c has fewer requests in flight than its
// guaranteed share of the current limit: a queue serves such classes
// first.
func (p *Partitioned) UnderShare(c int) bool {
	if c < 0 || c >= len(p.classes) {
		return false
	}
	return p.inflight[c].Load() < p.guarantee(c, p.l.limit.Load())
}

// ClassStats is one class's share of a Partitioned's state.
type ClassStats struct {
	Name  string
	Share float64
	// InFlight is the class's requests admitted and not yet released.
	InFlight int
	// Admitted and Rejected count admissions and refusals (a refused
	// request may then wait in a queue and be admitted).
	Admitted, Rejected uint64
}

// Stats returns each class's in-flight count and refusals.
func (p *Partitioned) Stats() []ClassStats {
	out := make([]ClassStats, len(p.classes))
	for i, c := range p.classes {
		out[i] = ClassStats{Name: c.Name, Share: c.Share, InFlight: int(p.inflight[i].Load()),
			Admitted: p.admitted[i].Load(), Rejected: p.rejected[i].Load()}
	}
	return out
}

// Limiter returns the underlying limiter.
func (p *Partitioned) Limiter() *Limiter { return p.l }
