package main_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// What the proxy forwards, on either engine: hop-by-hop headers (and those
// Connection names) dropped both ways, X-Forwarded-For appended, the Host,
// the query and X-Forwarded-Host kept, a chunked upload streamed whole, a
// HEAD without a body, an upstream 404 passed through.
func TestE2EForwarding(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]http.Header{}
	bodies := map[string]string{}
	hosts := map[string]string{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.URL.Path] = r.Header.Clone()
		bodies[r.URL.Path] = string(b) + "|" + r.URL.RawQuery
		hosts[r.URL.Path] = r.Host
		mu.Unlock()
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Resp-Kept", "1")
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "hello")
	}))
	defer up.Close()
	s := start(t, up.URL, "adaptive: {algorithm: off}\n")

	send := func(req string) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", s.proxy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := send("POST /echo?a=1&b=two HTTP/1.1\r\nHost: svc.example\r\nConnection: X-Hop, close\r\nX-Hop: secret\r\n" +
		"Proxy-Authorization: Basic eA==\r\nTe: gzip\r\nKeep-Alive: 300\r\nX-Forwarded-For: 203.0.113.9\r\nX-Kept: yes\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hello" {
		t.Fatalf("POST: %d %q", resp.StatusCode, b)
	}
	for _, h := range []string{"X-Resp-Hop", "Keep-Alive"} {
		if resp.Header.Get(h) != "" {
			t.Errorf("response kept hop-by-hop %s", h)
		}
	}
	if resp.Header.Get("X-Resp-Kept") != "1" {
		t.Errorf("response lost X-Resp-Kept")
	}
	mu.Lock()
	h := seen["/echo"]
	body, host := bodies["/echo"], hosts["/echo"]
	mu.Unlock()
	for _, name := range []string{"X-Hop", "Proxy-Authorization", "Te", "Keep-Alive"} {
		if h.Get(name) != "" {
			t.Errorf("upstream saw hop-by-hop %s: %q", name, h.Get(name))
		}
	}
	if h.Get("X-Kept") != "yes" {
		t.Errorf("upstream lost X-Kept")
	}
	if got := h.Get("X-Forwarded-For"); got != "203.0.113.9, 127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want the client's appended", got)
	}
	if host != "svc.example" || h.Get("X-Forwarded-Host") != "svc.example" || h.Get("X-Forwarded-Proto") != "http" {
		t.Errorf("host %q, X-Forwarded-Host %q, X-Forwarded-Proto %q", host, h.Get("X-Forwarded-Host"), h.Get("X-Forwarded-Proto"))
	}
	if body != "hello world|a=1&b=two" {
		t.Errorf("upstream got body|query %q", body)
	}

	resp = send("HEAD /head HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(b) != 0 {
		t.Errorf("HEAD: %d with %d body bytes", resp.StatusCode, len(b))
	}
	resp = send("GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), "not found") {
		t.Errorf("404: %d %q", resp.StatusCode, b)
	}
	// HTTP/1.0 without a Host reaches the upstream with the upstream's.
	resp = send("GET /old HTTP/1.0\r\n\r\n")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mu.Lock()
	oldHost := hosts["/old"]
	mu.Unlock()
	if resp.StatusCode != 200 || oldHost != strings.TrimPrefix(up.URL, "http://") {
		t.Errorf("HTTP/1.0 without Host: %d, upstream saw Host %q", resp.StatusCode, oldHost)
	}
	// OPTIONS * is the proxy's to answer; an absolute-form target names
	// the host.
	resp = send("OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("OPTIONS *: %d", resp.StatusCode)
	}
	mu.Lock()
	_, leaked := seen["/*"]
	mu.Unlock()
	if leaked {
		t.Error("OPTIONS * reached the upstream as /*")
	}
	resp = send("GET http://other.example/abs?q=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp.Body.Close()
	mu.Lock()
	absHost, absBody := hosts["/abs"], bodies["/abs"]
	mu.Unlock()
	if resp.StatusCode != 200 || absHost != "other.example" || absBody != "|q=1" {
		t.Errorf("absolute-form: %d, host %q, body|query %q", resp.StatusCode, absHost, absBody)
	}
	// A body shorter than its Content-Length (the client stops sending)
	// is the client's fault: 400, and the upstream sees nothing.
	sc, err := net.Dial("tcp", s.proxy)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(sc, "POST /short HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	sc.(*net.TCPConn).CloseWrite()
	sresp, err := http.ReadResponse(bufio.NewReader(sc), nil)
	if err == nil {
		sresp.Body.Close()
		if sresp.StatusCode != 400 {
			t.Errorf("short body: %d, want 400", sresp.StatusCode)
		}
	}
	sc.Close()
	mu.Lock()
	_, forwarded := bodies["/short"]
	mu.Unlock()
	if forwarded {
		t.Error("a body cut short reached the upstream")
	}
	// A transfer coding other than chunked is refused (501), not guessed.
	resp = send("POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nConnection: close\r\n\r\nabc")
	resp.Body.Close()
	mu.Lock()
	_, teForwarded := bodies["/te"]
	mu.Unlock()
	if resp.StatusCode != http.StatusNotImplemented || teForwarded {
		t.Errorf("Transfer-Encoding: identity: %d (forwarded %v), want 501", resp.StatusCode, teForwarded)
	}
	// Pipelined requests are answered in order.
	pc, err := net.Dial("tcp", s.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	io.WriteString(pc, "GET /p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /p2 HTTP/1.1\r\nHost: x\r\n\r\n")
	pbr := bufio.NewReader(pc)
	for i := range 2 {
		resp, err := http.ReadResponse(pbr, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("pipelined response %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Many requests on one keep-alive connection.
	c, err := net.Dial("tcp", s.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 20 {
		fmt.Fprintf(c, "GET /k%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("keep-alive request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("keep-alive request %d: %d", i, resp.StatusCode)
		}
	}
}
