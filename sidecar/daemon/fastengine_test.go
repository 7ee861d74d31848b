package daemon_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Under the race detector, in one process: on the fast engine many queued
// requests whose clients leave give their places back while the others
// wait on, and a shutdown with requests still queued ends them all (no
// watch outlives its request).
func TestFastEngineQueuedClientsLeaveAndShutdown(t *testing.T) {
	hold := make(chan struct{})
	var served atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-hold
		}
		served.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	defer up.Close()
	defer func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	}()
	s := startServer(t, "upstream: "+up.URL+`
proxy: {engine: fast}
adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}
queue: {max_size: 100, max_wait: 30s, order: fifo}
`)
	proxy, _ := s.Addrs()
	queued := func() int {
		if q := s.Engine.State().Queue; q != nil {
			return q.Length
		}
		return -1
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 10 s (queue %d)", what, queued())
			}
		}
	}
	go func() {
		if resp, err := http.Get("http://" + proxy + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	waitUntil("held request", func() bool { return s.Engine.State().Adaptive.InFlight == 1 })
	const n = 20
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET /q HTTP/1.1\r\nHost: svc\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	waitUntil("20 queued", func() bool { return queued() == n })
	var wg sync.WaitGroup
	for i := 0; i < n; i += 2 {
		wg.Add(1)
		go func() { defer wg.Done(); conns[i].Close() }()
	}
	wg.Wait()
	waitUntil("the leavers gone", func() bool { return queued() == n/2 })

	// Shut down with ten still queued: they end (503 or a closed
	// connection), the held one completes, and Shutdown returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	close(hold)
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for i := 1; i < n; i += 2 {
		_ = conns[i].SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conns[i]), nil)
		if err == nil {
			resp.Body.Close()
		}
	}
	if got := served.Load(); got > 1+n/2 {
		t.Errorf("the service served %d requests, want at most the held one and those that stayed (%d)", got, 1+n/2)
	}
}
