package main_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestE2EPauseIsServed: a service that pauses for 300 ms (a GC, a
// failover) under a steady load at a tenth of its capacity. Without a
// sidecar every request is served, the ones sent into the pause about
// 300 ms late. Through sluice, the queue read the backlog the pause left
// (it grew with nothing served) as an open-loop overload and dropped it
// once the pause ended, with a 503 for each: 59-60 of the 360 here. It is
// now held and served in order (queue.pauses counts the pause).
func TestE2EPauseIsServed(t *testing.T) {
	var pause atomic.Pointer[chan struct{}]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ch := pause.Load(); ch != nil {
			<-*ch
		}
		time.Sleep(2 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	// A fixed limit: the queue, not the adaptive algorithm, is what is
	// tested.
	s := start(t, up.URL, "adaptive: {algorithm: fixed, initial_limit: 8, min_limit: 8, max_limit: 8}\n")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	t.Cleanup(client.CloseIdleConnections)
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	send := func() {
		defer wg.Done()
		resp, err := client.Get("http://" + s.proxy + "/")
		if err != nil {
			failed.Add(1)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			ok.Add(1)
		} else {
			failed.Add(1)
		}
	}
	// 300 requests a second for 1.2 s, the service pausing from 300 ms
	// to 600 ms: its first pause, before any request waited (the queue
	// has no gaps between releases timed yet, only the round trip).
	begin := time.Now()
	paused := false
	for i := range 360 {
		at := begin.Add(time.Duration(i) * time.Second / 300)
		time.Sleep(time.Until(at))
		since := time.Since(begin)
		switch {
		case !paused && since >= 300*time.Millisecond:
			ch := make(chan struct{})
			pause.Store(&ch)
			paused = true
		case paused && pause.Load() != nil && since >= 600*time.Millisecond:
			close(*pause.Swap(nil))
		}
		wg.Add(1)
		go send()
	}
	if ch := pause.Swap(nil); ch != nil {
		close(*ch)
	}
	wg.Wait()
	if n := failed.Load(); n > 4 {
		t.Errorf("%d of 360 requests refused or failed around a 300 ms pause at a tenth of the capacity (%d served); want at most 4", n, ok.Load())
	}
	if got := metric(t, s, "sluice_queue_pauses_total"); got == "" || got == "0" {
		t.Errorf("sluice_queue_pauses_total = %q, want the pause counted", got)
	}
}
