package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"github.com/idemgate/idemgate/internal/testkit"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/tlsfiles/tlsfilestest"
)

// tlsClient trusts ca only, and speaks HTTP/2 when the server offers it.
// Each one opens its own connections.
func tlsClient(t *testing.T, ca *tlsfilestest.CA) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// exchange is one answer, with the TLS connection it came over.
type exchange struct {
	resp
	proto  string
	serial string // of the certificate the server presented
}

func doTLS(t *testing.T, c *http.Client, method, url, token, key string) exchange {
	t.Helper()
	hr, _ := http.NewRequest(method, url, strings.NewReader(`{"amount_cents":100,"currency":"EUR"}`))
	hr.Header.Set("Content-Type", "application/json")
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		hr.Header.Set("Idempotency-Key", key)
	}
	res, err := c.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return exchange{resp: resp{status: res.StatusCode, header: res.Header, body: b}, proto: res.Proto,
		serial: res.TLS.PeerCertificates[0].SerialNumber.String()}
}

// mtlsUpstream is an https upstream that requires a client certificate
// from ca and answers with the client certificate's common name.
func mtlsUpstream(t *testing.T, ca *tlsfilestest.CA) *httptest.Server {
	t.Helper()
	leaf := ca.Issue(t, "127.0.0.1")
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"client": r.TLS.PeerCertificates[0].Subject.CommonName})
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	up.StartTLS()
	t.Cleanup(up.Close)
	return up
}

// TestServeTLS: the public and admin listeners serve HTTPS over HTTP/2; a
// replaced certificate is served without a restart while connections
// opened before keep working; a route with upstream_tls reaches an upstream
// that requires mutual TLS, and without the client certificate the
// client gets a 502 problem.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	first := ca.Issue(t, "127.0.0.1")
	certFile, keyFile := first.Write(t, dir, "server")
	ca.Issue(t, "idemgate-gateway").Write(t, dir, "client")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	up := mtlsUpstream(t, ca)
	// Relative paths start at the configuration file's directory.
	cfgPath := writeConfig(t, "memory", "", "", "http://127.0.0.1:1", fmt.Sprintf(
		`  - {name: mtls, methods: [POST], path: /v1/mtls, upstream: %[1]q, upstream_tls: {ca_file: %[2]q, cert_file: %[3]q, key_file: %[4]q}}
  - {name: nocert, methods: [POST], path: /v1/nocert, upstream: %[1]q, upstream_tls: {ca_file: %[2]q}}
tls: {cert_file: %[5]q, key_file: %[6]q}
admin_tls: {cert_file: %[5]q, key_file: %[6]q}
`, up.URL, caFile, filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"), certFile, keyFile))
	g := startGateway(t, cfgPath)
	if !strings.HasPrefix(g.public, "https://") || !strings.HasPrefix(g.admin, "https://") {
		t.Fatalf("listeners announced as %s and %s, want https://", g.public, g.admin)
	}

	kept := tlsClient(t, ca)
	r := doTLS(t, kept, "POST", g.public+"/v1/mtls", "acme-key", "mtls-"+randomID())
	if r.proto != "HTTP/2.0" {
		t.Fatalf("public listener negotiated %s, want HTTP/2", r.proto)
	}
	if r.serial != first.Cert.SerialNumber.String() {
		t.Fatalf("served serial %s, want %s", r.serial, first.Cert.SerialNumber)
	}
	var got map[string]string
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &got) != nil || got["client"] != "idemgate-gateway" {
		t.Fatalf("through upstream_tls with a client certificate: %d %s; want 201 from the upstream naming the gateway's certificate", r.status, r.body)
	}
	refused := doTLS(t, kept, "POST", g.public+"/v1/nocert", "acme-key", "nocert-"+randomID())
	if refused.status != http.StatusBadGateway || refused.problemType(t) != "upstream-unavailable" {
		t.Fatalf("without a client certificate: %d %s; want 502 upstream-unavailable", refused.status, refused.body)
	}
	if m := doTLS(t, kept, "GET", g.admin+"/metrics", adminToken, ""); m.status != 200 || m.proto != "HTTP/2.0" {
		t.Fatalf("admin /metrics over TLS: %d %s", m.status, m.proto)
	}

	second := ca.Issue(t, "127.0.0.1")
	second.Replace(t, certFile, keyFile)
	testkit.Eventually(t, "the replaced certificate served", 60*time.Second, func() bool {
		return doTLS(t, tlsClient(t, ca), "POST", g.public+"/v1/mtls", "acme-key", "new-"+randomID()).serial == second.Cert.SerialNumber.String()
	})
	if r := doTLS(t, kept, "POST", g.public+"/v1/mtls", "acme-key", "kept-"+randomID()); r.serial != first.Cert.SerialNumber.String() || r.status != http.StatusCreated {
		t.Fatalf("the connection opened before the change: %d, serial %s; want it still open with the first certificate", r.status, r.serial)
	}
}

// TestSIGHUPReloadsCertificates: files replaced with the same size and
// modification time go unnoticed by the periodic look; SIGHUP re-reads
// them, and does not stop the process.
func TestSIGHUPReloadsCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	first, second := ca.Issue(t, "127.0.0.1"), ca.Issue(t, "127.0.0.1")
	certFile, keyFile := first.Write(t, dir, "server")
	cfgPath := writeConfig(t, "memory", "", "", "http://127.0.0.1:1",
		fmt.Sprintf("tls: {cert_file: %q, key_file: %q}\n", certFile, keyFile))
	g, cmd := startChild(t, cfgPath)
	serial := func() string {
		return doTLS(t, tlsClient(t, ca), "POST", g.public+"/v1/payments", "acme-key", "hup-"+randomID()).serial
	}
	if s := serial(); s != first.Cert.SerialNumber.String() {
		t.Fatalf("serial %s, want the first certificate", s)
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{certFile, second.CertPEM}, {keyFile, second.KeyPEM}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(f.data)) {
			t.Fatalf("%s: the replacement has %d bytes, not %d: the change cannot be hidden", f.path, len(f.data), fi.Size())
		}
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f.path, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	// Longer than the interval between looks at the files: they look
	// unchanged, so nothing is re-read.
	time.Sleep(7 * time.Second)
	if s := serial(); s != first.Cert.SerialNumber.String() {
		t.Fatalf("serial %s before SIGHUP: files that look unchanged were re-read", s)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the certificate re-read on SIGHUP", 60*time.Second, func() bool { return serial() == second.Cert.SerialNumber.String() })
}
