package main_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestE2EStreamsHoldNoAdaptivePlace: event streams and upgraded
// connections stay open through the proxy for as long as their clients
// want, more of them than the adaptive limit, and the service's other
// requests are still served: a stream gives its place back once the
// service has answered it (on either engine: the fast one answers event
// streams itself and hands upgrades to net/http).
func TestE2EStreamsHoldNoAdaptivePlace(t *testing.T) {
	hold := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-hold:
				return
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	mux.HandleFunc("/socket", func(w http.ResponseWriter, r *http.Request) { echoUpgraded(w) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(hold) })
	s := start(t, up.URL, "adaptive: {algorithm: fixed, initial_limit: 2, min_limit: 2, max_limit: 2}\nqueue: {max_size: 0}\n")

	var open []*bufio.Reader
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range 8 { // four of each, twice the limit
		path, hdr := "/events", ""
		if i%2 == 1 {
			path, hdr = "/socket", "Connection: Upgrade\r\nUpgrade: echo\r\n"
		}
		conn, err := net.Dial("tcp", s.proxy)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", path, hdr)
		br := bufio.NewReader(conn)
		status, err := br.ReadString('\n')
		if err != nil || !strings.Contains(status, map[bool]string{true: " 101 ", false: " 200 "}[i%2 == 1]) {
			t.Fatalf("stream %d (%s): %q %v", i, path, status, err)
		}
		open = append(open, br)
		resp, err := http.Get("http://" + s.proxy + "/next")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("with %d streams open: the next request got %d, want 200", i+1, resp.StatusCode)
		}
	}
	// The streams still flow both ways.
	for i, br := range open {
		if i%2 == 1 {
			fmt.Fprintf(conns[i], "ping\n")
		}
		want := map[bool]string{true: "echo:ping\n", false: "data: "}[i%2 == 1]
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if strings.HasPrefix(line, want) {
				break
			}
		}
	}
}
