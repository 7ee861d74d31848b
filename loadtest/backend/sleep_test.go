package backend

import (
	"sync"
	"testing"
	"time"
)

// TestPreciseSleeperNeverWakesEarly: sleepers of many durations at once,
// shorter and longer than the part left to Go's timer, each sleep at least
// its time, all return, and the waking goroutine stops once none is left.
func TestPreciseSleeperNeverWakesEarly(t *testing.T) {
	p := newPreciseSleeper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var early []time.Duration
	for i := range 60 {
		d := time.Duration(i%12) * 300 * time.Microsecond // 0 to 3.3 ms
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			p.sleep(d)
			if got := time.Since(start); got < d {
				mu.Lock()
				early = append(early, d-got)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(early) > 0 {
		t.Errorf("%d sleepers woke early, by %v", len(early), early)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running || len(p.due) != 0 {
		t.Errorf("after every sleeper returned: running %v, %d due", p.running, len(p.due))
	}
}
