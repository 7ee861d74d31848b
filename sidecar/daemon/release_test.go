package daemon_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/admin"
	"github.com/sluicehq/sluice/static/statictest"
)

// TestClientDisconnectReleases: a client that leaves while queued gives its
// place back, and one that leaves while its request is upstream releases
// the adaptive slot and the per-key concurrency slot it held.
func TestClientDisconnectReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, `
adaptive: {algorithm: fixed, initial_limit: 1}
queue: {max_size: 10, max_wait: 10s, order: fifo}
rules:
  - {rule_id: conc, identifier_type: global, algorithm: concurrency, limit: 1, match: {path_pattern: /conc}}
`, nil)
		entered := make(chan struct{}, 4)
		h := sidecar.Middleware(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-r.Context().Done() // upstream work until the client leaves
		}))
		serve := func(ctx context.Context, path string) chan *httptest.ResponseRecorder {
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() {
				r := httptest.NewRequestWithContext(ctx, "GET", path, nil)
				r.RemoteAddr = "192.0.2.1:1"
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				done <- w
			}()
			return done
		}
		ctxA, leaveA := context.WithCancel(context.Background())
		a := serve(ctxA, "/conc")
		<-entered
		ctxB, leaveB := context.WithCancel(context.Background())
		b := serve(ctxB, "/other")
		synctest.Wait()
		if st := e.State(); st.Adaptive.InFlight != 1 || st.Queue.Length != 1 {
			t.Fatalf("one in flight and one queued, got %+v %+v", st.Adaptive, st.Queue)
		}
		leaveB()
		<-b
		if st := e.State(); st.Queue.Length != 0 || st.Queue.Cancelled != 1 {
			t.Fatalf("the queued client left; queue %+v", st.Queue)
		}
		leaveA()
		<-a
		if st := e.State(); st.Adaptive.InFlight != 0 {
			t.Fatalf("the admitted client left; in flight %d", st.Adaptive.InFlight)
		}
		// Both the adaptive slot and the per-key concurrency slot are free.
		ctxC, leaveC := context.WithCancel(context.Background())
		c := serve(ctxC, "/conc")
		select {
		case <-entered:
		case w := <-c:
			t.Fatalf("a new request after the disconnects was refused: %d %s", w.Code, w.Body)
		}
		leaveC()
		<-c
	})
}

