package adaptive_test

import (
	"context"
	"errors"
	"slices"
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

// TestClassesGetTheirShareBack: batch borrows the whole limit (4) while
// live is idle; when live comes back, the slots that free go to live until
// it holds its share (2), then to batch, now under its own share (1 of 2),
// then to live again (the higher class when neither is under its share).
func TestClassesGetTheirShareBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := adaptive.New(adaptive.Config{Algorithm: adaptive.Fixed{}, InitialLimit: 4})
		if err != nil {
			t.Fatal(err)
		}
		p, err := l.Partition([]adaptive.Class{{Name: "live", Share: 0.5}, {Name: "batch", Share: 0.5}})
		if err != nil {
			t.Fatal(err)
		}
		q := queue.NewPrioritized(queue.Config{MaxWait: time.Minute, Order: queue.FIFO, Priorities: 2, Guaranteed: p.UnderShare},
			p.TryAcquire, func(perm adaptive.Permit) { perm.Release(sluice.Ignore) })
		l.SetOnRelease(q.Notify)
		ctx := context.Background()
		var held []adaptive.Permit
		for range 4 {
			perm, err := q.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, perm)
		}
		// Waiters: a batch one first, then three live ones.
		type got struct {
			class int
			perm  adaptive.Permit
		}
		served := make(chan got, 4)
		for _, class := range []int{1, 0, 0, 0} {
			go func() {
				perm, err := q.Acquire(ctx, class)
				if err != nil {
					t.Error(err)
					return
				}
				served <- got{class, perm}
			}()
			synctest.Wait()
		}
		var order []int
		for _, h := range held {
			h.Release(sluice.Success)
			g := <-served
			order = append(order, g.class)
			held = append(held, g.perm)
		}
		if want := []int{0, 0, 1, 0}; !slices.Equal(order, want) {
			t.Errorf("slots went to classes %v, want %v (live back to its share, batch to its own, then the higher class)", order, want)
		}
		for _, h := range held[4:] {
			h.Release(sluice.Success)
		}
		if l.InFlight() != 0 {
			t.Errorf("in flight %d at the end", l.InFlight())
		}
	})
}
