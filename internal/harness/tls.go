package harness

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
	"testing"
	"time"
)

// TLSRegistry starts a registry as Registry does, but speaking HTTPS on 127.0.0.1 with a
// certificate of its own that no system trusts, and returns its address and the PEM file of that
// certificate (what a user gives toa-push with --ca-file).
func TLSRegistry(t testing.TB) (addr, caFile string) {
	t.Helper()
	return tlsRegistry(t, "")
}

// tlsRegistry starts a TLS registry whose users are htpasswd's lines, or anyone for "".
func tlsRegistry(t testing.TB, htpasswd string) (addr, caFile string) {
	t.Helper()
	bin := registryBinary(t)
	dir := t.TempDir()
	caFile = filepath.Join(dir, "tls.crt")
	if err := selfSigned(caFile, filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	if htpasswd != "" {
		if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(htpasswd), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return startIn(t, bin, dir), caFile
}

// The one user of AuthRegistry. Distribution's htpasswd takes bcrypt hashes only; this one was
// made once with Python's crypt (libxcrypt), at bcrypt's lowest cost so that every request's
// check stays fast:
//
//	crypt.crypt(AuthPassword, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1<<5))
const (
	AuthUser     = "toa"
	AuthPassword = "toa-test-password"
	authHTPasswd = "toa:$2b$05$dbcP33N4TIqK7gbvyLHIhuiRAWDGi11AKuS.oRY1S0xh2gyFjKX.C\n"
)

// AuthRegistry starts a registry as TLSRegistry does that also asks for credentials (HTTP basic,
// Distribution's htpasswd), and lets in AuthUser with AuthPassword only: what a team's private
// registry is. Basic credentials go over TLS, as Distribution's documentation asks.
func AuthRegistry(t testing.TB) (addr, caFile string) {
	t.Helper()
	return tlsRegistry(t, authHTPasswd)
}

// selfSigned writes a certificate for 127.0.0.1 and localhost that signs itself, and its key.
func selfSigned(certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "toa-deploy test registry"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}
