package adaptive_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/queue"
)

// newQueued wires a queue in front of a limiter, as the sidecar does: the
// limiter's releases notify the queue, which hands the slot to a waiter.
func newQueued(t *testing.T, limit int, cfg queue.Config) (*adaptive.Limiter, *queue.Queue[adaptive.Permit]) {
	t.Helper()
	l, err := adaptive.New(adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	q := queue.New(cfg, l.TryAcquire, func(p adaptive.Permit) { p.Release(sluice.Ignore) })
	l.SetOnRelease(q.Notify)
	return l, q
}

func TestQueueInFrontOfLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, q := newQueued(t, 1, queue.Config{MaxWait: time.Second})
		first, err := q.Acquire(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(200 * time.Millisecond)
			first.Release(sluice.Success)
		}()
		begin := time.Now()
		second, err := q.Acquire(context.Background(), 0)
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		if waited := time.Since(begin); waited != 200*time.Millisecond {
			t.Errorf("waiter served after %v, want at the release (200ms)", waited)
		}
		if l.InFlight() != 1 {
			t.Errorf("in flight %d, want 1", l.InFlight())
		}
		if _, err := q.Acquire(context.Background(), 0); !errors.Is(err, queue.ErrTimeout) {
			t.Errorf("third: %v, want a timeout", err)
		}
		second.Release(sluice.Success)
		if l.InFlight() != 0 {
			t.Errorf("in flight %d at the end", l.InFlight())
		}
	})
}

// TestQueueLimiterStress: never more in flight than the limit, every waiter
// served while slots turn over, nothing leaked.
func TestQueueLimiterStress(t *testing.T) {
	l, q := newQueued(t, 3, queue.Config{MaxSize: 64, MaxWait: 10 * time.Second})
	var inside, peak, failed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 24; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				p, err := q.Acquire(context.Background(), i%2)
				if err != nil {
					failed.Add(1)
					continue
				}
				n := inside.Add(1)
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				inside.Add(-1)
				p.Release(sluice.Success)
			}
		}()
	}
	wg.Wait()
	if peak.Load() > 3 || failed.Load() != 0 || l.InFlight() != 0 {
		t.Errorf("peak %d (limit 3), failed %d, in flight at end %d", peak.Load(), failed.Load(), l.InFlight())
	}
}
