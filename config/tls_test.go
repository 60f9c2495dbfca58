package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/tlsfiles/tlsfilestest"
)

// tlsDir is a configuration directory holding a CA file (ca.pem), a server
// pair (server.crt/.key), a client pair (client.crt/.key), a key of
// another certificate (other.key) and a file that is not PEM (junk.pem).
func tlsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t)
	ca.WriteCA(t, dir, "ca.pem")
	ca.Issue(t, "gateway.test").Write(t, dir, "server")
	ca.Issue(t, "gateway-client").Write(t, dir, "client")
	ca.Issue(t, "other").Write(t, dir, "other")
	if err := os.WriteFile(filepath.Join(dir, "junk.pem"), []byte("junk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const tlsToken = "e95d4bb62790bca88762e968e6ab1d23fb79d1db4f900d22414fb258db1f606a"

func TestTLSFilesLoadRelativeToTheConfigFile(t *testing.T) {
	t.Parallel()
	dir := tlsDir(t)
	path := writeFile(t, dir, "idemgate.yaml", `store: memory
auth: {mode: none}
admin_token_sha256: `+tlsToken+`
tls: {cert_file: server.crt, key_file: server.key}
admin_tls: {cert_file: `+filepath.Join(dir, "server.crt")+`, key_file: server.key}
worker:
  admin_tls: {cert_file: server.crt, key_file: server.key}
routes:
  - name: pay
    path: /pay
    upstream: https://pay.internal
    upstream_tls: {ca_file: ca.pem, cert_file: client.crt, key_file: client.key, server_name: pay.test}
  - name: public
    path: /public
    upstream: https://example.com
    upstream_tls: {server_name: example.com}
`)
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	in := func(name string) string { return filepath.Join(dir, name) }
	if *cfg.TLS != (TLSFiles{in("server.crt"), in("server.key")}) || *cfg.AdminTLS != *cfg.TLS || *cfg.Worker.AdminTLS != *cfg.TLS {
		t.Errorf("listener files not resolved against the config's directory: tls %+v, admin_tls %+v, worker.admin_tls %+v", cfg.TLS, cfg.AdminTLS, cfg.Worker.AdminTLS)
	}
	want := UpstreamTLS{CAFile: in("ca.pem"), CertFile: in("client.crt"), KeyFile: in("client.key"), ServerName: "pay.test"}
	if got := *cfg.Routes[0].UpstreamTLS; got != want {
		t.Errorf("routes[0].upstream_tls %+v, want %+v", got, want)
	}
	if got := *cfg.Routes[1].UpstreamTLS; got != (UpstreamTLS{ServerName: "example.com"}) {
		t.Errorf("routes[1].upstream_tls %+v", got)
	}
}

func TestTLSProblems(t *testing.T) {
	t.Parallel()
	dir := tlsDir(t)
	in := func(name string) string { return filepath.Join(dir, name) }
	path := writeFile(t, dir, "broken.yaml", `store: memory
auth: {mode: none}
admin_listen: ""
tls: {cert_file: missing.crt, key_file: server.key}
admin_tls: {cert_file: server.crt, key_file: server.key}
worker:
  admin_tls: {cert_file: server.crt}
routes:
  - name: a
    path: /a
    upstream: https://a.internal
    upstream_tls: {ca_file: junk.pem, cert_file: server.crt, key_file: other.key}
  - name: b
    path: /b
    upstream: http://b.internal
    upstream_tls: {cert_file: client.crt}
  - name: c
    path: /c
    upstream: https://c.internal
    upstream_tls: {}
  - {name: d, methods: [POST], path: /d, enqueue: {task: invoice.create}, upstream_tls: {server_name: d.test}}
redis_url: redis://127.0.0.1:6379/0
`)
	_, err := Load(path, nil, WithDefaultJobs(exampleJobs(t)))
	if err == nil {
		t.Fatal("Load accepted the configuration")
	}
	want := []string{
		path + `:4: tls.cert_file: "` + in("missing.crt") + `": no such file or directory`,
		path + `:5: admin_tls: admin_listen is "": there is no admin listener to serve over TLS`,
		path + `:7: worker.admin_tls.key_file: required`,
		path + `:12: routes[0].upstream_tls.ca_file: "` + in("junk.pem") + `": holds no PEM certificate`,
		path + `:12: routes[0].upstream_tls.key_file: "` + in("other.key") + `": private key does not match public key`,
		path + `:16: routes[1].upstream_tls: the upstream "http://b.internal" is http://; upstream_tls needs an https:// upstream`,
		path + `:16: routes[1].upstream_tls.key_file: required with cert_file: the client certificate and its key go together`,
		path + `:20: routes[2].upstream_tls: empty: set ca_file, cert_file and key_file, or server_name`,
		path + `:21: routes[3].upstream_tls: applies to upstream routes only`,
	}
	got := strings.Split(err.Error(), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

func TestWorkerAdminToken(t *testing.T) {
	t.Parallel()
	const other = "10a4c7c9fc5206d6f36dc6944a81bb6f4a3cb0e25014ae3b12e6c3e52712292a"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"inherited", "admin_token_sha256: " + strings.ToUpper(tlsToken) + "\n", tlsToken},
		{"inherited from a block without the key", "admin_token_sha256: " + tlsToken + "\nworker: {concurrency: 2}\n", tlsToken},
		{"its own", "admin_token_sha256: " + tlsToken + "\nworker: {admin_token_sha256: " + other + "}\n", other},
		{"its own without a gateway token", "admin_listen: \"\"\nworker: {admin_token_sha256: " + other + "}\n", other},
		{"explicitly open", "admin_token_sha256: " + tlsToken + "\nworker: {admin_token_sha256: \"\"}\n", ""},
		{"no token anywhere", "admin_listen: \"\"\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte("store: memory\nauth: {mode: none}\n"+tc.yaml), "w.yaml", nil)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if cfg.Worker.AdminTokenSHA256 != tc.want {
				t.Errorf("worker.admin_token_sha256 = %q, want %q", cfg.Worker.AdminTokenSHA256, tc.want)
			}
		})
	}
	_, err := Parse([]byte("store: memory\nauth: {mode: none}\nadmin_token_sha256: "+tlsToken+"\nworker:\n  admin_token_sha256: my-token\n"), "w.yaml", nil)
	want := "w.yaml:5: worker.admin_token_sha256: must be the hex SHA-256 of the secret (64 hex digits); this value has 8 characters"
	if err == nil || err.Error() != want {
		t.Errorf("a token instead of its hash: %v, want %q", err, want)
	}
}
