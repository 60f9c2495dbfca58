package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/tlsfiles"
	"github.com/idemgate/idemgate/internal/tlsfiles/tlsfilestest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wantCertificate fails the test unless pair holds leaf's certificate;
// when says at which point, and which certificate it should be.
func wantCertificate(t *testing.T, pair *tlsfiles.Pair, leaf *tlsfilestest.Leaf, when string) {
	t.Helper()
	if got := pair.Certificate().Leaf.SerialNumber; got.Cmp(leaf.Cert.SerialNumber) != 0 {
		t.Fatalf("serial %s %s", got, when)
	}
}

func TestLoadPairNamesTheFileAtFault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	certA, keyA := ca.Issue(t, "a.test").Write(t, dir, "a")
	_, keyB := ca.Issue(t, "b.test").Write(t, dir, "b")
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCert := filepath.Join(dir, "bad.crt")
	if err := os.WriteFile(badCert, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name            string
		cert, key       string
		role, path, msg string
	}{
		{"missing certificate", missing, keyA, tlsfiles.RoleCert, missing, "no such file"},
		{"not PEM", junk, keyA, tlsfiles.RoleCert, junk, "holds no PEM certificate"},
		{"a certificate that does not parse", badCert, keyA, tlsfiles.RoleCert, badCert, "certificate 1:"},
		{"missing key", certA, missing, tlsfiles.RoleKey, missing, "no such file"},
		{"key not PEM", certA, junk, tlsfiles.RoleKey, junk, "PEM"},
		{"another certificate's key", certA, keyB, tlsfiles.RoleKey, keyB, "private key does not match public key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tlsfiles.LoadPair(tc.cert, tc.key)
			var fe *tlsfiles.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("LoadPair: %v, want a *FileError", err)
			}
			if fe.Role != tc.role || fe.Path != tc.path || !strings.Contains(fe.Err.Error(), tc.msg) {
				t.Fatalf("FileError %+v (%v), want role %s, path %s, a message with %q", fe, fe.Err, tc.role, tc.path, tc.msg)
			}
			if _, err := tlsfiles.Load(tc.cert, tc.key, tlsfiles.Options{}); !errors.As(err, &fe) {
				t.Fatalf("Load: %v, want a *FileError: a process must not start without its certificate", err)
			}
		})
	}

	cert, err := tlsfiles.LoadPair(certA, keyA)
	if err != nil || cert.Leaf == nil || cert.Leaf.Subject.CommonName != "a.test" {
		t.Fatalf("LoadPair of a good pair: %v, %+v", err, cert)
	}
}

func TestLoadCAs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	good := ca.WriteCA(t, dir, "ca.pem")
	pool, err := tlsfiles.LoadCAs(good)
	if err != nil {
		t.Fatal(err)
	}
	leaf := ca.Issue(t, "a.test")
	if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "a.test"}); err != nil {
		t.Fatalf("a certificate the CA issued does not verify against the loaded pool: %v", err)
	}
	for name, content := range map[string]string{
		"empty.pem": "",
		"key.pem":   string(leaf.KeyPEM), // a key where the CA should be
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		var fe *tlsfiles.FileError
		if _, err := tlsfiles.LoadCAs(path); !errors.As(err, &fe) || fe.Role != tlsfiles.RoleCA || !strings.Contains(err.Error(), "no PEM certificate") {
			t.Errorf("LoadCAs(%s): %v, want a ca FileError", name, err)
		}
	}
}

// A server serving a Pair picks up replaced files by itself, over HTTP/2,
// while a connection opened before keeps working with the certificate it
// was opened with.
func TestServerPicksUpReplacedFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	first, second := ca.Issue(t, "127.0.0.1"), ca.Issue(t, "127.0.0.1")
	certFile, keyFile := first.Write(t, dir, "server")
	pair, err := tlsfiles.Load(certFile, keyFile, tlsfiles.Options{Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.Proto) }),
		TLSConfig: tlsfiles.ServerConfig(pair),
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS: %v", err)
		}
	})
	url := "https://" + ln.Addr().String() + "/"
	newTransport := func() *http.Transport {
		return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	}
	get := func(tr *http.Transport) (proto, serial string) {
		t.Helper()
		res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.ProtoMajor != 2 || string(body) != "HTTP/2.0" {
			t.Fatalf("negotiated %s (server saw %s), want HTTP/2", res.Proto, body)
		}
		return res.Proto, res.TLS.PeerCertificates[0].SerialNumber.String()
	}

	kept := newTransport()
	t.Cleanup(kept.CloseIdleConnections)
	if _, s := get(kept); s != first.Cert.SerialNumber.String() {
		t.Fatalf("served serial %s, want the first certificate's %s", s, first.Cert.SerialNumber)
	}

	second.Replace(t, certFile, keyFile)
	deadline := time.Now().Add(30 * time.Second)
	for {
		tr := newTransport()
		_, s := get(tr)
		tr.CloseIdleConnections()
		if s == second.Cert.SerialNumber.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving serial %s 30s after the files were replaced", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The connection opened before the change is still open and still
	// answers, with the certificate it was opened with.
	if _, s := get(kept); s != first.Cert.SerialNumber.String() {
		t.Fatalf("the connection opened before the change now shows serial %s: it was dropped and reopened", s)
	}
}

