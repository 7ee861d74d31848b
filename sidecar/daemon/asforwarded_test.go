package daemon_test

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

	"github.com/sluicehq/sluice/internal/rawserver"
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

// On both engines the hop-by-hop headers of the upstream's answer stay
// on the upstream's connection, however the upstream spells them: the
// fast engine passed a lower-case "keep-alive", the names its
// "connection" header listed, and that header itself to the client.
func TestEnginesDropTheUpstreamsHopHeaders(t *testing.T) {
	addr := rawserver.Start(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nconnection: x-hop, keep-alive\r\nx-hop: h\r\n"+
				"keep-alive: timeout=5\r\nproxy-connection: keep-alive\r\nx-ok: 1\r\ncontent-length: 2\r\n\r\nok")
		}
	})
	for _, eng := range []string{"fast", "nethttp"} {
		t.Run(eng, func(t *testing.T) {
			s := startServer(t, "upstream: http://"+addr+"\nproxy: {engine: "+eng+"}\nadaptive: {algorithm: off}\n")
			proxy, _ := s.Addrs()
			resp, err := http.Get("http://" + proxy + "/x")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "ok" || resp.Header.Get("X-Ok") != "1" {
				t.Fatalf("%d %q %v", resp.StatusCode, body, resp.Header)
			}
			for _, name := range []string{"X-Hop", "Keep-Alive", "Proxy-Connection"} {
				if v, ok := resp.Header[name]; ok {
					t.Errorf("the upstream's hop-by-hop %s: %q reached the client", name, v)
				}
			}
			for _, v := range resp.Header.Values("Connection") {
				if strings.Contains(strings.ToLower(v), "x-hop") {
					t.Errorf("the upstream's Connection: %q reached the client", v)
				}
			}
		})
	}
}

// On both engines a rule on the Host header keys the host the service
// gets: net/http keeps Host out of its header map, so the rule never
// applied on the net/http engine (nor in the middleware), and an
// absolute-form request-target ("GET http://b/ HTTP/1.1") replaces the
// Host header (RFC 9112, 3.2.2), so on the fast engine a client could
// reach one host under a fresh Host header per request.
func TestEnginesKeyHostRulesOnTheForwardedHost(t *testing.T) {
	hosts := make(chan string, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	raw := func(proxy, head string) int {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, head)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, eng := range []string{"fast", "nethttp"} {
		t.Run(eng, func(t *testing.T) {
			s := startServer(t, "upstream: "+up.URL+"\nproxy: {engine: "+eng+"}\nadaptive: {algorithm: off}\n"+
				"rules:\n  - {rule_id: per_host, identifier_type: \"header:Host\", algorithm: fixed_window, limit: 2, window: 1h}\n")
			proxy, _ := s.Addrs()
			var got []int
			for _, head := range []string{
				"GET /1 HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
				"GET http://a.example/2 HTTP/1.1\r\nHost: fresh-1\r\nConnection: close\r\n\r\n",
				"GET http://a.example/3 HTTP/1.1\r\nHost: fresh-2\r\nConnection: close\r\n\r\n",
				"GET /4 HTTP/1.1\r\nHost: b.example\r\nConnection: close\r\n\r\n",
			} {
				got = append(got, raw(proxy, head))
			}
			if want := []int{200, 200, 429, 200}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("statuses %v, want %v: two for a.example, however named, then b.example's own", got, want)
			}
			for range 3 {
				if h := <-hosts; h != "a.example" && h != "b.example" {
					t.Errorf("the service got Host %q", h)
				}
			}
		})
	}
}

// On both engines a request that sends the header a rule keys twice is
// refused with 400, not keyed on its first line: a service that reads the
// last would see the client's real key under a fresh quota each time.
func TestEnginesRefuseAKeyedHeaderSentTwice(t *testing.T) {
	onEachEngine(t, "{rule_id: per_key, identifier_type: api_key, algorithm: fixed_window, limit: 1, window: 1h}",
		func(t *testing.T, proxy string) {
			var got []int
			for _, keys := range [][]string{{"real"}, {"junk-1", "real"}, {"real"}} {
				req, _ := http.NewRequest(http.MethodGet, "http://"+proxy+"/x", nil)
				req.Header["X-Api-Key"] = keys
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got = append(got, resp.StatusCode)
			}
			if want := []int{200, 400, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("statuses %v, want %v", got, want)
			}
		})
}

// On both engines a POST that sends a method-override header twice (the
// two lines in different case, as a client may write them) is refused with
// 400 where a rule limits the method it could ask for: decided on its
// first line, "GET" stepped around the rule on DELETE, while a service
// that reads the last line deleted. One override is limited as the method
// it names.
func TestEnginesRefuseAMethodOverrideSentTwice(t *testing.T) {
	onEachEngine(t, "{rule_id: deletes, identifier_type: global, algorithm: fixed_window, limit: 1, window: 1h, match: {methods: [DELETE]}}",
		func(t *testing.T, proxy string) {
			var got []int
			for _, overrides := range []string{
				"X-HTTP-Method-Override: DELETE\r\n",
				"x-http-method-override: GET\r\nX-HTTP-Method-Override: DELETE\r\n",
				"X-HTTP-Method-Override: DELETE\r\n",
			} {
				c, err := net.Dial("tcp", proxy)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.WriteString(c, "POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: 0\r\n"+overrides+"Connection: close\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					c.Close()
					t.Fatal(err)
				}
				resp.Body.Close()
				c.Close()
				got = append(got, resp.StatusCode)
			}
			if want := []int{200, 400, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("statuses %v, want %v: the one DELETE admitted, the ambiguous POST refused, the next DELETE limited", got, want)
			}
		})
}

// onEachEngine runs f, as a subtest of each proxy engine, against a sidecar
// with the adaptive limit off and the one rule (YAML flow mapping) before an
// upstream that answers "ok".
func onEachEngine(t *testing.T, rule string, f func(t *testing.T, proxy string)) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	for _, eng := range []string{"fast", "nethttp"} {
		t.Run(eng, func(t *testing.T) {
			s := startServer(t, "upstream: "+up.URL+"\nproxy: {engine: "+eng+"}\nadaptive: {algorithm: off}\nrules:\n  - "+rule+"\n")
			proxy, _ := s.Addrs()
			f(t, proxy)
		})
	}
}
