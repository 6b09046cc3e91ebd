package xdstest

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

// PKI is a CA and two certificates from it, as Envoy Gateway makes them:
// the xDS server's (Envoy Gateway's own, for the names "envoy-gateway" and
// 127.0.0.1) and the rate limit service's, which the service presents both
// to Envoy (as a server) and to the xDS server (as a client).
type PKI struct {
	// Dir holds ca.crt, tls.crt and tls.key: the rate limit service's
	// files, laid out as Envoy Gateway mounts them at /certs.
	Dir string
	// Pool holds the CA.
	Pool *x509.CertPool
	// Server is the xDS server's certificate.
	Server tls.Certificate
	// Client is the rate limit service's certificate (tls.crt, tls.key).
	Client tls.Certificate
}

// NewPKI makes a PKI valid for an hour and writes Dir. It fails t on error.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir(), Pool: x509.NewCertPool()}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "envoy-gateway-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.Pool.AddCert(ca)
	p.write(t, "ca.crt", "CERTIFICATE", caDER)
	leaf := func(serial int64, cn string, dns []string, usage ...x509.ExtKeyUsage) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: usage, KeyUsage: x509.KeyUsageDigitalSignature,
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p.Server = leaf(2, "envoy-gateway", []string{"envoy-gateway", "envoy-gateway.envoy-gateway-system.svc", "localhost"},
		x509.ExtKeyUsageServerAuth)
	p.Client = leaf(3, "envoy", []string{"envoy-ratelimit.envoy-gateway-system.svc", "localhost"},
		x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	p.write(t, "tls.crt", "CERTIFICATE", p.Client.Certificate[0])
	key, err := x509.MarshalECPrivateKey(p.Client.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, "tls.key", "EC PRIVATE KEY", key)
	return p
}

func (p *PKI) write(t testing.TB, name, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(p.Dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ServerTLS is the xDS server's TLS as Envoy Gateway's rate limit runner
// sets it up: TLS 1.3 only, a client certificate from the CA required.
func (p *PKI) ServerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.Server}, ClientCAs: p.Pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

// ClientTLS is the rate limit service's side: its certificate, and the CA
// to verify the server with.
func (p *PKI) ClientTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.Client}, RootCAs: p.Pool, MinVersion: tls.VersionTLS12}
}
