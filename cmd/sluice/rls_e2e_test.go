package main_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/tlstest"
)

var rlsRE = regexp.MustCompile(`rate limit service serving" rls=(\S+)`)

// `sluice run` with rls.listen answers Envoy's generated client: rules
// from an envoyproxy/ratelimit file loaded as it is (rls.envoy_configs)
// beside a sluice descriptor rule, and the HTTP proxy still serving.
func TestE2ERateLimitService(t *testing.T) {
	dir := t.TempDir()
	envoyFile := writeFile(t, dir, "messaging.yaml", `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`)
	up := upstreamServer(t)
	s := start(t, up.URL, `adaptive: {algorithm: off}
rls: {listen: "127.0.0.1:0", envoy_configs: [`+filepath.ToSlash(envoyFile)+`]}
rules:
  - {rule_id: per_ip, identifier_type: ip_address, algorithm: token_bucket, limit: 100, window: 1s}
  - {rule_id: logins, algorithm: sliding_log, limit: 1, window: 1m, descriptor: {domain: edge, entries: [{key: remote_address}, {key: path, value: /login}]}}
`)
	c := rlsClient(t, s)
	ask := func(domain string, kv ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		d := &commonv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for range 2 {
		if r := ask("messaging", "message_type", "marketing", "to_number", "1"); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("marketing: %v", r)
		}
	}
	if r := ask("messaging", "message_type", "marketing", "to_number", "1"); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("third marketing message: %v", r)
	}
	if r := ask("edge", "remote_address", "10.0.0.1", "path", "/login"); r.OverallCode != rlsv3.RateLimitResponse_OK ||
		r.Statuses[0].CurrentLimit.GetName() != "logins" {
		t.Fatalf("login: %v", r)
	}
	r := ask("edge", "remote_address", "10.0.0.1", "path", "/login")
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second login: %v", r)
	}
	var policy string
	for _, h := range r.ResponseHeadersToAdd {
		if h.Key == "Ratelimit-Policy" {
			policy = h.Value
		}
	}
	if policy != `"logins";q=1;w=60` {
		t.Errorf("RateLimit-Policy %q", policy)
	}
	// The descriptor rules are counted in the same metrics.
	if m := metric(t, s, `sluice_requests_total{decision="denied",rule="logins"}`); m != "1" {
		t.Errorf("logins denied %q", m)
	}
	// And the proxy is not limited by descriptor rules.
	for range 3 {
		if resp, _ := get(t, "http://"+s.proxy+"/login"); resp.StatusCode != 200 {
			t.Fatalf("proxy: %d", resp.StatusCode)
		}
	}
	if !strings.Contains(metric(t, s, `sluice_requests_total{decision="allowed",rule="per_ip"}`), "3") {
		t.Errorf("the HTTP rule did not count the proxy's requests")
	}
}

