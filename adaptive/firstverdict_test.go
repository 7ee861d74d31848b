package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// firstAnswered returns a limiter at limit whose first 20 requests were
// admitted at concurrencies 1-20 at the clock's start and took rtt(i).
func firstAnswered(t *testing.T, limit int, rtt func(i int) time.Duration) (*Limiter, int64) {
	t.Helper()
	clock := sluice.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := New(Config{Algorithm: &Gradient2{}, Clock: clock, InitialLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	f := &l.first
	if f.want != 20 {
		t.Fatalf("the first %d requests measured, want 20", f.want)
	}
	start := clock.Now().UnixNano()
	f.n.Store(20)
	for i := range 20 {
		f.in[i].Store(int64(i + 1))
		f.at[i].Store(start)
		f.rtt[i].Store(int64(rtt(i)))
	}
	return l, start
}

// TestFirstRequestsDoubleOnlyWhatTheyAnswered: the first requests' verdict
// (no queue at the 20 they were admitted at) takes the limit to at most
// twice 20 when the window that reads it shows a queue at the limit in
// force, as slow start doubles at most twice what was answered; and to
// twice the limit when that window shows none. Through the binary, before
// 20 slots of 40 ms at twice their capacity, slow start took 20 to 40 on
// the first window, and the verdict, a window later, on a window at 1.5x
// their RTT, took 40 to 80: a queue of 60, and the first second's p99 was
// 257 ms.
func TestFirstRequestsDoubleOnlyWhatTheyAnswered(t *testing.T) {
	for _, c := range []struct {
		window time.Duration
		want   float64
	}{{150 * time.Millisecond, 40}, {105 * time.Millisecond, 80}} {
		l, start := firstAnswered(t, 40, func(i int) time.Duration { return 100*time.Millisecond + time.Duration(i)*time.Millisecond/10 })
		now := start + int64(300*time.Millisecond)
		l.mu.Lock()
		measured, _ := l.firstMeasured(now, Sample{RTT: c.window, Successes: 50, MaxInFlight: 40}, false)
		got := l.estimate
		l.mu.Unlock()
		if !measured || got != c.want {
			t.Errorf("a window at %v after the first 20 answered in 100 ms: measured %v, limit %v; want the baseline and %v", c.window, measured, got, c.want)
		}
	}
}

// TestFirstRequestsBaselineIsTheFasterHalf: when the later half of the
// first requests (the higher concurrency) answers faster than the
// earlier, what slowed the earlier was no queue (a cold start: new
// connections, a service warming up), and the later half's median is the
// baseline. Through the binary the earlier half before 20 slots of 40 ms
// read 47-50 ms, the later 42 ms, a probe 36-37 ms; from 50 ms, slow
// start read a window at 57 ms (40 in flight on 20 slots) as no queue and
// doubled 40 to 80.
func TestFirstRequestsBaselineIsTheFasterHalf(t *testing.T) {
	l, start := firstAnswered(t, 20, func(i int) time.Duration {
		if i < 10 {
			return 50 * time.Millisecond
		}
		return 42 * time.Millisecond
	})
	l.mu.Lock()
	measured, _ := l.firstMeasured(start+int64(300*time.Millisecond), Sample{RTT: 45 * time.Millisecond, Successes: 50, MaxInFlight: 20}, false)
	base := l.baseline
	l.mu.Unlock()
	if !measured || base != float64(42*time.Millisecond) {
		t.Errorf("measured %v, baseline %v; want the later half's 42 ms", measured, time.Duration(base))
	}
}
