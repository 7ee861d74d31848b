package redisstore_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlstest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
	"github.com/sluicehq/sluice/static/statictest"
)

func tlsClient(t *testing.T, f redisstore.TLSFiles, addrs ...string) (*redisstore.Store, error) {
	t.Helper()
	conf, err := redisstore.TLSConfig(f)
	if err != nil {
		return nil, err
	}
	c, err := redisstore.NewClient(redisstore.Config{Addrs: addrs, TLS: conf})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	s := redisstore.New(c, redisstore.Options{})
	return s, s.Load(context.Background())
}

// TestTLS: a store reaches a redis-server that speaks only TLS to it, with
// mutual TLS, and passes the conformance suite there; it is refused without
// its client certificate, and it refuses a server its CA did not sign.
func TestTLS(t *testing.T) {
	files := tlstest.Write(t)
	srv := redistest.StartTLS(t, files, true)
	ok := redisstore.TLSFiles{CAFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}
	if _, err := tlsClient(t, ok, srv.TLSAddr()); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	n := 0
	statictest.Run(t, func(t *testing.T, clock sluice.Clock) static.Store {
		n++
		conf, err := redisstore.TLSConfig(ok)
		if err != nil {
			t.Fatal(err)
		}
		c, err := redisstore.NewClient(redisstore.Config{Addrs: []string{srv.TLSAddr()}, TLS: conf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// Five seconds per round trip: the suite checks what is decided,
		// and opens many connections at once, whose handshakes Redis
		// makes one after another (a second timed out beside the race
		// detector's heaviest packages on a 2-core machine).
		return redisstore.New(c, redisstore.Options{Clock: clock, Prefix: "tls" + strconv.Itoa(n), Timeout: 5 * time.Second})
	})
	if _, err := tlsClient(t, redisstore.TLSFiles{CAFile: files.CA}, srv.TLSAddr()); err == nil {
		t.Error("a client without a certificate reached a server that requires one")
	}
	other := tlstest.Write(t) // another CA
	if _, err := tlsClient(t, redisstore.TLSFiles{CAFile: other.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}, srv.TLSAddr()); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Errorf("a server signed by another CA: %v, want a certificate error", err)
	}
}

// TestTLSConfigErrors: each unusable file is named.
func TestTLSConfigErrors(t *testing.T) {
	files := tlstest.Write(t)
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f    redisstore.TLSFiles
		want string
	}{
		{redisstore.TLSFiles{CAFile: filepath.Join(t.TempDir(), "missing.pem")}, "ca_file"},
		{redisstore.TLSFiles{CAFile: notPEM}, "no PEM certificate"},
		{redisstore.TLSFiles{CertFile: files.ClientCert}, "go together"},
		{redisstore.TLSFiles{CertFile: files.ClientCert, KeyFile: files.ServerKey}, "cert_file, key_file"},
	} {
		if _, err := redisstore.TLSConfig(c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %q", c.f, err, c.want)
		}
	}
}
