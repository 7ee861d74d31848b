package daemon_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// On the fast engine, a pool of upstream connections that all went stale
// at once (an idle spell past the upstream's keep-alive timeout: nginx's
// is 75 s, Node's 5 s, the pool keeps them 90 s) costs the next burst no
// 502: each GET that finds a stale connection tries the next, until a
// live or a new one. (make bench-proxy found 32 of a 64-connection burst
// answered 502 after its rounds' idle spells, when a GET was retried
// once: its retry could find another stale connection.)
func TestFastEngineBurstAfterThePoolWentStale(t *testing.T) {
	const n = 32
	var arrived sync.WaitGroup
	arrived.Add(n)
	warm := make(chan struct{})
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			// Held until all n are in: n upstream connections at once.
			arrived.Done()
			<-warm
		}
		_, _ = io.WriteString(w, "ok")
	}))
	up.Start()
	defer up.Close()
	s := startServer(t, "upstream: "+up.URL+"\nproxy: {engine: fast}\nadaptive: {algorithm: off}\n")
	proxy, _ := s.Addrs()
	burst := func(path string, then func()) []string {
		var wg sync.WaitGroup
		got := make([]string, n)
		for i := range n {
			wg.Go(func() {
				c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				resp, err := c.Get("http://" + proxy + path)
				if err != nil {
					got[i] = err.Error()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				got[i] = fmt.Sprintf("%d %s", resp.StatusCode, body)
			})
		}
		if then != nil {
			then()
		}
		wg.Wait()
		return got
	}
	burst("/warm", func() { arrived.Wait(); close(warm) })
	// The upstream closes every idle connection, as its keep-alive
	// timeout would: the proxy's pool now holds n stale ones.
	up.Config.SetKeepAlivesEnabled(false)
	up.Config.SetKeepAlivesEnabled(true)
	bad := 0
	for _, g := range burst("/x", nil) {
		if g != "200 ok" {
			bad++
			t.Log(g)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d GETs after the pool went stale were not the service's 200", bad, n)
	}
}

// On the fast engine, a POST, which a proxy must not send twice, is not
// sent on a pooled connection the upstream has closed (its keep-alive
// timeout past): it reaches the service once, on a live connection, where
// it got 502 before.
func TestFastEnginePostAfterTheUpstreamClosedItsIdleConnections(t *testing.T) {
	var mu sync.Mutex
	posts := 0
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			posts++
			mu.Unlock()
		}
		_, _ = io.WriteString(w, "ok")
	}))
	closed := make(chan struct{}, 16)
	up.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed <- struct{}{}
		}
	}
	up.Start()
	defer up.Close()
	s := startServer(t, "upstream: "+up.URL+"\nproxy: {engine: fast}\nadaptive: {algorithm: off}\n")
	proxy, _ := s.Addrs()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 3 {
		resp, err := c.Get("http://" + proxy + "/warm") // leaves a pooled upstream connection
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		closeIdle(t, up, closed)
		resp, err = c.Post("http://"+proxy+"/order", "text/plain", strings.NewReader("one"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("POST %d after the upstream closed its idle connection: %d %q", i, resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 3 {
		t.Errorf("the service got %d POSTs, want 3", posts)
	}
}

// closeIdle makes up close its idle connection, as its keep-alive timeout
// would, and returns once it has (closed hears each close).
func closeIdle(t *testing.T, up *httptest.Server, closed <-chan struct{}) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		up.Config.SetKeepAlivesEnabled(false) // closes the idle connections
		up.Config.SetKeepAlivesEnabled(true)
		select {
		case <-closed:
			return
		case <-deadline:
			t.Fatal("the upstream did not close its idle connection")
		case <-time.After(5 * time.Millisecond):
			// Not idle yet (its answer just sent): again.
		}
	}
}
