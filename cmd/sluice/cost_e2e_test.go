package main_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// costUpstream answers as an LLM API does: /h states the cost in a header,
// /json in its JSON body, /sse in the last event of a stream (chunked,
// flushed event by event: the proxies stream it); /none states nothing.
func costUpstream(t *testing.T) string {
	return upstreamHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/h":
			w.Header().Set("X-Tokens-Used", "40")
			fmt.Fprint(w, "ok")
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":10,"total_tokens":30}}`)
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			for _, ev := range []string{`{"choices":[{"delta":"a"}]}`, `{"choices":[{"delta":"b"}]}`, `{"choices":[],"usage":{"total_tokens":25}}`, `[DONE]`} {
				fmt.Fprintf(w, "data: %s\n\n", ev)
				f.Flush()
			}
		default:
			fmt.Fprint(w, "ok")
		}
	}))
}

const costRules = `
rules:
  - {rule_id: h, identifier_type: global, algorithm: fixed_window, limit: 100, window: 1h, match: {path_pattern: /h}, cost_from: {header: X-Tokens-Used}}
  - {rule_id: json, identifier_type: global, algorithm: token_bucket, limit: 100, window: 1h, match: {path_pattern: /json}, cost_from: {json: usage.total_tokens}}
  - {rule_id: sse, identifier_type: global, algorithm: sliding_window, limit: 100, window: 1h, match: {path_pattern: /sse}, cost_from: {json: usage.total_tokens}}
  - {rule_id: none, identifier_type: global, algorithm: gcra, limit: 100, window: 1h, burst: 99, match: {path_pattern: /none}, cost_from: {header: X-Tokens-Used}, cost_default: 60}
`

// Through the binary (both proxy engines: make test runs the e2e suite on
// each), on the memory store and on Redis: each request is admitted while
// its key has tokens left and charged what the response said, so a key of
// 100 tokens serves answers of 40 three times, of 30 four times, of 25
// four times, and a response that says nothing its cost_default; the
// charges show in sluice_cost_charged_total, the unread one in
// sluice_cost_unread_total, and the bodies reach the client whole.
func TestE2ECostFromResponse(t *testing.T) {
	up := costUpstream(t)
	t.Run("memory", func(t *testing.T) { costFromResponse(t, start(t, up, costRules)) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		s := start(t, up, fmt.Sprintf("store: {type: redis, redis: {addrs: [%q], prefix: cost, timeout: 500ms}}\n%s", srv.Addr(), costRules))
		costFromResponse(t, s)
	})
	t.Run("redis_cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		s := start(t, up, fmt.Sprintf("store: {type: redis, redis: {addrs: [%s], prefix: cost, timeout: 500ms}}\n%s", quoted(c.Addrs()), costRules))
		costFromResponse(t, s)
	})
	t.Run("eventual", func(t *testing.T) {
		srv := redistest.Start(t)
		s := start(t, up, fmt.Sprintf("store: {type: redis, redis: {addrs: [%q], prefix: cost, timeout: 500ms, consistency: eventual, sync_interval: 50ms}}\n%s", srv.Addr(), costRules))
		costFromResponse(t, s)
	})
}

