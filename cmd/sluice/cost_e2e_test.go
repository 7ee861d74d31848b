package main_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

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
