package adaptive

import (
	"math/bits"
	"sync/atomic"
)

// histSub is the number of buckets per power of two: each bucket is at most
// 1/32 (3%) of its values wide, finer than the tolerances that read it.
const histSub = 32

// histBuckets covers 0 ns to 2^41 ns (about 36 minutes).
const histBuckets = 37 * histSub

// rttHistogram counts round-trip times in log-spaced buckets. Adding is one
// atomic increment, so releases record without a lock; a window's median
// (robust to a heavy tail, unlike the mean) is read when the window closes.
type rttHistogram struct {
	counts [histBuckets]atomic.Uint32
}

// bucketOf returns the bucket of ns: exact below histSub, then histSub
// buckets per octave.
func bucketOf(ns int64) int {
	if ns < histSub {
		return int(max(ns, 0))
	}
	o := bits.Len64(uint64(ns)) - 1 // >= 5
	sub := int(uint64(ns)>>(o-5)) & (histSub - 1)
	return min((o-4)*histSub+sub, histBuckets-1)
}

// bucketValue returns the middle of bucket i.
func bucketValue(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	o := i/histSub + 4
	lo := int64(histSub+i%histSub) << (o - 5)
	return lo + (int64(1)<<(o-5))/2
}

func (h *rttHistogram) add(ns int64) { h.counts[bucketOf(ns)].Add(1) }

// bucketOfRank returns the bucket holding the rank-th smallest value
// counted so far, or -1 when fewer are counted; it reads the counts
// without emptying them.
func (h *rttHistogram) bucketOfRank(rank int64) int {
	seen := int64(0)
	for i := range h.counts {
		if seen += int64(h.counts[i].Load()); seen >= rank {
			return i
		}
	}
	return -1
}

// take moves the counts into dst and empties h; it returns their total.
func (h *rttHistogram) take(dst *[histBuckets]uint32) int {
	n := 0
	for i := range h.counts {
		c := h.counts[i].Swap(0)
		dst[i] = c
		n += int(c)
	}
	return n
}

// quantile returns the q-quantile (0 < q < 1) of counts holding n values.
func quantile(counts *[histBuckets]uint32, n int, q float64) int64 {
	if n == 0 {
		return 0
	}
	rank := int(q*float64(n)) + 1
	seen := 0
	for i, c := range counts {
		seen += int(c)
		if seen >= rank {
			return bucketValue(i)
		}
	}
	return bucketValue(histBuckets - 1)
}