// quoted is addrs as a YAML flow list's items.
func quoted(addrs []string) string {
	q := make([]string, len(addrs))
	for i, a := range addrs {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
}

func costFromResponse(t *testing.T, s *sluice) {
	for _, tc := range []struct {
		path      string
		served    int
		charged   string
		bodyHolds string
	}{
		{"/h", 3, "120", "ok"},
		{"/json", 4, "120", `"total_tokens":30`},
		{"/sse", 4, "100", "[DONE]"},
		{"/none", 2, "120", "ok"},
	} {
		served := 0
		for i := range tc.served + 2 {
			resp, body := get(t, "http://"+s.proxy+tc.path)
			switch resp.StatusCode {
			case 200:
				served++
				if !strings.Contains(body, tc.bodyHolds) {
					t.Errorf("%s: answer %d's body %q, want it whole (%q)", tc.path, i, body, tc.bodyHolds)
				}
			case 429:
			default:
				t.Fatalf("%s: status %d: %s", tc.path, resp.StatusCode, body)
			}
		}
		if served != tc.served {
			t.Errorf("%s: %d served of 100 tokens, want %d", tc.path, served, tc.served)
		}
		rule := strings.TrimPrefix(tc.path, "/")
		if got := metric(t, s, `sluice_cost_charged_total{rule="`+rule+`"}`); got != tc.charged {
			t.Errorf("%s: sluice_cost_charged_total %q, want %s", tc.path, got, tc.charged)
		}
	}
	if got := metric(t, s, `sluice_cost_unread_total{reason="missing",rule="none"}`); got != "2" {
		t.Errorf(`sluice_cost_unread_total{reason="missing",rule="none"} %q, want 2`, got)
	}
}

// A token-limited tenant under a mixed stream of cheap and expensive
// answers (90% of 20 tokens, 10% of 2,000, each taking 2-10 ms) from 16
// clients at once stays within its tokens: what it was served exceeds the
// quota by at most one answer per request in flight when the quota ran
// out (16 x 2,000), with the reservation of 1 (none) and of the recent
// mean. The figures it logs are in BENCHMARKS.md.
func TestE2ECostTenantWithinTokens(t *testing.T) {
	var n atomic.Int64
	up := upstreamHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		cost := 20
		if i%10 == 0 {
			cost = 2000
		}
		time.Sleep(time.Duration(2+i%9) * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"usage":{"total_tokens":%d}}`, cost)
	}))
	const quota, clients, answer = 20000, 16, 2000
	for _, estimate := range []string{"none", "mean"} {
		t.Run(estimate, func(t *testing.T) {
			s := start(t, up, fmt.Sprintf(`
rules:
  - {rule_id: tokens, identifier_type: header:X-Tenant, algorithm: fixed_window, limit: %d, window: 1h, cost_from: {json: usage.total_tokens}, cost_estimate: %s}
`, quota, estimate))
			var served, answers, refused atomic.Int64
			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 500 && refused.Load() < 3*clients; i++ {
						resp, body := get(t, "http://"+s.proxy+"/v1/chat", "X-Tenant", "acme")
						switch resp.StatusCode {
						case 200:
							var u struct {
								Usage struct {
									Total int64 `json:"total_tokens"`
								} `json:"usage"`
							}
							if err := json.Unmarshal([]byte(body), &u); err != nil {
								t.Errorf("body %q: %v", body, err)
								return
							}
							served.Add(u.Usage.Total)
							answers.Add(1)
						case 429:
							refused.Add(1)
						default:
							t.Errorf("status %d: %s", resp.StatusCode, body)
							return
						}
					}
				}()
			}
			wg.Wait()
			over := served.Load() - quota
			t.Logf("estimate %s: %d answers served %d tokens of %d (%+d, %.2f expensive answers), %d refused",
				estimate, answers.Load(), served.Load(), quota, over, float64(over)/answer, refused.Load())
			if served.Load() < quota/2 || over > clients*answer {
				t.Errorf("served %d tokens of a quota of %d: want within one answer (%d) per client in flight (%d)", served.Load(), quota, answer, clients)
			}
		})
	}
}

// A client that leaves in the middle of a streamed answer: the answer's
// cost is the rule's default (counted as cut), on both engines, and the
// sidecar goes on serving.
func TestE2ECostClientLeavesMidStream(t *testing.T) {
	release := make(chan struct{})
	up := upstreamHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		for range 50 { // the proxy notices the client gone when it writes
			if _, err := fmt.Fprint(w, "data: {\"choices\":[{\"delta\":\"b\"}]}\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprint(w, "data: {\"usage\":{\"total_tokens\":25}}\n\n")
	}))
	s := start(t, up, `
rules:
  - {rule_id: sse, identifier_type: global, algorithm: fixed_window, limit: 1000, window: 1h, cost_from: {json: usage.total_tokens}, cost_default: 77}
`)
	conn, err := net.Dial("tcp", s.proxy)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	// The head and the first event may come in separate reads (the
	// net/http engine flushes the head first): read until the event.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(got), "delta") {
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("first event: %q, %v", got, err)
		}
	}
	conn.Close()
	close(release)
	waitWithin(t, 20*time.Second, func() bool {
		return metric(t, s, `sluice_cost_unread_total{reason="cut",rule="sse"}`) == "1"
	})
	if got := metric(t, s, `sluice_cost_charged_total{rule="sse"}`); got != "77" {
		t.Errorf("charged %s, want the default 77", got)
	}
	if resp, _ := get(t, "http://"+s.proxy+"/after"); resp.StatusCode != 200 {
		t.Errorf("after: %d", resp.StatusCode)
	}
}