// Looks at the files happen at most once per interval; a bad new file is
// logged and the previous certificate stays; a fixed file is picked up.
func TestBadFileKeepsThePreviousCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	first, second := ca.Issue(t, "a.test"), ca.Issue(t, "a.test")
	certFile, keyFile := first.Write(t, dir, "a")
	// clk is a settable time for the looks at the files.
	clk := testkit.NewClock(time.Now())
	logs := &testkit.SyncBuffer{}
	pair, err := tlsfiles.Load(certFile, keyFile, tlsfiles.Options{
		Interval: time.Minute, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}

	// A new certificate whose key has not arrived yet.
	if err := os.WriteFile(certFile, second.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	wantCertificate(t, pair, first, "before the interval passed, want the first certificate")
	clk.Add(time.Minute)
	wantCertificate(t, pair, first, "with a key that does not match, want the first certificate kept")
	if log := logs.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "does not match") || !strings.Contains(log, keyFile) {
		t.Fatalf("no error logged for the mismatched key:\n%s", log)
	}
	if err := pair.Reload(); err == nil {
		t.Fatal("Reload with a mismatched key: no error")
	}

	// The key arrives.
	if err := os.WriteFile(keyFile, second.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	wantCertificate(t, pair, second, "once the key matches, want the second certificate")
}

// Reload re-reads files whose size and modification time did not change,
// which the periodic look cannot notice.
func TestReloadForcesARead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	first, second := ca.Issue(t, "a.test"), ca.Issue(t, "a.test")
	if len(first.CertPEM) != len(second.CertPEM) || len(first.KeyPEM) != len(second.KeyPEM) {
		t.Fatalf("certificates for the same names differ in size (%d, %d): the test cannot hide the change", len(first.CertPEM), len(second.CertPEM))
	}
	certFile, keyFile := first.Write(t, dir, "a")
	clk := testkit.NewClock(time.Now())
	pair, err := tlsfiles.Load(certFile, keyFile, tlsfiles.Options{Interval: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	hide(t, second, certFile, keyFile)
	clk.Add(time.Hour)
	wantCertificate(t, pair, first, "from files with the same size and time, want the first certificate: they were re-read without Reload")
	if err := pair.Reload(); err != nil {
		t.Fatal(err)
	}
	wantCertificate(t, pair, second, "after Reload, want the second certificate")
}

// hide writes leaf over the files keeping their size and modification time.
func hide(t *testing.T, leaf *tlsfilestest.Leaf, certFile, keyFile string) {
	t.Helper()
	for _, f := range []struct {
		path string
		data []byte
	}{{certFile, leaf.CertPEM}, {keyFile, leaf.KeyPEM}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(f.data)) {
			t.Fatalf("%s: %d bytes, the replacement %d", f.path, fi.Size(), len(f.data))
		}
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f.path, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
}

// A client configuration with a Pair presents it to a server that
// requires a client certificate; without one the server refuses.
func TestClientConfigMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	serverLeaf := ca.Issue(t, "upstream.test")
	serverCert, err := tls.X509KeyPair(serverLeaf.CertPEM, serverLeaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	up.StartTLS()
	t.Cleanup(up.Close)

	certFile, keyFile := ca.Issue(t, "gateway.test").Write(t, dir, "client")
	pair, err := tlsfiles.Load(certFile, keyFile, tlsfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	do := func(cfg *tls.Config) (string, error) {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(up.URL)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return string(b), err
	}
	// The server's certificate names upstream.test, not 127.0.0.1.
	got, err := do(tlsfiles.ClientConfig(ca.Pool(), "upstream.test", pair))
	if err != nil || got != "gateway.test" {
		t.Fatalf("with the client certificate: %q, %v; want the server to see gateway.test", got, err)
	}
	if _, err := do(tlsfiles.ClientConfig(ca.Pool(), "upstream.test", nil)); err == nil {
		t.Fatal("without a client certificate the server answered")
	}
	if _, err := do(tlsfiles.ClientConfig(ca.Pool(), "", pair)); err == nil {
		t.Fatal("a server certificate for another name was accepted")
	}
}
