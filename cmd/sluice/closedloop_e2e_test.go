package main_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
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
	// Until the hold test finds the closed loop (on a loaded machine the
	// clients may take a second or two to connect, and a test during that
	// ramp sees growth), the surplus is refused; from then on, next to
	// nothing is.
	at, out := closedLoopClient(t, s, 4*time.Second, "-clients", "400", "-duration", "5s")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var sum loadtest.ClosedSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	end := state(t, s).Queue
	t.Logf("%s; queue when the closed loop was found %+v, at the end %+v", lines[0], at, end)
	if sum.Clients != 400 || sum.OK == 0 || sum.Failed != 0 {
		t.Fatalf("closed loop: %+v", sum)
	}
	if at == nil {
		t.Fatalf("no hold test found the closed loop in 4 s: queue %+v", end)
	}
	// Generous bounds: 2 cores shared by the clients, sluice and the service.
	refused, served := (end.Full+end.Dropped)-(at.Full+at.Dropped), end.Served-at.Served
	if refused*4 > served {
		t.Errorf("after the closed loop was found: %d refused against %d served from the queue, want under a quarter", refused, served)
	}
}

// TestE2EClosedLoopHeldPastMaxWait: 1,024 clients in a closed loop before
// a service that is truly saturated (8 slots of 5 ms: 1,600 a second) and
// a limit of at most 16, so that about 1,000 wait in sluice's queue, 0.63 s
// each in order: past max_wait (500 ms). A refused client sends again at
// once, so refusing frees no room; the held loop's waiters wait up to
// queue.closed_loop_max_wait (1 s) instead and none times out. Before,
// about half as many timed out as the queue served (4,022 against 8,609).
// (make test runs it on both proxy engines.)
func TestE2EClosedLoopHeldPastMaxWait(t *testing.T) {
	slots := make(chan struct{}, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		time.Sleep(5 * time.Millisecond)
		<-slots
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(up.Close)
	s := start(t, up.URL, "adaptive: {algorithm: gradient2, max_limit: 16}\n")
	at, _ := closedLoopClient(t, s, 5*time.Second, "-clients", "1024", "-duration", "5s", "-timeout", "5s")
	end := state(t, s).Queue
	t.Logf("queue when the closed loop was found %+v, at the end %+v", at, end)
	if at == nil {
		t.Fatalf("no hold test found the closed loop in 5 s: queue %+v", end)
	}
	// Generous: a few may still time out while the limiter's probes move
	// the loop's wait about on 2 shared cores.
	timeouts, served := end.Timeouts-at.Timeouts, end.Served-at.Served
	if served == 0 || timeouts*50 > served {
		t.Errorf("after the closed loop was found: %d timed out against %d served from the queue, want under 2%%", timeouts, served)
	}
}

// closedLoopClient runs `sluice loadtest` (args: its closed loop's flags)
// against s to its end, and returns the queue's state when it first held
// a closed loop (polled for at most within; nil if it never did) and what
// the client printed. The client is the binary, as wrk would be: not
// slowed by the race detector the test may run under.
func closedLoopClient(t *testing.T, s *sluice, within time.Duration, args ...string) (*engine.QueueState, string) {
	t.Helper()
	client := exec.Command(binary, append([]string{"loadtest", "-target", "http://" + s.proxy + "/"}, args...)...)
	var out bytes.Buffer
	client.Stdout, client.Stderr = &out, &out
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	var at *engine.QueueState
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if q := state(t, s).Queue; q != nil && q.ClosedLoop {
			at = q
			break
		}
	}
	if err := client.Wait(); err != nil {
		t.Fatalf("sluice loadtest %v: %v\n%s", args, err, out.String())
	}
	return at, out.String()
}
