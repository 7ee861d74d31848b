package backend

import (
	"container/heap"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// preciseSleeper sleeps to within a fraction of a millisecond. Go's own
// timers wake up to a millisecond late while the process is idle (the
// runtime's poller waits in whole milliseconds: time.Sleep of 300 us took
// 1.1 ms on the machine BENCHMARKS.md uses, and of 1.3 ms, 2.15 ms), which
// made the sweep's short services serve 65-86% of their nominal capacity.
// A sleep takes Go's timer for all but its last two milliseconds, then
// waits for one goroutine that, on its own thread, sleeps with the
// operating system's high-resolution timer in steps of at most
// preciseStep and wakes each sleeper whose time has come. That goroutine
// runs only while someone sleeps.
type preciseSleeper struct {
	mu      sync.Mutex
	due     dueHeap
	running bool // the waking goroutine runs
}

// preciseStep bounds how late a sleeper with an earlier time than those
// already waiting is woken; coarse is what is left to Go's timer.
const (
	preciseStep = 200 * time.Microsecond
	coarse      = 2 * time.Millisecond
)

func newPreciseSleeper() *preciseSleeper { return &preciseSleeper{} }

// sleep returns d after it was called, give or take a fraction of a
// millisecond.
func (p *preciseSleeper) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	at := time.Now().Add(d)
	if d > coarse {
		time.Sleep(d - coarse)
	}
	if time.Until(at) <= 0 {
		return
	}
	ch := make(chan struct{})
	p.mu.Lock()
	heap.Push(&p.due, dueAt{at: at, ch: ch})
	if !p.running {
		p.running = true
		go p.run()
	}
	p.mu.Unlock()
	<-ch
}

// run wakes the sleepers as their times come, until none is left.
func (p *preciseSleeper) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	preciseThread()
	for {
		p.mu.Lock()
		now := time.Now()
		for len(p.due) > 0 && !p.due[0].at.After(now) {
			close(heap.Pop(&p.due).(dueAt).ch)
		}
		if len(p.due) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		// A sleeper that comes meanwhile with an earlier time is seen
		// within preciseStep.
		wait := min(p.due[0].at.Sub(now), preciseStep)
		p.mu.Unlock()
		ts := syscall.NsecToTimespec(int64(wait))
		_ = syscall.Nanosleep(&ts, nil) // an interrupted sleep only looks again sooner
	}
}

// dueAt is a sleeper: when it wakes, and its channel, closed then.
type dueAt struct {
	at time.Time
	ch chan struct{}
}

// dueHeap orders sleepers by time (container/heap).
type dueHeap []dueAt

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueAt)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = dueAt{}
	*h = old[:len(old)-1]
	return x
}
