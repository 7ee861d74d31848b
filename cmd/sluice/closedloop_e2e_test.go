package main_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/loadtest"
)

// TestE2EClosedLoopIsHeld: 400 clients that each send again as soon as they
// are answered (`sluice loadtest -clients`, wrk's model), in front of an
// adaptive limit of at most 50 and a queue of 100: 250 of them find no
// room. Refused, they would send again at once, over and over; sluice's
// hold test finds the closed loop and holds them in order
// (queue.closed_loop_max_size), so little is refused. With
// closed_loop_max_size 0 the same run refused 66,104 against 4,539 served.
func TestE2EClosedLoopIsHeld(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(up.Close)
	s := start(t, up.URL, "adaptive: {algorithm: gradient2, max_limit: 50}\n")
	// The client is the binary, as wrk would be: not slowed by the race
	// detector this test may run under.
	out, err := exec.Command(binary, "loadtest", "-target", "http://"+s.proxy+"/", "-clients", "400", "-duration", "4s").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice loadtest -clients: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var sum loadtest.ClosedSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	st := state(t, s)
	t.Logf("%s; queue %+v", lines[0], st.Queue)
	if sum.Clients != 400 || sum.OK == 0 || sum.Failed != 0 {
		t.Fatalf("closed loop: %+v", sum)
	}
	// Generous bounds: 2 cores shared by the clients, sluice and the service.
	if sum.Refused*4 > sum.OK {
		t.Errorf("refused %d against %d served, want under a quarter", sum.Refused, sum.OK)
	}
	if st.Queue == nil || st.Queue.ClosedLoops == 0 {
		t.Errorf("queue state %+v: want a hold test that found the closed loop", st.Queue)
	}
}
