package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestLatencyHistogramExportsAsClientGolangDoes: the striped histogram
// exports what prometheus.NewHistogram exports for the same durations,
// observed from several goroutines: the same buckets (le inclusive, a
// value on a bound counts in that bound's bucket), count and sum.
func TestLatencyHistogramExportsAsClientGolangDoes(t *testing.T) {
	bounds := []float64{.00001, .00005, .0001, .0005, .001, .0025, .005, .01, .025, .05, .1}
	ours := newLatencyHistogram("test_seconds", "test", bounds)
	theirs := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_seconds", Help: "test", Buckets: bounds})
	durations := []time.Duration{0, -time.Microsecond, 10 * time.Microsecond, 10*time.Microsecond + 1, 3 * time.Microsecond,
		time.Millisecond, 2500 * time.Microsecond, 99 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Hour}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				d := durations[(i+g)%len(durations)]
				ours.Observe(d)
				theirs.Observe(d.Seconds())
			}
		})
	}
	wg.Wait()
	got, want := export(t, ours), export(t, theirs)
	if got.GetSampleCount() != want.GetSampleCount() || got.GetSampleCount() != 4000 {
		t.Errorf("count %d, client_golang %d (want 4000)", got.GetSampleCount(), want.GetSampleCount())
	}
	if d := got.GetSampleSum() - want.GetSampleSum(); d > 1e-6 || d < -1e-6 {
		t.Errorf("sum %v, client_golang %v", got.GetSampleSum(), want.GetSampleSum())
	}
	if len(got.Bucket) != len(want.Bucket) {
		t.Fatalf("%d buckets, client_golang %d", len(got.Bucket), len(want.Bucket))
	}
	for i := range got.Bucket {
		if got.Bucket[i].GetUpperBound() != want.Bucket[i].GetUpperBound() || got.Bucket[i].GetCumulativeCount() != want.Bucket[i].GetCumulativeCount() {
			t.Errorf("bucket le=%v: %d, client_golang le=%v: %d", got.Bucket[i].GetUpperBound(), got.Bucket[i].GetCumulativeCount(),
				want.Bucket[i].GetUpperBound(), want.Bucket[i].GetCumulativeCount())
		}
	}
}

// export gathers c's one histogram.
func export(t *testing.T, c prometheus.Collector) *dto.Histogram {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil || len(families) != 1 || len(families[0].Metric) != 1 {
		t.Fatalf("gather: %v, %v", families, err)
	}
	return families[0].Metric[0].GetHistogram()
}
