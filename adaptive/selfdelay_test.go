package adaptive

import (
	"math"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestMeanDelta: the mean of what a histogram gained since the last read,
// each bucket at its midpoint, the open-ended ones at their finite bound.
func TestMeanDelta(t *testing.T) {
	bounds := []float64{math.Inf(-1), 0, 1, 3, math.Inf(1)}
	last := []uint64{5, 5, 5, 5}
	if got := meanDelta([]uint64{5, 7, 5, 5}, bounds, last); got != 0.5 {
		t.Errorf("two in [0, 1): mean %v, want 0.5", got)
	}
	if got := meanDelta([]uint64{5, 8, 6, 6}, bounds, last); got != (0.5+2+3)/3 {
		t.Errorf("one each in [0, 1), [1, 3), [3, inf): mean %v, want %v", got, (0.5+2+3)/3)
	}
	if got := meanDelta([]uint64{5, 8, 6, 6}, bounds, last); got != 0 {
		t.Errorf("nothing new: mean %v, want 0", got)
	}
}

// TestSchedDelaySeesABusyProcess: with more goroutines ready to run than
// CPUs, goroutines wait for one, and SchedDelay says so.
func TestSchedDelaySeesABusyProcess(t *testing.T) {
	s := NewSchedDelay()
	var wg sync.WaitGroup
	stop := time.Now().Add(200 * time.Millisecond)
	for range 8 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				runtime.Gosched() // ready again at once: waits behind the others
			}
		}()
	}
	wg.Wait()
	if got := s.Mean(); got <= 0 {
		t.Errorf("goroutines outnumbering the CPUs: mean scheduling delay %v, want above 0", got)
	}
}
