// Package tlstest writes a throwaway certificate authority and certificates
// signed by it for tests of TLS and mutual TLS listeners on 127.0.0.1.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files Write made.
type Files struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// Pool trusts the CA; ClientPair is the client's certificate.
	Pool       *x509.CertPool
	ClientPair tls.Certificate
}

// Write makes a CA, a server certificate for 127.0.0.1 and localhost, and
// a client certificate, in a temporary folder of t's.
func Write(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	caKey, caDER := cert(t, nil, nil, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature})
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, srvDER := cert(t, ca, caKey, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature})
	cliKey, cliDER := cert(t, ca, caKey, &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "envoy"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature})
	f := Files{CA: filepath.Join(dir, "ca.pem"), ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"), Pool: x509.NewCertPool()}
	f.Pool.AddCert(ca)
	write(t, f.CA, "CERTIFICATE", caDER)
	write(t, f.ServerCert, "CERTIFICATE", srvDER)
	write(t, f.ServerKey, "EC PRIVATE KEY", keyDER(t, srvKey))
	write(t, f.ClientCert, "CERTIFICATE", cliDER)
	write(t, f.ClientKey, "EC PRIVATE KEY", keyDER(t, cliKey))
	if f.ClientPair, err = tls.LoadX509KeyPair(f.ClientCert, f.ClientKey); err != nil {
		t.Fatal(err)
	}
	return f
}

func cert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func keyDER(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func write(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
