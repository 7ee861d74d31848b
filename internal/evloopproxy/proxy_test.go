package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// startProxy runs the proxy before upstream on a free loopback port, with
// the configuration yaml when not empty, until the test ends.
func startProxy(t *testing.T, upstream, yaml string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := ""
	if yaml != "" {
		cfg = filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, ready := make(chan error, 1), make(chan struct{})
	go func() { done <- run(ctx, addr, upstream, cfg, func() { close(ready) }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the proxy did not stop")
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the proxy did not start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not start in 10 s")
	}
	return addr
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// TestForwardsOnOneConnection: requests on one keep-alive connection reach
// the upstream with an X-Forwarded-For, and their answers come back whole
// and in order.
func TestForwardsOnOneConnection(t *testing.T) {
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("X-Forwarded-For"))
		_, _ = io.WriteString(w, "answer to "+r.URL.Path)
	}))
	defer up.Close()
	addr := startProxy(t, up.Listener.Addr().String(), "")
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	for _, path := range []string{"/a", "/b", "/c"} {
		resp, body := get(t, c, "http://"+addr+path)
		if resp.StatusCode != 200 || body != "answer to "+path {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	for _, v := range seen {
		if v != "127.0.0.1" {
			t.Errorf("X-Forwarded-For %q, want 127.0.0.1", v)
		}
	}
}

// TestDecidesWithTheEngine: with a configuration, the engine decides each
// request on the loop: the quota headers ride on the answer, and the
// request over the quota is refused without reaching the upstream.
func TestDecidesWithTheEngine(t *testing.T) {
	hits := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	addr := startProxy(t, up.Listener.Addr().String(), `
adaptive: {algorithm: off}
rules:
  - {rule_id: two, identifier_type: ip_address, algorithm: fixed_window, limit: 2, window: 1h}
`)
	c := &http.Client{}
	var codes []int
	for range 3 {
		resp, _ := get(t, c, "http://"+addr+"/x")
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 200 && resp.Header.Get("X-Ratelimit-Limit") != "2" {
			t.Errorf("quota headers %v", resp.Header)
		}
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 || hits != 2 {
		t.Errorf("statuses %v, upstream hit %d times; want 200 200 429, 2", codes, hits)
	}
}
