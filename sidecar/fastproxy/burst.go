package fastproxy

import (
	"runtime"
	"sync/atomic"
)

// burst gathers the answers that become ready together into one burst of
// writes, as an event loop writes those of one readiness batch.
//
// A write to a client on the same machine wakes the client's reader. When
// that reader has gone idle on another CPU, waking it takes an
// inter-processor interrupt, which on a virtual machine costs more than
// the rest of the request: measured before nginx on this project's 2-core
// VM, a third of the fast engine's CPU a request went to these wake-ups,
// 0.35 interrupts a request against nginx's 0.04. Each handler wrote as
// soon as its own answer was ready, and the reader slept again between two
// writes. Yielding first lets the handlers the scheduler already holds run
// up to their own writes, so that the reader is woken once a burst.
//
// Two limits, both measured (BENCHMARKS.md, session 48):
//   - Only with one P (GOMAXPROCS=1, the sidecar on one CPU). With a P
//     idle, runtime.Gosched wakes it for the yielded goroutine: one request
//     at a time on two Ps cost 53 -> 76 us of CPU each. newBurst returns
//     nil then, and nil writes at once.
//   - A yield during which fewer than minBurst-1 other requests entered the
//     handler gathered too little to pay: with a yield before every write,
//     four clients cost up to a fifth more CPU a request (both sides sleep
//     between small bursts and wake each other). The writes after such a
//     yield go at once, 1, 3, 7 ... up to maxSkip of them as they repeat.
type burst struct {
	entered atomic.Uint64 // requests that entered the handler, ever
	skip    atomic.Int64  // writes left to go at once after idle yields
	idle    atomic.Int64  // idle yields in a row
	// yield gives the P to the goroutines waiting for it
	// (runtime.Gosched; a test's own).
	yield func()
}

// minBurst is the fewest answers, the yielding one included, a yield must
// gather to be worth it.
const minBurst = 3

// maxSkip bounds the writes that go at once after idle yields.
const maxSkip = 64

// newBurst returns the burst for a process of procs Ps (GOMAXPROCS): nil,
// no gathering, unless there is only one.
func newBurst(procs int) *burst {
	if procs != 1 {
		return nil
	}
	return &burst{yield: runtime.Gosched}
}

// enter counts a request entering the handler.
func (b *burst) enter() {
	if b != nil {
		b.entered.Add(1)
	}
}

// join is called before a write to a client: it yields, unless recent
// yields found nothing else to run.
func (b *burst) join() {
	if b == nil {
		return
	}
	if b.skip.Load() > 0 {
		b.skip.Add(-1)
		return
	}
	before := b.entered.Load()
	b.yield()
	if b.entered.Load()-before >= minBurst-1 {
		b.idle.Store(0)
		return
	}
	n := b.idle.Add(1)
	b.skip.Store(min(int64(1)<<min(n, 7)-1, maxSkip))
}
