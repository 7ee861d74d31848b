package daemon_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// On both engines the service gets the request's representation as the
// client sent it: a body without a Content-Type gets none (the fast
// engine named it application/octet-stream), and no Accept-Encoding is
// asked for that the client did not ask (the net/http engine asked for
// gzip, and decompressed the answer on the sidecar's CPU); one the client
// sent goes up, and the encoded answer comes back as the service
// encoded it.
func TestEnginesForwardTheRepresentationAsSent(t *testing.T) {
	for _, eng := range []string{"fast", "nethttp"} {
		t.Run(eng, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]http.Header{}
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen[r.URL.Path] = r.Header.Clone()
				mu.Unlock()
				if r.Header.Get("Accept-Encoding") == "gzip" {
					w.Header().Set("Content-Encoding", "gzip")
					_, _ = io.WriteString(w, "not really gzip")
					return
				}
				_, _ = io.WriteString(w, "ok")
			}))
			defer up.Close()
			s := startServer(t, "upstream: "+up.URL+"\nproxy: {engine: "+eng+"}\nadaptive: {algorithm: off}\n")
			proxy, _ := s.Addrs()
			c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			req, _ := http.NewRequest(http.MethodPost, "http://"+proxy+"/post", strings.NewReader("abc"))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			req, _ = http.NewRequest(http.MethodGet, "http://"+proxy+"/gzip", nil)
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err = c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if ct, ok := seen["/post"]["Content-Type"]; ok {
				t.Errorf("a body sent without a Content-Type reached the service with %q", ct)
			}
			if ae, ok := seen["/post"]["Accept-Encoding"]; ok {
				t.Errorf("a request without Accept-Encoding reached the service with %q", ae)
			}
			if got := seen["/gzip"].Get("Accept-Encoding"); got != "gzip" {
				t.Errorf("the client's Accept-Encoding: gzip reached the service as %q", got)
			}
			if resp.Header.Get("Content-Encoding") != "gzip" || string(body) != "not really gzip" {
				t.Errorf("the encoded answer came back as %q, %q", resp.Header.Get("Content-Encoding"), body)
			}
		})
	}
}

// On both engines the query reaches the service byte for byte, as nginx
// forwards it: parameters net/http cannot parse included (the net/http
// engine dropped "e=%zz" and re-encoded the rest, breaking a signature
// over the raw query).
func TestEnginesForwardTheRawQuery(t *testing.T) {
	const raw = "a=%2F&b=c+d&e=%zz&f=%41;g=1&sig=AbC%2B%2F%3D"
	for _, eng := range []string{"fast", "nethttp"} {
		t.Run(eng, func(t *testing.T) {
			got := make(chan string, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.URL.RawQuery
				_, _ = io.WriteString(w, "ok")
			}))
			defer up.Close()
			s := startServer(t, "upstream: "+up.URL+"\nproxy: {engine: "+eng+"}\nadaptive: {algorithm: off}\n")
			proxy, _ := s.Addrs()
			resp, err := http.Get("http://" + proxy + "/p?" + raw)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if q := <-got; q != raw {
				t.Errorf("the service got the query %q, want %q", q, raw)
			}
		})
	}
}
