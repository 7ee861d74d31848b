package main_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// queueLength is /v1/state's queue length.
func queueLength(t *testing.T, s *sluice) int {
	t.Helper()
	if q := state(t, s).Queue; q != nil {
		return q.Length
	}
	return -1
}

// A client that closes its connection while its request waits in the queue
// leaves the queue at once (long before max_wait), and its request never
// reaches the service; requests pipelined behind a queued one are not
// taken for a departure and are all answered. On both proxy engines.
func TestE2EClientLeavesQueue(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	hold := make(chan struct{})
	holding := make(chan struct{}, 1)
	up := upstreamHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/hold" {
			holding <- struct{}{}
			<-hold
		}
		w.Write([]byte("ok"))
	}))
	// read_timeout is shorter than the wait: the watch of a queued request
	// outlives the request's read deadline.
	s := start(t, up, `
read_timeout: 1s
adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}
queue: {max_size: 10, max_wait: 30s, order: fifo}
`)
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer release()
	holder := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.proxy + "/hold")
		if err == nil {
			resp.Body.Close()
		}
		holder <- err
	}()
	<-holding // the one slot is taken

	leaver, err := net.Dial("tcp", s.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaver.Write([]byte("GET /left HTTP/1.1\r\nHost: svc\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return queueLength(t, s) == 1 })
	time.Sleep(1500 * time.Millisecond) // past read_timeout, still queued
	if n := queueLength(t, s); n != 1 {
		t.Fatalf("queue length %d after 1.5 s, want the request still waiting", n)
	}
	leaver.Close()
	waitFor(t, func() bool { return queueLength(t, s) == 0 })

	// Two requests pipelined on one connection while the slot is held: the
	// second one's bytes must not read as the client leaving.
	piped, err := net.Dial("tcp", s.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer piped.Close()
	if _, err := piped.Write([]byte("GET /p1 HTTP/1.1\r\nHost: svc\r\n\r\nGET /p2 HTTP/1.1\r\nHost: svc\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return queueLength(t, s) == 1 })
	release()
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	_ = piped.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(piped)
	for _, path := range []string{"/p1", "/p2"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	resp, body := get(t, "http://"+s.proxy+"/after")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("after: %d %q", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, " "); got != "/hold /p1 /p2 /after" {
		t.Errorf("the service saw %q, want /hold /p1 /p2 /after (never /left)", got)
	}
}