func TestAdminEndpoints(t *testing.T) {
	e := newEngine(t, twoPerMinute, sluice.NewFakeClock(statictest.Start))
	h := sidecar.Middleware(e, ok)
	for i := 0; i < 3; i++ {
		do(h, "GET", "/")
	}
	admin := admin.Handler(e, admin.Options{})
	send := func(method, path, body string, hdr ...string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Host = "127.0.0.1:9901"
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				r.Host = hdr[i+1]
			} else {
				r.Header.Set(hdr[i], hdr[i+1])
			}
		}
		admin.ServeHTTP(w, r)
		return w
	}
	get := func(method, path, body string) *httptest.ResponseRecorder { return send(method, path, body) }
	var st engine.State
	if w := get("GET", "/v1/state", ""); w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &st) != nil {
		t.Fatalf("state: %d %s", w.Code, w.Body)
	}
	if !st.Ready || !st.Store.Healthy || len(st.Rules) != 1 || st.Rules[0].Allowed != 2 || st.Rules[0].Denied != 1 {
		t.Errorf("state %+v", st)
	}
	if w := get("GET", "/readyz", ""); w.Code != 200 {
		t.Errorf("readyz %d", w.Code)
	}
	if w := get("POST", "/v1/reload", ""); w.Code != 501 {
		t.Errorf("reload without a file: %d", w.Code)
	}
	for _, bad := range []string{`{"path": "x"}`, `{"pth": "/"}`, `not json`} {
		if w := get("POST", "/v1/check", bad); w.Code != 400 || !strings.Contains(w.Body.String(), "error") {
			t.Errorf("check %s: %d %s", bad, w.Code, w.Body)
		}
	}
	// /v1/check answers for the described client, without forwarding.
	w := get("POST", "/v1/check", `{"method": "get", "path": "/", "remote_addr": "192.0.2.1:9"}`)
	var out struct {
		Allowed bool              `json:"allowed"`
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Allowed || out.Status != 429 || out.Headers["Retry-After"] == "" {
		t.Errorf("check of a client over its quota: %s", w.Body)
	}
	w = get("POST", "/v1/check", `{"path": "/", "remote_addr": "192.0.2.2:9"}`)
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || !out.Allowed || out.Headers["Ratelimit"] != `"per_ip";r=1;t=60` {
		t.Errorf("check of a fresh client: %s", w.Body)
	}
	if w := get("GET", "/v1/check", ""); w.Code != 405 {
		t.Errorf("GET /v1/check: %d", w.Code)
	}

	// A check is a dry run unless it says consume: three checks leave the
	// quota whole; consuming ones take it.
	fresh := `{"path": "/", "remote_addr": "192.0.2.3:9"}`
	for range 3 {
		w = get("POST", "/v1/check", fresh)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || !out.Allowed || out.Headers["Ratelimit"] != `"per_ip";r=1;t=60` {
		t.Errorf("third dry check: %s", w.Body)
	}
	consume := `{"path": "/", "remote_addr": "192.0.2.3:9", "consume": true}`
	get("POST", "/v1/check", consume)
	get("POST", "/v1/check", consume)
	if err := json.Unmarshal(get("POST", "/v1/check", fresh).Body.Bytes(), &out); err != nil || out.Allowed {
		t.Errorf("after two consuming checks of a quota of 2: %+v", out)
	}
	if st := e.State(); st.Rules[0].Allowed != 4 {
		t.Errorf("allowed count %d: dry checks were counted, or consuming ones were not", st.Rules[0].Allowed)
	}

	// What a browser could be tricked into sending is refused.
	for name, c := range map[string]struct {
		w    *httptest.ResponseRecorder
		want int
	}{
		"rebinding host": {send("GET", "/v1/state", "", "Host", "evil.example:9901"), 421},
		"rebinding post": {send("POST", "/v1/reload", "", "Host", "evil.example"), 421},
		"cross origin":   {send("POST", "/v1/check", fresh, "Origin", "http://evil.example"), 403},
		"text/plain":     {send("POST", "/v1/check", fresh, "Content-Type", "text/plain"), 415},
		"form":           {send("POST", "/v1/reload", "a=b", "Content-Type", "application/x-www-form-urlencoded"), 415},
		"same origin":    {send("POST", "/v1/check", fresh, "Origin", "http://127.0.0.1:9901"), 200},
		"localhost":      {send("GET", "/v1/state", "", "Host", "localhost:9901"), 200},
		"ipv6 literal":   {send("GET", "/healthz", "", "Host", "[::1]:9901"), 200},
	} {
		if c.w.Code != c.want {
			t.Errorf("%s: %d, want %d", name, c.w.Code, c.want)
		}
	}
}

// Every exit after the store admitted a request gives back what it took:
// the client left before the request was forwarded (no delay to wait out),
// or the wait queue refused it.
func TestEveryExitGivesBack(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: conc, identifier_type: ip_address, algorithm: concurrency, limit: 1, match: {path_pattern: /conc}}
  - {rule_id: quota, identifier_type: ip_address, algorithm: fixed_window, limit: 1, window: 1h, match: {path_pattern: /quota}}
`, nil)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, path := range []string{"/conc", "/quota"} {
		req := &engine.Request{Method: "GET", Path: path, RemoteAddr: "192.0.2.1:1"}
		if _, err := e.Decide(gone, req); err == nil {
			t.Fatalf("%s: a client that left got a verdict", path)
		}
		v, err := e.Decide(context.Background(), req)
		if err != nil || !v.Allowed {
			t.Fatalf("%s: after a client left, the next request got %+v %v: its slot or quota leaked", path, v.Decision, err)
		}
		v.Done(sluice.Success)
	}

	// The adaptive gate sheds (queue off, limit 1 in use): the quota the
	// static check took comes back.
	e = newEngine(t, `
adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}
queue: {max_size: 0}
rules:
  - {rule_id: quota, identifier_type: ip_address, algorithm: fixed_window, limit: 2, window: 1h}
  - {rule_id: conc, identifier_type: ip_address, algorithm: concurrency, limit: 2}
`, nil)
	req := &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1"}
	first, err := e.Decide(context.Background(), req)
	if err != nil || !first.Allowed {
		t.Fatal(first, err)
	}
	for range 3 {
		v, err := e.Decide(context.Background(), req)
		if err != nil || v.Allowed || v.Status != engine.StatusShed {
			t.Fatalf("want shed by the adaptive gate, got %+v %v", v, err)
		}
	}
	first.Done(sluice.Success)
	v, err := e.Decide(context.Background(), req)
	if err != nil || !v.Allowed {
		t.Fatalf("after three sheds the quota of 2 should have 1 left: %+v %v", v.Decision, err)
	}
	v.Done(sluice.Success)
}
