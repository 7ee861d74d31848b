package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rawserver"
)

// On the fast engine, every framing of an upstream answer reaches the
// client whole, and the upstream connection is reused after each that
// can be reused: known lengths under and over the buffered size, chunked,
// HEAD, 204 and 304, answered at once or after the client's watch has
// started (past 100 ms at the service). An answer that ends with its
// connection (no length) is not reused. Under the race detector.
func TestFastEngineUpstreamFramingAndReuse(t *testing.T) {
	var conns atomic.Int64
	big := strings.Repeat("b", 200<<10)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			time.Sleep(150 * time.Millisecond) // the client's watch starts
		}
		switch r.URL.Path {
		case "/small":
			_, _ = io.WriteString(w, "small")
		case "/big":
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			_, _ = io.WriteString(w, big)
		case "/chunked":
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/eof":
			c, bw, _ := w.(http.Hijacker).Hijack()
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\n\r\nto the end")
			_ = bw.Flush()
			c.Close()
		}
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	s := startServer(t, "upstream: "+up.URL+"\nproxy: {engine: fast}\nadaptive: {algorithm: off}\n")
	proxy, _ := s.Addrs()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	cases := []struct{ method, path, want string }{
		{"GET", "/small", "small"}, {"GET", "/big", big}, {"GET", "/chunked", "part0;part1;part2;"},
		{"HEAD", "/small", ""}, {"GET", "/204", ""}, {"GET", "/304", ""},
	}
	for round := range 2 {
		for _, slow := range []string{"", "1"} {
			for _, k := range cases {
				fmt.Fprintf(c, "%s %s?slow=%s HTTP/1.1\r\nHost: svc\r\n\r\n", k.method, k.path, slow)
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(br, &http.Request{Method: k.method})
				if err != nil {
					t.Fatalf("%s %s slow=%q: %v", k.method, k.path, slow, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(body) != k.want {
					t.Fatalf("%s %s slow=%q round %d: body %d bytes, err %v; want %d bytes", k.method, k.path, slow, round, len(body), err, len(k.want))
				}
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d upstream connections for 24 answers that keep theirs, want 1", n)
	}
	for i := range 2 {
		resp, err := http.Get("http://" + proxy + "/eof")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "to the end" {
			t.Fatalf("an answer that ends with its connection, %d: %d %q %v", i, resp.StatusCode, body, err)
		}
	}
	// The first took the kept connection and ended it, the second a new
	// one; the next request needs a third.
	if resp, err := http.Get("http://" + proxy + "/small"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the answers that end their connections: %v", err)
	} else {
		resp.Body.Close()
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d upstream connections after two answers that end theirs and one more, want 3", n)
	}
}

// On the fast engine, clients that leave while their requests are at the
// service (before and after their watch starts) end those requests there
// and give back their slots, while the requests of clients that stay are
// answered, under the race detector.
func TestFastEngineClientsLeaveAtService(t *testing.T) {
	var started, ended, answered atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		select {
		case <-r.Context().Done():
			ended.Add(1)
		case <-time.After(300 * time.Millisecond):
			answered.Add(1)
			_, _ = io.WriteString(w, "ok")
		}
	}))
	defer up.Close()
	s := startServer(t, "upstream: "+up.URL+`
proxy: {engine: fast}
adaptive: {algorithm: fixed, initial_limit: 40, min_limit: 40, max_limit: 40}
`)
	proxy, _ := s.Addrs()
	const n = 30
	var wg sync.WaitGroup
	var stayedOK atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", proxy)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: svc\r\n\r\n")
			if i%3 == 0 { // stays
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == 200 {
					stayedOK.Add(1)
				}
				return
			}
			time.Sleep(time.Duration(i%3) * 90 * time.Millisecond) // 90 or 180 ms: before and after the watch starts
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for s.Engine.State().Adaptive.InFlight != 0 || started.Load() != ended.Load()+answered.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d; the service started %d, ended %d, answered %d", s.Engine.State().Adaptive.InFlight, started.Load(), ended.Load(), answered.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if stayedOK.Load() != n/3 {
		t.Errorf("%d of the %d clients that stayed were answered", stayedOK.Load(), n/3)
	}
	if got := ended.Load(); got != n-n/3 {
		t.Errorf("the service saw %d requests end before their answer, want the %d whose clients left", got, n-n/3)
	}
}

// On the fast engine, a GET sent on a pooled upstream connection that the
// upstream had closed meanwhile (its keep-alive timeout racing ours) never
// reached the service: it is sent again once, on a new connection, and the
// client gets the service's answer, not a 502.
func TestFastEngineRetriesAGetOnAStaleConnection(t *testing.T) {
	var served atomic.Int64
	addr := rawserver.Start(t, func(c net.Conn) {
		// One answer, promising keep-alive, then the connection ends.
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		served.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	s := startServer(t, "upstream: http://"+addr+"\nproxy: {engine: fast}\nadaptive: {algorithm: off}\n")
	proxy, _ := s.Addrs()
	for i := range 10 {
		resp, err := http.Get("http://" + proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("GET %d: %d %q, want the service's 200", i, resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond) // the upstream's close arrives before the next request
	}
	if n := served.Load(); n != 10 {
		t.Errorf("the service served %d requests, want 10", n)
	}
}

// On the fast engine, a request pipelined behind one still at the service
// past the client watch's start is not read as its client leaving: both
// are answered, in order.
func TestFastEnginePipelinedBehindASlowRequest(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(300 * time.Millisecond) // past the watch's start
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	defer up.Close()
	s := startServer(t, "upstream: "+up.URL+"\nproxy: {engine: fast}\n")
	proxy, _ := s.Addrs()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: svc\r\n\r\nGET /next HTTP/1.1\r\nHost: svc\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, want := range []string{"/slow", "/next"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("%s: %d %q", want, resp.StatusCode, body)
		}
	}
}

// On the fast engine, a graceful shutdown lets a request already at the
// service finish, and its client gets the answer, also once the client
// watch has started (past 100 ms at the service): the server shutting
// down is not the client leaving. A request still queued is ended with a
// 503, not an empty 200.
func TestFastEngineShutdownLetsARequestAtTheServiceFinish(t *testing.T) {
	at := make(chan struct{}, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at <- struct{}{}
		time.Sleep(400 * time.Millisecond)
		_, _ = io.WriteString(w, "done")
	}))
	defer up.Close()
	s := startServer(t, "upstream: "+up.URL+`
proxy: {engine: fast}
adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}
queue: {max_size: 10, max_wait: 30s, order: fifo}
`)
	proxy, _ := s.Addrs()
	send := func() chan string {
		got := make(chan string, 1)
		go func() {
			resp, err := http.Get("http://" + proxy + "/slow")
			if err != nil {
				got <- "error"
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got <- fmt.Sprint(resp.StatusCode, " ", string(body))
		}()
		return got
	}
	first := send()
	<-at
	queued := send()
	for deadline := time.Now().Add(5 * time.Second); s.Engine.State().Queue.Length != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second request did not queue")
		}
	}
	time.Sleep(200 * time.Millisecond) // the first one's watch has started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if g := <-first; g != "200 done" {
		t.Errorf("the request at the service when the server shut down got %q, want 200 done", g)
	}
	if g := <-queued; !strings.HasPrefix(g, "503 ") && g != "error" {
		t.Errorf("the request queued when the server shut down got %q, want a 503 (or its connection closed)", g)
	}
}