// rlsClient is Envoy's generated client of s's rate limit service, once
// s logged its address; closed with the test.
func rlsClient(t *testing.T, s *sluice) rlsv3.RateLimitServiceClient {
	t.Helper()
	var addr string
	waitFor(t, func() bool {
		m := rlsRE.FindStringSubmatch(s.logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// `sluice import envoy-ratelimit` writes rules a sluice configuration takes.
func TestE2EImportEnvoyRatelimit(t *testing.T) {
	out, err := runSluice("import", "envoy-ratelimit", "../../envoyconf/testdata/good/basic.yaml", "../../envoyconf/testdata/good/features.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	dir := t.TempDir()
	f := writeFile(t, dir, "imported.yaml", out)
	if out, err := runSluice("check", "-config", f); err != nil || !strings.Contains(out, "ok (") {
		t.Fatalf("check of the imported rules: %v\n%s", err, out)
	}
	out, err = runSluice("import", "envoy-ratelimit", "../../envoyconf/testdata/bad/unit.yaml")
	if err == nil || !strings.Contains(out, "fortnight") {
		t.Fatalf("bad file: %v\n%s", err, out)
	}
}

// runSluice runs the binary with args and returns its combined output.
func runSluice(args ...string) (string, error) {
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// The rate limit service on a unix socket with mutual TLS, from the
// configuration file (certificate paths relative to it), as the peer
// offers: a client with a certificate the CA signed is served, one without
// is refused; the gRPC health service answers on the same socket.
func TestE2ERateLimitServiceUnixSocketMutualTLS(t *testing.T) {
	f := tlstest.Write(t)
	sock := filepath.Join(t.TempDir(), "rls.sock")
	up := upstreamServer(t)
	s := start(t, up.URL, fmt.Sprintf(`adaptive: {algorithm: off}
rls:
  listen: "unix:%s"
  tls: {cert_file: %q, key_file: %q, client_ca_file: %q}
rules:
  - {rule_id: d1, algorithm: fixed_window, limit: 1, window: 1m, descriptor: {domain: d, entries: [{key: k}]}}
`, sock, f.ServerCert, f.ServerKey, f.CA))
	waitFor(t, func() bool { return rlsRE.MatchString(s.logs.String()) })
	dial := func(cfg *tls.Config) *grpc.ClientConn {
		cfg.ServerName = "localhost"
		conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	if _, err := rlsv3.NewRateLimitServiceClient(dial(&tls.Config{RootCAs: f.Pool})).ShouldRateLimit(ctx, req); err == nil {
		t.Error("a client without a certificate was served")
	}
	good := dial(&tls.Config{RootCAs: f.Pool, Certificates: []tls.Certificate{f.ClientPair}})
	resp, err := rlsv3.NewRateLimitServiceClient(good).ShouldRateLimit(ctx, req)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a client with a certificate: %v %v", resp, err)
	}
	if h, err := healthpb.NewHealthClient(good).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health over the socket: %v %v", h, err)
	}
}

// An Envoy runtime folder named in rls.envoy_configs is loaded whole and
// watched as the peer watches its runtime folder: a file edited in place,
// a file added and a file removed all reload, without touching sluice.yaml
// (issue 26: an edited file kept its old limit, a removed one stayed
// enforced).
func TestE2EEnvoyRuntimeFolderIsWatched(t *testing.T) {
	dir := t.TempDir()
	folder := filepath.Join(dir, "runtime")
	if err := os.Mkdir(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, folder, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	up := upstreamServer(t)
	s := start(t, up.URL, `adaptive: {algorithm: off}
rls: {listen: "127.0.0.1:0", envoy_configs: [`+filepath.ToSlash(folder)+`]}
`)
	limits := func() map[string]int64 {
		out := map[string]int64{}
		for _, r := range state(t, s).Rules {
			out[r.RuleID] = r.Limit
		}
		return out
	}
	if got := limits(); got["a.k"] != 1 {
		t.Fatalf("the folder's file was not loaded: %v", got)
	}
	// Edited in place.
	writeFile(t, folder, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 7}\n")
	waitFor(t, func() bool { return limits()["a.k"] == 7 })
	// A file added.
	writeFile(t, folder, "b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n")
	waitFor(t, func() bool { return limits()["b.k"] == 3 })
	// A bad file is refused with its name and line; the rules in force
	// stay.
	writeFile(t, folder, "bad.yaml", "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: minutes, requests_per_unit: 3}\n")
	waitFor(t, func() bool { return strings.Contains(s.logs.String(), "bad.yaml:3: c.k: rate_limit.unit") })
	if got := limits(); got["a.k"] != 7 || got["b.k"] != 3 {
		t.Fatalf("after a bad file: %v", got)
	}
	if err := os.Remove(filepath.Join(folder, "bad.yaml")); err != nil {
		t.Fatal(err)
	}
	// A file removed: its rules go once missing for the removal delay.
	if err := os.Remove(filepath.Join(folder, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := limits()["a.k"]; return !ok })
	if got := limits(); got["b.k"] != 3 {
		t.Errorf("after a.yaml was removed: %v", got)
	}
}

// `sluice import envoy-ratelimit -merge-domains` and rls.merge_domains let
// one domain span several files, as the peer's MERGE_DOMAIN_CONFIG does.
func TestE2EMergeDomains(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.yaml", "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	b := writeFile(t, dir, "b.yaml", "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	if out, err := runSluice("import", "envoy-ratelimit", a, b); err == nil {
		t.Errorf("without -merge-domains a domain in two files was accepted:\n%s", out)
	}
	out, err := runSluice("import", "envoy-ratelimit", "-merge-domains", a, b)
	if err != nil || !strings.Contains(out, "rule_id: d.k1") || !strings.Contains(out, "rule_id: d.k2") {
		t.Fatalf("merged import: %v\n%s", err, out)
	}
	up := upstreamServer(t)
	s := start(t, up.URL, `adaptive: {algorithm: off}
rls: {listen: "127.0.0.1:0", merge_domains: true, envoy_configs: [`+filepath.ToSlash(a)+`, `+filepath.ToSlash(b)+`]}
`)
	ids := map[string]bool{}
	for _, r := range state(t, s).Rules {
		ids[r.RuleID] = true
	}
	if !ids["d.k1"] || !ids["d.k2"] {
		t.Errorf("rules %v, want both files' descriptors of domain d", ids)
	}
}
