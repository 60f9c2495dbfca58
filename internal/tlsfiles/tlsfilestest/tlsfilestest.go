package tlsfilestest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// CA is a certificate authority that lives for one test.
type CA struct {
	Cert *x509.Certificate
	// PEM is Cert, PEM-encoded: the content of a ca_file.
	PEM []byte
	key ed25519.PrivateKey

	notBefore, notAfter time.Time
	mu                  sync.Mutex
	serial              int64
}

// Leaf is a certificate the CA issued, and its key.
type Leaf struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
}

// serialBase keeps every serial number the same length, so certificates
// for the same names have the same size.
const serialBase = 1 << 40

// NewCA makes a self-signed authority valid from an hour ago for a day.
func NewCA(t testing.TB) *CA {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	ca := &CA{key: key, notBefore: now.Add(-time.Hour), notAfter: now.Add(24 * time.Hour), serial: serialBase}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(ca.serial),
		Subject:               pkix.Name{CommonName: "idemgate test CA"},
		NotBefore:             ca.notBefore,
		NotAfter:              ca.notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.Cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.PEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return ca
}

// Pool is a pool trusting only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteCA writes the CA's certificate to dir/name and returns the path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	return write(t, filepath.Join(dir, name), ca.PEM)
}

// Issue signs a certificate for names (DNS names or IP addresses), usable
// by a server and by a client. Its serial number is new; the first name
// is its common name.
func (ca *CA) Issue(t testing.TB, names ...string) *Leaf {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.mu.Lock()
	ca.serial++
	serial := ca.serial
	ca.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		NotBefore:    ca.notBefore,
		NotAfter:     ca.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if len(names) > 0 {
		tmpl.Subject.CommonName = names[0]
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	}
}

// Write writes the certificate and key to dir/name.crt and dir/name.key
// and returns their paths.
func (l *Leaf) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	return write(t, filepath.Join(dir, name+".crt"), l.CertPEM), write(t, filepath.Join(dir, name+".key"), l.KeyPEM)
}

// Replace writes the leaf over existing files the way a deployment tool
// does: each file is written aside and renamed into place, so a reader
// never sees half a file.
func (l *Leaf) Replace(t testing.TB, certFile, keyFile string) {
	t.Helper()
	for _, f := range []struct {
		path string
		data []byte
	}{{certFile, l.CertPEM}, {keyFile, l.KeyPEM}} {
		tmp := write(t, f.path+".new", f.data)
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
}

func write(t testing.TB, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
