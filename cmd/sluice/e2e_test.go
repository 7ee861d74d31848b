package main_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlstest"
)

var binary string

// TestMain builds the real sluice binary once; every test runs it.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sluice is a running sluice process.
type sluice struct {
	cmd         *exec.Cmd
	config      string
	proxy, admn string
	logs        *syncBuffer
	done        chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

var servingRE = regexp.MustCompile(`listen=(\S+) upstream=\S+ admin=(\S+)`)

// start runs `sluice run` with the YAML config (listen and admin on free
// loopback ports) in front of upstream, and waits until it is ready.
func start(t testing.TB, upstream, yaml string) *sluice {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return startFile(t, upstream, path)
}

// startFile is start with a configuration file already in place.
func startFile(t testing.TB, upstream, path string) *sluice {
	t.Helper()
	s := &sluice{config: path, logs: &syncBuffer{}, done: make(chan error, 1)}
	args := []string{"run", "-config", path, "-upstream", upstream, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0"}
	if e := os.Getenv("SLUICE_E2E_ENGINE"); e != "" {
		args = append(args, "-engine", e) // make test runs the suite on both proxy engines
	}
	s.cmd = exec.Command(binary, args...)
	s.cmd.Stderr = s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("sluice logs:\n%s", s.logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := servingRE.FindStringSubmatch(s.logs.String()); m != nil {
			s.proxy, s.admn = m[1], m[2]
			if resp, err := http.Get("http://" + s.admn + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return s
				}
			}
		}
		select {
		case err := <-s.done:
			s.done <- err // for the cleanup
			t.Fatalf("sluice exited: %v\n%s", err, s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice not ready:\n%s", s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t testing.TB, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func metric(t testing.TB, s *sluice, series string) string {
	t.Helper()
	_, body := get(t, "http://"+s.admn+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	return ""
}

func upstreamServer(t testing.TB) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-XFF", r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Seen-Proto", r.Proto)
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "hello %d", n)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

const perIP = `
rules:
  - rule_id: per_ip
    identifier_type: ip_address
    algorithm: fixed_window
    limit: 3
    window: 1h
`

func TestE2EQuotaHeadersMetrics(t *testing.T) {
	up := upstreamServer(t)
	s := start(t, up.URL, perIP)
	for i := 0; i < 3; i++ {
		resp, body := get(t, "http://"+s.proxy+"/x")
		if resp.StatusCode != 200 || body != "hello 0" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if want := fmt.Sprintf(`"per_ip";r=%d;t=`, 2-i); !strings.HasPrefix(resp.Header.Get("RateLimit"), want) {
			t.Errorf("RateLimit %q, want prefix %q", resp.Header.Get("RateLimit"), want)
		}
		if resp.Header.Get("X-Seen-XFF") != "127.0.0.1" {
			t.Errorf("upstream saw X-Forwarded-For %q", resp.Header.Get("X-Seen-XFF"))
		}
	}
	resp, body := get(t, "http://"+s.proxy+"/x")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit-Policy") != `"per_ip";q=3;w=3600` ||
		resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"violated-policies":["per_ip"]`) {
		t.Fatalf("past the limit: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if got := metric(t, s, `sluice_requests_total{decision="denied",rule="per_ip"}`); got != "1" {
		t.Errorf("denied metric %q, want 1", got)
	}
	if got := metric(t, s, `sluice_requests_total{decision="allowed",rule="per_ip"}`); got != "3" {
		t.Errorf("allowed metric %q, want 3", got)
	}
	// /v1/state and /v1/check.
	_, state := get(t, "http://"+s.admn+"/v1/state")
	if !strings.Contains(state, `"rule_id": "per_ip"`) || !strings.Contains(state, `"algorithm": "gradient2"`) {
		t.Errorf("state %s", state)
	}
	r, err := http.Post("http://"+s.admn+"/v1/check", "application/json", strings.NewReader(`{"path":"/x","remote_addr":"192.0.2.9:1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var check map[string]any
	_ = json.NewDecoder(r.Body).Decode(&check)
	r.Body.Close()
	if check["allowed"] != true || check["rule_id"] != "per_ip" || check["remaining"].(float64) != 2 {
		t.Errorf("check %v", check)
	}
}

func TestE2EReload(t *testing.T) {
	up := upstreamServer(t)
	s := start(t, up.URL, strings.Replace(perIP, "limit: 3", "limit: 1", 1))
	get(t, "http://"+s.proxy+"/")
	if resp, _ := get(t, "http://"+s.proxy+"/"); resp.StatusCode != 429 {
		t.Fatalf("limit 1: second request %d", resp.StatusCode)
	}
	// A bad file is refused and the old rules stay.
	if err := os.WriteFile(s.config, []byte("rules: [{rule_id: x}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+s.admn+"/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `rule \"x\": identifier_type: required`) {
		t.Fatalf("bad reload: %d %s", resp.StatusCode, b)
	}
	if resp, _ := get(t, "http://"+s.proxy+"/"); resp.StatusCode != 429 {
		t.Fatalf("after a bad reload the old rule is gone: %d", resp.StatusCode)
	}
	if got := metric(t, s, `sluice_config_reloads_total{result="failure"}`); got == "" || got == "0" {
		t.Errorf("failed reloads metric %q", got)
	}
	// A new limit through SIGHUP; the usage so far counts against it.
	if err := os.WriteFile(s.config, []byte(strings.Replace(perIP, "limit: 3", "limit: 5", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		resp, _ := get(t, "http://"+s.proxy+"/")
		return resp.Header.Get("RateLimit-Policy") == `"per_ip";q=5;w=3600`
	})
	// The watcher alone: add a rule that closes /closed/**. Between two
	// checks from one address, per_ip (unchanged) keeps its counter.
	check := func(path string) map[string]any {
		r, err := http.Post("http://"+s.admn+"/v1/check", "application/json",
			strings.NewReader(`{"path":"`+path+`","remote_addr":"192.0.2.7:1","consume":true}`))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(r.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if c := check("/"); c["allowed"] != true || c["remaining"] != 4.0 {
		t.Fatalf("first check: %v", c)
	}
	next := strings.Replace(perIP, "limit: 3", "limit: 5", 1) +
		"  - {rule_id: closed, identifier_type: global, algorithm: fixed_window, limit: 0, window: 1m, match: {path_pattern: /closed/**}}\n"
	if err := os.WriteFile(s.config, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		resp, body := get(t, "http://"+s.proxy+"/closed/x")
		return resp.StatusCode == 429 && strings.Contains(body, `"closed"`)
	})
	if c := check("/"); c["allowed"] != true || c["remaining"] != 3.0 || c["rule_id"] != "per_ip" {
		t.Errorf("check after the watcher's reload (per_ip lost its counter?): %v", c)
	}
}

// waitFor polls cond (a reload landing) for up to 10 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	waitWithin(t, 10*time.Second, cond)
}

// waitWithin polls cond until it holds, failing t after d.
func waitWithin(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestE2EGracefulShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "finished")
	}))
	t.Cleanup(up.Close)
	s := start(t, up.URL, "shutdown_grace: 20s\n")
	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + s.proxy + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-entered
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused once shutdown began.
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", s.proxy, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(release)
	r := <-res
	if r.err != nil || r.code != 200 || r.body != "finished" {
		t.Fatalf("in-flight request: %+v", r)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
		s.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("sluice did not exit after its last request")
	}
}

func TestE2EPassThrough(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			if i == 0 {
				<-r.Context().Done() // hold the stream open until the client saw the first event and left
				return
			}
		}
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want upgrade", 400)
			return
		}
		echoUpgraded(w)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Proto", r.Proto)
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	})
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	s := start(t, up.URL, "adaptive: {algorithm: gradient2}\n")

	// A large body arrives whole.
	big := bytes.Repeat([]byte("x"), 8<<20)
	resp, err := http.Post("http://"+s.proxy+"/big", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != fmt.Sprint(len(big)) {
		t.Errorf("large body: upstream read %s bytes, sent %d", b, len(big))
	}

	// A stream's first event arrives before the response ends.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.proxy+"/stream", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: 0\n" {
		t.Errorf("stream: %q %v", line, err)
	}
	cancel()
	resp.Body.Close()

	// An upgraded connection carries bytes both ways.
	conn, err := net.Dial("tcp", s.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	status, _ := br.ReadString('\n')
	if !strings.Contains(status, "101") {
		t.Fatalf("upgrade: %q", status)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
	}
	fmt.Fprintf(conn, "ping\n")
	if got, _ := br.ReadString('\n'); got != "echo:ping\n" {
		t.Errorf("upgraded echo: %q", got)
	}

	// HTTP/2 without TLS (h2c) to the proxy.
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.TLSClientConfig = &tls.Config{}
	h2 := &http.Client{Transport: tr}
	resp, err = h2.Get("http://" + s.proxy + "/h2")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Errorf("h2c: %s %d", resp.Proto, resp.StatusCode)
	}
}

