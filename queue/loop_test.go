package queue_test

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// loopShare samples q.WaitingLoop every 10 ms from from until stop is
// closed, and returns the share of samples that read a closed loop.
func loopShare(q *queue.Queue[int], from time.Duration, stop <-chan struct{}) func() float64 {
	var yes, all atomic.Int64
	go func() {
		time.Sleep(from)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			all.Add(1)
			if q.WaitingLoop() {
				yes.Add(1)
			}
		}
	}()
	return func() float64 { return float64(yes.Load()) / float64(max(all.Load(), 1)) }
}

// TestClosedLoopWithinTheQueueReadsAsOne: closed loops smaller than
// MaxSize are never refused, so no hold test finds them, yet their
// clients wait as long in the queue as in the service, and the limiter
// should judge its limit by their goodput (WaitingLoop). 64 clients before
// 20 slots (44 waiting all the time), and 28 before 20 (the queue drains
// whenever a few are on their way back): after the first second, both
// read as closed loops. Before, neither ever did.
func TestClosedLoopWithinTheQueueReadsAsOne(t *testing.T) {
	for _, clients := range []int{64, 28} {
		synctest.Test(t, func(t *testing.T) {
			s, q := newQueue(20, queue.Config{Order: queue.AdaptiveLIFO, MaxSize: 100, MaxWait: 500 * time.Millisecond})
			stop := make(chan struct{})
			share := loopShare(q, time.Second, stop)
			served, refused := closedLoop(t, q, s, clients, 5*time.Millisecond, 3*time.Second)
			close(stop)
			if refused != 0 || served == 0 {
				t.Fatalf("%d clients: %d served, %d refused", clients, served, refused)
			}
			if got := share(); got < 0.9 {
				t.Errorf("%d clients before 20 slots: a closed loop read in %.0f%% of the samples after the first second, want >= 90%% (%+v)",
					clients, 100*got, q.Stats())
			}
		})
	}
}

// TestOpenLoopIsNoClosedLoop: open loops that queue are not read as closed
// loops: an overload (2x, 1.2x and 1.05x of 10 slots of 5 ms, Poisson
// arrivals; 1.2x evenly spaced) loses waiters or grows, and a load at or
// under capacity (1.0x evenly spaced, 0.8x Poisson) queues only now and
// then. (A hold test reads a Poisson 1.2x as a closed loop at times: one
// of its 50 ms grows by half its fastest or less by chance.)
func TestOpenLoopIsNoClosedLoop(t *testing.T) {
	for _, c := range []struct {
		load    float64
		poisson bool
	}{{2, true}, {1.2, false}, {0.8, true}, {1.2, true}, {1.05, true}, {1.0, false}} {
		synctest.Test(t, func(t *testing.T) {
			s, q := newQueue(10, queue.Config{Order: queue.AdaptiveLIFO, MaxSize: 100, MaxWait: 500 * time.Millisecond})
			stop := make(chan struct{})
			share := loopShare(q, 0, stop)
			rng := rand.New(rand.NewPCG(1, uint64(10*c.load)))
			mean := float64(time.Second) / (2000 * c.load) // capacity 2,000/s
			gap := func() time.Duration {
				if c.poisson {
					return time.Duration(rng.ExpFloat64() * mean)
				}
				return time.Duration(mean)
			}
			openLoopGaps(q, s, gap, 5*time.Millisecond, 3*time.Second, 0, 0)
			close(stop)
			if got := share(); got > 0 {
				t.Errorf("an open loop at %gx: a closed loop read in %.0f%% of the samples, want none (%+v)", c.load, 100*got, q.Stats())
			}
		})
	}
}
