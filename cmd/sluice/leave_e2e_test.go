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
// leaves the queue long before max_wait (at once, or on the fast engine
// 100 ms into its wait at the latest), and its request never reaches the
// service; requests pipelined behind a queued one are not
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

	// queued sends GET path on a connection of its own and returns the
	// connection once the request waits in the queue.
	queued := func(path string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", s.proxy)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: svc\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return queueLength(t, s) == 1 })
		return c
	}
	leaver := queued("/left")
	time.Sleep(1500 * time.Millisecond) // past read_timeout, still queued
	if n := queueLength(t, s); n != 1 {
		t.Fatalf("queue length %d after 1.5 s, want the request still waiting", n)
	}
	leaver.Close()
	waitFor(t, func() bool { return queueLength(t, s) == 0 })

	// One that leaves as soon as it is queued, before the fast engine
	// watches it (100 ms into its wait): it leaves then.
	queued("/left-early").Close()
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

// A client that closes its connection while its request is at the service
// closes the request's upstream connection (the service sees its request
// end, as nginx and net/http tell it) and gives back its adaptive slot at
// once, not when the service answers no one. On both proxy engines: the
// fast engine watches a request's client once it has been at the service
// for 100 ms.
func TestE2EClientLeavesWhileAtService(t *testing.T) {
	ended := make(chan struct{}, 1)
	holding := make(chan struct{}, 1)
	up := upstreamHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hold" {
			w.Write([]byte("ok"))
			return
		}
		holding <- struct{}{}
		select {
		case <-r.Context().Done():
			ended <- struct{}{}
		case <-time.After(30 * time.Second):
		}
	}))
	s := start(t, up, `
adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}
queue: {max_size: 10, max_wait: 30s, order: fifo}
`)
	for _, pause := range []time.Duration{0, 300 * time.Millisecond} {
		leaver, err := net.Dial("tcp", s.proxy)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaver.Write([]byte("GET /hold HTTP/1.1\r\nHost: svc\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		<-holding
		time.Sleep(pause) // before, then after, the fast engine's watch starts
		leaver.Close()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("left %v after the service took the request: the service's request did not end within 10 s", pause)
		}
		// The one slot is back: the next request is served at once.
		resp, body := get(t, "http://"+s.proxy+"/after")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("after the client left: %d %q", resp.StatusCode, body)
		}
	}
	waitFor(t, func() bool { return state(t, s).Adaptive.InFlight == 0 })
}