// echoUpgraded answers an upgrade to the "echo" protocol (101), then
// echoes each line the client sends, prefixed "echo:", until it closes.
func echoUpgraded(w http.ResponseWriter) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	buf.Flush()
	for {
		line, err := buf.ReadString('\n')
		if err != nil {
			return
		}
		buf.WriteString("echo:" + line)
		buf.Flush()
	}
}

// TestE2ERedisSharedQuota: two sluice processes share one quota through a
// real redis-server.
func TestE2ERedisSharedQuota(t *testing.T) {
	srv := redistest.Start(t)
	up := upstreamServer(t)
	cfg := fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%q], prefix: e2e, timeout: 500ms}
rules:
  - {rule_id: shared, identifier_type: global, algorithm: sliding_log, limit: 5, window: 1h}
`, srv.Addr())
	a := start(t, up.URL, cfg)
	b := start(t, up.URL, cfg)
	allowed := 0
	for i := 0; i < 12; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		if resp, _ := get(t, "http://"+s.proxy+"/"); resp.StatusCode == 200 {
			allowed++
		} else if resp.StatusCode != 429 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if allowed != 5 {
		t.Errorf("two sidecars admitted %d, want the shared quota 5", allowed)
	}
}

func TestE2ECheckCommand(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("rules: [{rule_id: r, identifier_type: global, algorithm: gcra, limit: 1}]\n"), 0o600)
	out, err := exec.Command(binary, "check", "-config", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), `bad.yaml: rule "r": window:`) {
		t.Errorf("check of a bad file: %v %s", err, out)
	}
	out, err = exec.Command(binary, "check", "-config", "../../examples/basic.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok (2 rules") {
		t.Errorf("check of the example: %v %s", err, out)
	}
	// The Envoy files a configuration names are checked too, relative to
	// it, and their rules counted (before: "ok (0 rules)" for a broken one).
	dir := t.TempDir()
	sluiceYAML := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(sluiceYAML, []byte("rls: {listen: 127.0.0.1:0, envoy_configs: [envoy.yaml]}\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "envoy.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: parsec, requests_per_unit: 1}\n"), 0o600)
	out, err = exec.Command(binary, "check", "-config", sluiceYAML).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "envoy.yaml") || !strings.Contains(string(out), "parsec") {
		t.Errorf("check of a configuration naming a broken Envoy file: %v %s", err, out)
	}
	os.WriteFile(filepath.Join(dir, "envoy.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"), 0o600)
	out, err = exec.Command(binary, "check", "-config", sluiceYAML).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok (1 rules") {
		t.Errorf("check of a configuration naming a good Envoy file: %v %s", err, out)
	}
	// An admin port beyond loopback is valid, with the warning run gives.
	wide := filepath.Join(dir, "wide.yaml")
	os.WriteFile(wide, []byte("admin: 0.0.0.0:9901\n"), 0o600)
	out, err = exec.Command(binary, "check", "-config", wide).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "warning: admin 0.0.0.0:9901 listens beyond loopback") {
		t.Errorf("check of admin 0.0.0.0: %v %s, want ok with a warning", err, out)
	}
}

// TestE2ERedisTLS: a sidecar counts in a redis-server that speaks only
// mutual TLS to it (store.redis.tls, paths relative to the configuration
// file), as envoyproxy/ratelimit's REDIS_TLS does; a CA file that cannot
// be read stops `sluice run` with a message naming it.
func TestE2ERedisTLS(t *testing.T) {
	f := tlstest.Write(t)
	srv := redistest.StartTLS(t, f, true)
	up := upstreamServer(t)
	dir := filepath.Dir(f.CA)
	path := writeFile(t, dir, "sluice.yaml", fmt.Sprintf(`
