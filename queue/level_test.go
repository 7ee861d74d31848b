package queue

import (
	"testing"
	"time"
)

// pair returns the two buckets tenant hashes to.
func pair(tenant uint64) (int, int) {
	h := mix(tenant)
	return int(h % fairBuckets), int((h >> 32) % fairBuckets)
}

// A quiet tenant that shares one of its buckets with a flood goes to its
// other bucket even when the flood's bucket is empty for a moment and was
// not trimmed lately (it would have joined the flood's, the first of two
// equally short buckets), and the flood's mark fades once it stops.
func TestQuietTenantAvoidsTheFloodsBucket(t *testing.T) {
	const flood = 1
	fa, fb := pair(flood)
	var quiet uint64
	for t := uint64(2); quiet == 0; t++ {
		if a, b := pair(t); (a == fa || a == fb) && b != fa && b != fb {
			quiet = t // its first bucket is the flood's
		}
	}
	shared, other := pair(quiet)
	lv := newLevel[int](true)
	interval := int64(100 * time.Millisecond)
	now := int64(time.Hour)
	for range 100 { // the flood's arrivals; its waiters served at once, so its buckets are empty
		lv.arrive(lv.bucketFor(flood, now-interval), now, interval)
		now += int64(time.Millisecond)
	}
	if got := lv.bucketFor(quiet, now-interval); got != other {
		t.Fatalf("the quiet tenant joined bucket %d (the flood's are %d and %d), want its other one %d", got, fa, fb, other)
	}
	// Once the flood has stopped for a few intervals, both of the quiet
	// tenant's buckets are alike again: the first of two equally short.
	now += 10 * interval
	lv.arrive(other, now, interval)
	if got := lv.bucketFor(quiet, now-interval); got != shared {
		t.Fatalf("after the flood: bucket %d, want %d (the counts decayed)", got, shared)
	}
}
