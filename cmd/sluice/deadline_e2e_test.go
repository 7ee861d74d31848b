package main_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Through the binary, on both proxy engines: a client's deadline is passed
// upstream as what is left of it, a request whose deadline passes while it
// waits for a slot is refused then (503, reason deadline) and never reaches
// the service, and one whose deadline has passed is refused at once.
func TestE2EDeadlines(t *testing.T) {
	var mu sync.Mutex
	var seen []string // paths the service saw
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
		w.Header().Set("Seen-Timeout", r.Header.Get("X-Request-Timeout"))
		w.Header().Set("Seen-Grpc-Timeout", r.Header.Get("Grpc-Timeout"))
		w.Write([]byte("ok"))
	}))
	s := start(t, up, `
adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}
queue: {max_size: 10, max_wait: 30s, order: fifo}
`)
	send := func(path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		return get(t, "http://"+s.proxy+path, hdr...)
	}

	// Passed on: what is left, in the header's own format.
	resp, _ := send("/pass", "X-Request-Timeout", "5")
	if got, err := strconv.ParseFloat(resp.Header.Get("Seen-Timeout"), 64); err != nil || got > 5 || got < 4 {
		t.Errorf("the service saw X-Request-Timeout %q, want what is left of 5 s", resp.Header.Get("Seen-Timeout"))
	}
	resp, _ = send("/pass-grpc", "grpc-timeout", "5S")
	if v := resp.Header.Get("Seen-Grpc-Timeout"); !strings.HasSuffix(v, "m") {
		t.Errorf("the service saw grpc-timeout %q, want milliseconds left", v)
	} else if ms, err := strconv.Atoi(strings.TrimSuffix(v, "m")); err != nil || ms > 5000 || ms < 4000 {
		t.Errorf("the service saw grpc-timeout %q, want what is left of 5 s", v)
	}

	// The one slot held: a request with 300 ms to live is refused when
	// they are up, not after the queue's 30 s.
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer release()
	go func() {
		if resp, err := http.Get("http://" + s.proxy + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	<-holding
	begin := time.Now()
	resp, body := send("/late", "X-Request-Timeout", "300ms")
	took := time.Since(begin)
	if resp.StatusCode != 503 || !strings.Contains(body, `"reason":"deadline"`) {
		t.Errorf("a queued request past its deadline: %d %s, want 503 with reason deadline", resp.StatusCode, body)
	}
	if took < 250*time.Millisecond || took > 10*time.Second {
		t.Errorf("refused after %v, want at its deadline (300 ms), well before max_wait", took)
	}
	// Passed already: refused at once.
	resp, body = send("/gone", "X-Request-Timeout", "0")
	if resp.StatusCode != 503 || !strings.Contains(body, `"reason":"deadline"`) {
		t.Errorf("a request past its deadline on arrival: %d %s", resp.StatusCode, body)
	}
	release()
	mu.Lock()
	defer mu.Unlock()
	for _, p := range seen {
		if p == "/late" || p == "/gone" {
			t.Errorf("the service saw %s, refused for its deadline", p)
		}
	}
	if m := metric(t, s, `sluice_deadline_refused_total{where="queue"}`); m != "1" {
		t.Errorf("refused in the queue: %q, want 1", m)
	}
	if m := metric(t, s, `sluice_deadline_refused_total{where="arrival"}`); m != "1" {
		t.Errorf("refused on arrival: %q, want 1", m)
	}
}
