package sidecar_test

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

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sidecar"
)

// TestStreamsFreeTheirAdaptivePlace: an event stream, a hijacked
// connection (a WebSocket) and a stream flushed before its first write
// stay open, yet each gives its adaptive place back once answered: with
// the limit at 1 and no queue, the next request is served, not shed.
func TestStreamsFreeTheirAdaptivePlace(t *testing.T) {
	e := newEngine(t, "adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}\nqueue: {max_size: 0}\n", sluice.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	hold := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: 0\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/flushed", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/socket", func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		buf.Flush()
		<-hold
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(sidecar.Middleware(e, mux))
	defer srv.Close()
	defer close(hold)

	var open []io.Closer
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for _, path := range []string{"/events", "/flushed", "/socket"} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, conn)
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", path)
		status, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !(strings.Contains(status, " 200 ") || strings.Contains(status, " 101 ")) {
			t.Fatalf("%s: %q %v", path, status, err)
		}
		// The stream stays open; the next request gets the one place.
		resp, err := http.Get(srv.URL + "/next")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("with %s open: the next request got %d, want 200 (the stream still holds the adaptive place)", path, resp.StatusCode)
		}
	}
	if n := e.State().Adaptive.InFlight; n != 0 {
		t.Fatalf("%d in the adaptive limit with only streams open, want 0", n)
	}
}
