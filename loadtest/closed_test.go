package loadtest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/sluicehq/sluice/loadtest"
)

// TestRunClosed: a closed loop keeps exactly its clients in flight (never
// more), counts 2xx, 429/503 and other answers apart, and stops on time.
func TestRunClosed(t *testing.T) {
	var inflight, most, n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		switch n.Add(1) % 4 {
		case 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	s, err := loadtest.RunClosed(context.Background(), loadtest.ClosedOptions{
		Target: vegeta.Target{Method: http.MethodGet, URL: srv.URL}, Clients: 8, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if m := most.Load(); m > 8 || m < 2 {
		t.Errorf("at most %d in flight, want up to the 8 clients", m)
	}
	total := s.OK + s.Refused + s.Failed
	if s.OK == 0 || s.Refused == 0 || s.Failed == 0 || int64(total) > n.Load() {
		t.Errorf("summary %+v of %d answered: want 2xx, refusals and failures counted apart", s, n.Load())
	}
	// The per-second series adds up to the totals, and the open-loop form
	// of the summary says the same.
	var sok, srefused, sfailed int
	for _, sec := range s.Seconds {
		sok += sec.OK
		srefused += sec.Rejected + sec.Shed
		sfailed += sec.Other + sec.Errors
	}
	if len(s.Seconds) != 1 || sok != s.OK || srefused != s.Refused || sfailed != s.Failed || s.Seconds[0].Offered != total {
		t.Errorf("seconds %+v: want one second adding up to %d ok, %d refused, %d failed", s.Seconds, s.OK, s.Refused, s.Failed)
	}
	if s.OKLatency.P50 < 2 || s.Seconds[0].P99 < 2 {
		t.Errorf("ok latency %+v, second p99 %.2f ms: want at least the 2 ms the server waits", s.OKLatency, s.Seconds[0].P99)
	}
	if sum := s.Summary(); sum.OK != s.OK || sum.Rejected() != s.Refused || sum.Requests != total || len(sum.Seconds) != 1 {
		t.Errorf("open-loop form %+v: want the same counts as %+v", sum, s)
	}
	if s.Elapsed > 5*time.Second || s.GoodputRPS <= 0 {
		t.Errorf("summary %+v: want a run of about 300 ms with its goodput", s)
	}
	if _, err := loadtest.RunClosed(context.Background(), loadtest.ClosedOptions{Clients: 0, Duration: time.Second}); err == nil {
		t.Error("no clients: want an error")
	}
}
