package main

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
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/jetflow-io/jetflow/testutil"
)

// writePEM writes one PEM block to dir/name and returns the path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testCA makes a CA and a server certificate for 127.0.0.1, and returns the
// CA file and the server's TLS configuration.
func testCA(t *testing.T) (caFile string, cfg *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jetflow test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	return caFile, &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}},
		MinVersion:   tls.VersionTLS12,
	}
}

// TestTLSAndNKey connects to a server that requires TLS and an NKey user.
func TestTLSAndNKey(t *testing.T) {
	t.Parallel()
	caFile, tlsCfg := testCA(t)
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := user.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	nkeyOpt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	e := newAuthEnv(t, []testutil.ServerOption{func(o *server.Options) {
		o.TLSConfig, o.TLS, o.TLSTimeout = tlsCfg, true, 2
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	}}, []nats.Option{nats.RootCAs(caFile), nkeyOpt})
	url := strings.Replace(e.url, "nats://", "tls://", 1)

	if r := runCLI(t, "-s", url, "status", "--tlsca", caFile, "--nkey", seedFile); r.code != exitOK {
		t.Fatalf("tls and nkey: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "-s", url, "status", "--nkey", seedFile); r.code != exitConnect || !strings.Contains(r.stderr, "TLS failed") {
		t.Fatalf("without the CA: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "-s", url, "status", "--tlsca", caFile); r.code != exitConnect || !strings.Contains(r.stderr, "refused the credentials") {
		t.Fatalf("without the nkey: exit %d %q", r.code, r.stderr)
	}
}
