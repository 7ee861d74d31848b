package queue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// TestPauseIsNoOverload: a service of 4 slots x 2 ms at half its capacity
// pauses for 300 ms (a GC, a failover): nothing ends while the load keeps
// coming. Served in order once the pause ends, every request that waited
// through it is answered within 300 ms, well within MaxWait. Read as an
// open-loop overload (the queue grew with nothing served), what the pause
// brought was refused or dropped: 198 of the 1,040 requests here before
// the queue told a pause (through the binary, 2,500 requests a second
// before a 20-slot service pausing 300 ms every second: 72% served,
// against 100% with no sidecar).
func TestPauseIsNoOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, q := newQueue(4, queue.Config{Order: queue.AdaptiveLIFO, MaxWait: 500 * time.Millisecond})
		const service = 2 * time.Millisecond
		start := time.Now()
		pauseFrom, pauseTo := 400*time.Millisecond, 700*time.Millisecond
		var failed atomic.Int64
		var longest atomic.Int64
		var wg sync.WaitGroup
		request := func() {
			defer wg.Done()
			arrived := time.Now()
			p, err := q.Acquire(context.Background(), 0)
			if err != nil {
				failed.Add(1)
				return
			}
			if w := int64(time.Since(arrived)); w > longest.Load() {
				longest.Store(w)
			}
			at := time.Since(start)
			end := at + service
			if at < pauseTo && end > pauseFrom {
				end = max(end, pauseTo) // held by the pause
			}
			time.Sleep(end - at)
			s.release(p)
		}
		// A burst first (the queue learns how often slots free while
		// waiters wait), then one request a millisecond: half the capacity.
		for range 40 {
			wg.Add(1)
			go request()
		}
		for range 1000 {
			wg.Add(1)
			go request()
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		st := q.Stats()
		if n := failed.Load(); n != 0 {
			t.Fatalf("%d of 1,040 requests refused or dropped around a 300 ms pause at half the capacity: %+v", n, st)
		}
		if w := time.Duration(longest.Load()); w > 400*time.Millisecond {
			t.Errorf("longest wait %v: a pause of 300 ms should cost no more than about 300 ms", w)
		}
	})
}
