package adaptive

import (
	"math"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"
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

// TestHotFieldsLayout pins where the fields every acquire and release
// touch fall in their cache lines, as measured best on two cores
// (BenchmarkAdaptive -cpu 2): the read-mostly ones from the middle of a
// line, inflight alone at the end of one, the release counters together in
// the next, the histogram from a line's start. A field added to Config
// moved them once, and acquire+release took 30% longer.
func TestHotFieldsLayout(t *testing.T) {
	var l Limiter
	if size := unsafe.Sizeof(l); size <= 1024 {
		t.Fatalf("a Limiter is %d bytes: the allocator aligns only objects over 1 KB to 64 bytes", size)
	}
	for _, f := range []struct {
		name string
		off  uintptr
		want uintptr
	}{
		{"limit", unsafe.Offsetof(l.limit), 32},
		{"inflight", unsafe.Offsetof(l.inflight), 56},
		{"admitted", unsafe.Offsetof(l.admitted), 0},
		{"winHist", unsafe.Offsetof(l.winHist), 0},
	} {
		if got := f.off % 64; got != f.want {
			t.Errorf("%s at offset %d, %d into its cache line, want %d", f.name, f.off, got, f.want)
		}
	}
}
