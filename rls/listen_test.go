package rls_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/tlstest"
	"github.com/sluicehq/sluice/rls"
)

func descEngine(t *testing.T) *engine.Engine {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte("adaptive: {algorithm: off}\nrules:\n  - {rule_id: q, algorithm: fixed_window, limit: 1, window: 1m, descriptor: {domain: d, entries: [{key: k}]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(cfg, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func ask(t *testing.T, conn *grpc.ClientConn) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("d", 0, d("k", "v")))
	if err != nil {
		return "", err
	}
	return codesOf(resp), nil
}

// The service on a unix socket, as the peer offers; a stale socket file
// of an earlier run does not stop the next from binding.
func TestListenUnixSocket(t *testing.T) {
	e := descEngine(t)
	path := filepath.Join(t.TempDir(), "rls.sock")
	// An earlier run that was killed left its socket file behind.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	for run := range 2 {
		s, err := rls.Listen("unix:"+path, e)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if s.Addr() != "unix:"+path {
			t.Errorf("Addr %q", s.Addr())
		}
		conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ask(t, conn)
		want := map[int]string{0: "OK: OK", 1: "OVER_LIMIT: OVER_LIMIT"}[run]
		if err != nil || got != want {
			t.Errorf("run %d over the socket: %q %v, want %s", run, got, err, want)
		}
		conn.Close()
		s.Shutdown(context.Background())
	}
}

// Mutual TLS: a client with a certificate the CA signed is served; one
// without is refused at the handshake.
func TestListenMutualTLS(t *testing.T) {
	e := descEngine(t)
	f := tlstest.Write(t)
	creds, err := rls.TLSCredentials(f.ServerCert, f.ServerKey, f.CA)
	if err != nil {
		t.Fatal(err)
	}
	s, err := rls.Listen("127.0.0.1:0", e, grpc.Creds(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	dial := func(cfg *tls.Config) *grpc.ClientConn {
		conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	if _, err := ask(t, dial(&tls.Config{RootCAs: f.Pool})); err == nil {
		t.Error("a client without a certificate was served")
	}
	if got, err := ask(t, dial(&tls.Config{RootCAs: f.Pool, Certificates: []tls.Certificate{f.ClientPair}})); err != nil || got != "OK: OK" {
		t.Errorf("a client with a certificate: %q %v", got, err)
	}
	if _, err := ask(t, dial(&tls.Config{InsecureSkipVerify: true})); err == nil { //nolint:gosec // a client that trusts anything still needs a certificate
		t.Error("a client without a certificate (trusting anything) was served")
	}
}
