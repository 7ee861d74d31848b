package adaptive

import (
	"math/rand/v2"
	"sort"
	"testing"
)

func TestBuckets(t *testing.T) {
	prev := -1
	for _, ns := range []int64{0, 1, 15, 16, 17, 31, 32, 1000, 20_000_000, 1 << 40, 1 << 50} {
		b := bucketOf(ns)
		if b < prev {
			t.Fatalf("bucketOf not monotonic at %d", ns)
		}
		prev = b
		if ns > 0 && ns < 1<<40 {
			if v := bucketValue(b); float64(v) < 0.96*float64(ns) || float64(v) > 1.04*float64(ns) {
				t.Errorf("bucketValue(bucketOf(%d)) = %d: off by more than 4%%", ns, v)
			}
		}
	}
}

// The histogram's median is within a bucket of the exact one.
func TestHistogramMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h rttHistogram
	xs := make([]int64, 1001)
	for i := range xs {
		xs[i] = int64(20e6 * rng.ExpFloat64())
		h.add(xs[i])
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	var c [histBuckets]uint32
	n := h.take(&c)
	got, want := quantile(&c, n, 0.5), xs[500]
	if float64(got) < 0.94*float64(want) || float64(got) > 1.06*float64(want) {
		t.Errorf("median %d, exact %d", got, want)
	}
	if h.take(&c) != 0 {
		t.Error("take did not empty the histogram")
	}
}
