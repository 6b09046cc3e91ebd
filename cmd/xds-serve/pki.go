package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// makePKI writes to dir a CA (ca.crt), the xDS server's certificate
// (server.crt, server.key) and the rate limit service's client
// certificate (tls.crt, tls.key), as Envoy Gateway lays them out at
// /certs: each for 127.0.0.1, ::1 and localhost, valid 30 days from now.
// The CA's key is not kept.
func makePKI(dir string, now time.Time) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xds-serve CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	for i, leaf := range []struct {
		name, cn string
		usage    []x509.ExtKeyUsage
	}{
		{"server", "envoy-gateway", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{"tls", "envoy-ratelimit", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: leaf.cn},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
			ExtKeyUsage: leaf.usage, KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: caTmpl.NotBefore, NotAfter: caTmpl.NotAfter}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(dir, leaf.name+".crt", "CERTIFICATE", der); err != nil {
			return err
		}
		if err := writePEM(dir, leaf.name+".key", "EC PRIVATE KEY", keyDER); err != nil {
			return err
		}
	}
	// ca.crt last: its presence says the directory is complete.
	return writePEM(dir, "ca.crt", "CERTIFICATE", caDER)
}

func writePEM(dir, name, typ string, der []byte) error {
	return os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