store:
  type: redis
  redis:
    addrs: [%q]
    prefix: e2etls
    timeout: 500ms
    on_error: closed
    tls: {ca_file: %s, cert_file: %s, key_file: %s}
rules:
  - {rule_id: shared, identifier_type: global, algorithm: sliding_log, limit: 3, window: 1h}
`, srv.TLSAddr(), filepath.Base(f.CA), filepath.Base(f.ClientCert), filepath.Base(f.ClientKey)))
	s := startFile(t, up.URL, path)
	var codes []int
	for range 5 {
		resp, _ := get(t, "http://"+s.proxy+"/")
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 429 429]" {
		t.Fatalf("statuses %v, want 3 admitted then 429 (on_error closed: a store it cannot reach refuses)", codes)
	}
	keys, err := srv.Do("KEYS", "e2etls*")
	if err != nil || !strings.Contains(keys, "shared") {
		t.Fatalf("keys in Redis %q (%v): want the rule's counter, written over TLS", keys, err)
	}
	bad := writeFile(t, t.TempDir(), "bad.yaml", fmt.Sprintf(`
store: {type: redis, redis: {addrs: [%q], tls: {ca_file: missing-ca.pem}}}
rules: [{rule_id: r, identifier_type: global, algorithm: token_bucket, limit: 1, window: 1s}]
`, srv.TLSAddr()))
	out, err := runSluice("run", "-config", bad, "-upstream", up.URL, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0")
	if err == nil || !strings.Contains(out, "store.redis.tls") || !strings.Contains(out, "missing-ca.pem") {
		t.Fatalf("run with an unreadable ca_file: %v\n%s\nwant it to stop naming store.redis.tls and the file", err, out)
	}
}
