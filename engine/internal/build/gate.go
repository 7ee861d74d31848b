package build

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/queue"
)

// Gate is the adaptive limit of a configuration: the limiter, its view by
// priority class (nil without classes) and the wait queue in front of it.
type Gate struct {
	// Limiter is the adaptive concurrency limit.
	Limiter *adaptive.Limiter
	// Part is the classes' view of Limiter; nil without classes.
	Part *adaptive.Partitioned
	// Classes are the classes Limiter was partitioned into, highest
	// first.
	Classes []string
	// Queue is the wait queue in front of Limiter (or of Part's classes).
	Queue *queue.Queue[adaptive.Permit]
}

// GateOptions are what a Gate takes beside the configuration.
type GateOptions struct {
	// Clock is what the limiter and the queue read; nil is the system clock.
	Clock sluice.Clock
	// SelfDelay is adaptive.Config.SelfDelay.
	SelfDelay func() time.Duration
	// OnReason, when set, hears why the limit moved
	// (adaptive.Limiter.SetOnReason), under the limiter's lock.
	OnReason func(why adaptive.Reason, limit int)
}

// NewGate makes cfg's adaptive gate; nil when the adaptive limit is off.
func NewGate(cfg *config.Config, o GateOptions) (*Gate, error) {
	if cfg.Adaptive.Algorithm == config.AdaptiveOff {
		return nil, nil
	}
	alg, err := cfg.Adaptive.Algorithm.New()
	if err != nil {
		return nil, err
	}
	l, err := adaptive.New(adaptive.Config{Algorithm: alg, InitialLimit: cfg.Adaptive.InitialLimit,
		MinLimit: cfg.Adaptive.MinLimit, MaxLimit: cfg.Adaptive.MaxLimit, Clock: o.Clock, SelfDelay: o.SelfDelay})
	if err != nil {
		return nil, fmt.Errorf("adaptive: %w", err)
	}
	g := &Gate{Limiter: l}
	order, _ := cfg.Queue.Order.Parse() // validated
	size := *cfg.Queue.MaxSize
	if size == 0 {
		size = -1 // no queueing
	}
	closed := *cfg.Queue.ClosedLoopMaxSize
	if closed == 0 {
		closed = -1 // max_size always
	}
	// At most max_wait (0 included): held loops time out at max_wait too.
	closedWait := max(cfg.Queue.ClosedLoopMaxWait.D(), cfg.Queue.MaxWait.D())
	qc := queue.Config{MaxSize: size, ClosedLoopSize: closed, MaxWait: cfg.Queue.MaxWait.D(), ClosedLoopMaxWait: closedWait, Order: order, Priorities: 1,
		Clock: o.Clock, Fair: cfg.Queue.Fairness.Tenant() != "", InFlight: l.InFlight, RTT: l.RTT}
	acquire := func(int) (adaptive.Permit, bool) { return l.TryAcquire() }
	if cs := cfg.Adaptive.Classes; len(cs) > 0 {
		classes := make([]adaptive.Class, len(cs))
		for i, c := range cs {
			classes[i] = adaptive.Class{Name: c.Name, Share: c.Share}
		}
		part, err := l.Partition(classes)
		if err != nil {
			return nil, fmt.Errorf("adaptive.classes: %w", err)
		}
		g.Part, g.Classes = part, cfg.Adaptive.ClassNames()
		qc.Priorities, qc.Guaranteed = len(cs), part.UnderShare
		acquire = part.TryAcquire
	}
	g.Queue = queue.NewPrioritized(qc, acquire, func(p adaptive.Permit) { p.Release(sluice.Ignore) })
	// A released slot goes to a waiter; the limiter asks the queue whether
	// it holds a closed loop as each window closes.
	l.SetOnRelease(g.Queue.Notify)
	l.SetClosedLoop(g.Queue.ClosedLoop)
	l.SetWaitingLoop(g.Queue.WaitingLoop)
	if o.OnReason != nil {
		l.SetOnReason(o.OnReason)
	}
	return g, nil
}
