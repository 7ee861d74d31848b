package queue

import (
	"testing"
	"time"
)

// hand returns the buckets tenant hashes to.
func hand(tenant uint64) [handSize]int {
	var out [handSize]int
	h := mix(tenant)
	for i := range out {
		out[i] = int((h >> (21 * i)) % fairBuckets)
	}
	return out
}

// A quiet tenant that shares one of its buckets with a flood goes to its
// other bucket even when the flood's bucket is empty for a moment and was
// not trimmed lately (it would have joined the flood's, the first of two
// equally short buckets), and the flood's mark fades once it stops. The
// flood keeps to one bucket of its hand, the first (all were alike).
func TestQuietTenantAvoidsTheFloodsBucket(t *testing.T) {
	const flood = 1
	fh := hand(flood)
	isFlood := func(b int) bool { return b == fh[0] }
	var quiet uint64
	var shared, other int
	for t := uint64(2); quiet == 0; t++ {
		// Its first bucket is one of the flood's, its others are not.
		if qh := hand(t); isFlood(qh[0]) && !isFlood(qh[1]) && !isFlood(qh[2]) && qh[1] != qh[2] {
			quiet, shared = t, qh[0]
			// Of its other two, the one it would pick: the shorter, else the first.
			other = qh[1]
		}
	}
	lv := newLevel[int](true)
	interval := int64(100 * time.Millisecond)
	now := int64(time.Hour)
	for range 100 { // the flood's arrivals; its waiters served at once, so its buckets are empty
		b := lv.bucketFor(flood, now-interval)
		if b != fh[0] {
			t.Fatalf("the flood joined bucket %d, want it to keep to %d", b, fh[0])
		}
		lv.arrive(b, flood, now, interval)
		now += int64(time.Millisecond)
	}
	if got := lv.bucketFor(quiet, now-interval); got != other {
		t.Fatalf("the quiet tenant joined bucket %d (the flood's are %v), want %d", got, fh, other)
	}
	// Once the flood has stopped for a few intervals, the quiet tenant keeps
	// to the bucket it joined; when another tenant took that one over, its
	// buckets are alike again: the first of equally short ones.
	now += 10 * interval
	lv.arrive(other, quiet, now, interval)
	if got := lv.bucketFor(quiet, now-interval); got != other {
		t.Fatalf("after the flood: bucket %d, want %d (the quiet tenant keeps to its own)", got, other)
	}
	lv.owner[other] = 0 // as if another tenant had joined it since
	if got := lv.bucketFor(quiet, now-interval); got != shared {
		t.Fatalf("after the flood: bucket %d, want %d (the counts decayed)", got, shared)
	}
}

// TestHoldTestBackoffRestartsAfterAClosedLoop: a hold test that fails
// waits 20 intervals for the next, then 80, then 160; one that finds a
// closed loop starts that sequence again, so that a closed loop lost
// later (its waiters timed out in a dip of the service) and tested again
// in a bad moment is retested in 2 s, not 8 s: refused meanwhile, its
// clients lose the goodput of those seconds.
func TestHoldTestBackoffRestartsAfterAClosedLoop(t *testing.T) {
	const interval = int64(100 * time.Millisecond)
	var g growth
	// test runs a hold test from now over two halves in which the level
	// grows by first and then second, after an interval that refused 100
	// and served 10, and returns the time it ended.
	test := func(now int64, first, second int) int64 {
		g.lost += 100
		g.served += 10
		if !g.holdTest(now, interval, 100) {
			t.Fatalf("no hold test at %d ms (%+v)", now/1e6, g)
		}
		g.holdTesting(now+interval/2, interval, 100+first, 100+first)
		g.holdTesting(now+interval, interval, 100+first+second, 100+first+second)
		return now + interval
	}
	now := 10 * interval
	g.markAt = now - interval
	now = test(now, 50, 60) // the pace holds: an open loop
	if want := now + 20*interval; g.nextTest != want || g.closed {
		t.Fatalf("after a failed test: next at %d ms, closed %v; want %d ms, false", g.nextTest/1e6, g.closed, want/1e6)
	}
	now = g.nextTest
	g.markAt = now - interval
	now = test(now, 200, 0) // held, the clients stop sending: a closed loop
	if !g.closed {
		t.Fatalf("a test whose growth stopped found no closed loop (%+v)", g)
	}
	g.drop(now+10*interval, 300) // lost later: its waiters timed out
	now += 11 * interval
	g.markAt = now - interval
	now = test(now, 50, 60)
	if want := now + 20*interval; g.nextTest != want {
		t.Errorf("a failed test after a closed loop: next in %d intervals, want 20", (g.nextTest-now)/interval)
	}
}
