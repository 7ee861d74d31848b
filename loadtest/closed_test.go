package loadtest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestRunClosedSamplesTheAdminPort: a closed loop, as an open one does,
// reads a sluice admin port's /v1/state while it runs (the sweep's closed
// cells had no limit to show: a collapse at 1,024 connections could not be
// traced), and both forms of its summary carry the readings.
func TestRunClosedSamplesTheAdminPort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/state" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"adaptive":{"limit":7,"inflight":3},"queue":{"length":2}}`))
	}))
	defer admin.Close()
	s, err := loadtest.RunClosed(context.Background(), loadtest.ClosedOptions{
		Target: vegeta.Target{Method: http.MethodGet, URL: srv.URL}, Clients: 2, Duration: 300 * time.Millisecond,
		Admin: strings.TrimPrefix(admin.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	want := loadtest.AdminSample{Limit: 7, Inflight: 3, Queue: 2}
	if len(s.Admin) == 0 {
		t.Fatal("no admin sample")
	}
	if got := s.Admin[0]; got.Limit != want.Limit || got.Inflight != want.Inflight || got.Queue != want.Queue || got.T < 0 || got.T > 0.3 {
		t.Errorf("admin sample %+v, want %+v within the run", got, want)
	}
	if sum := s.Summary(); len(sum.Admin) != len(s.Admin) {
		t.Errorf("summary carries %d admin samples, want %d", len(sum.Admin), len(s.Admin))
	}
}

// TestRunClosedAnswersWhatItSent: each second of a closed loop counts the
// requests sent in it, so the requests still waiting when the sending
// ends are answered, not cancelled: a server answering in 300 ms, two
// clients for 500 ms, each sends at 0 and at 300 ms, and all four are
// answered. (Cancelled at the end, the last second of a 5 s run lost
// half its answers behind a limiter's queue, and the sweep read a closed
// loop served at the service's capacity as 0.93 of the proxy without a
// limit.)
func TestRunClosedAnswersWhatItSent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
	}))
	defer srv.Close()
	s, err := loadtest.RunClosed(context.Background(), loadtest.ClosedOptions{
		Target: vegeta.Target{Method: http.MethodGet, URL: srv.URL}, Clients: 2, Duration: 500 * time.Millisecond,
		Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.OK != 4 || s.Failed != 0 {
		t.Errorf("%d answered, %d failed; want the 4 sent answered (%+v)", s.OK, s.Failed, s)
	}
	if len(s.Seconds) != 1 || s.Seconds[0].OK != 4 {
		t.Errorf("seconds %+v, want one second of 4 answered", s.Seconds)
	}
	if s.GoodputRPS < 7 {
		t.Errorf("goodput %.1f/s, want 4 per 0.5 s of sending", s.GoodputRPS)
	}
}
