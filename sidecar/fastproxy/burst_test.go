package fastproxy

import "testing"

// With more than one P there is no burst: a yield would wake an idle P
// for nothing. A nil burst counts and writes at once.
func TestBurstOnlyWithOneP(t *testing.T) {
	for _, procs := range []int{0, 2, 8} {
		if b := newBurst(procs); b != nil {
			t.Errorf("newBurst(%d) = %v, want nil", procs, b)
		}
	}
	var none *burst
	none.enter()
	none.join()
	if newBurst(1) == nil {
		t.Fatal("newBurst(1) = nil, want a burst")
	}
}

// joins counts the yields of n joins on b, whose yield lets others (a
// count) enter the handler.
func joins(b *burst, n int, others func() int) (yields int) {
	b.yield = func() {
		yields++
		for range others() {
			b.enter()
		}
	}
	for range n {
		b.join()
	}
	return yields
}

// Every write yields while each yield gathers others' answers.
func TestBurstYieldsWhileItGathers(t *testing.T) {
	b := newBurst(1)
	if got := joins(b, 100, func() int { return minBurst - 1 }); got != 100 {
		t.Errorf("%d yields in 100 writes that each gathered %d others, want 100", got, minBurst-1)
	}
}

// Yields that gather too little are followed by writes at once: 1, 3,
// 7 ... up to maxSkip of them; one that gathers a burst again ends that.
func TestBurstBacksOffIdleYields(t *testing.T) {
	b := newBurst(1)
	// Yields at writes 1, 3, 7, 15, 31, 63, 127 (after 1, 3, 7, 15, 31,
	// 63 writes at once), then every maxSkip+1: 192, 257, ... 1000.
	want := 7 + (1000-127)/(maxSkip+1)
	if got := joins(b, 1000, func() int { return minBurst - 2 }); got != want {
		t.Errorf("%d yields in 1000 writes that gathered too little, want %d", got, want)
	}
	// The next yield gathers a burst: the writes after it yield again.
	gathered := 0
	if got := joins(b, 200, func() int {
		gathered++
		return minBurst - 1
	}); got < 200-maxSkip || gathered != got {
		t.Errorf("%d yields in 200 writes once they gather again, want >= %d", got, 200-maxSkip)
	}
	if b.idle.Load() != 0 {
		t.Errorf("idle yields in a row = %d after one that gathered, want 0", b.idle.Load())
	}
}
