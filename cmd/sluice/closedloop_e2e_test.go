package main_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/sluicehq/sluice/loadtest"
)

// TestE2EClosedLoopIsHeld: 400 clients that each send again as soon as they
// are answered (wrk's model), in front of an adaptive limit of at most 50
// and a queue of 100: 250 of them find no room. Refused, they would send
// again at once, over and over; sluice's hold test finds the closed loop and
// holds them in order (queue.closed_loop_max_size), so almost nothing is
// refused and the run's goodput is the service's.
func TestE2EClosedLoopIsHeld(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(up.Close)
	s := start(t, up.URL, "adaptive: {algorithm: gradient2, max_limit: 50}\n")
	sum, err := loadtest.RunClosed(context.Background(), loadtest.ClosedOptions{
		Target: vegeta.Target{Method: "GET", URL: "http://" + s.proxy + "/"}, Clients: 400, Duration: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := state(t, s)
	t.Logf("closed loop of 400: %+v; queue %+v", sum, st.Queue)
	if sum.OK == 0 || sum.Failed != 0 {
		t.Fatalf("closed loop: %+v", sum)
	}
	// Bounds are generous (2 cores shared by the clients, sluice and the
	// service): before the hold test, the refused outnumbered the served
	// several times over.
	if sum.Refused*4 > sum.OK {
		t.Errorf("refused %d against %d served, want under a quarter", sum.Refused, sum.OK)
	}
	if st.Queue == nil || st.Queue.ClosedLoops == 0 {
		t.Errorf("queue state %+v: want a hold test that found the closed loop", st.Queue)
	}
}
