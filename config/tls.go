package config

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/idemgate/idemgate/internal/tlsfiles"
)

// TLSFiles is a listener's certificate and private key, PEM files that the
// process re-reads when they change (looked at every few seconds) and on
// SIGHUP. A relative path starts at the configuration file's directory.
type TLSFiles struct {
	// CertFile is the certificate, followed by any intermediates. Required.
	CertFile string `yaml:"cert_file"`
	// KeyFile is its private key (PKCS #1, PKCS #8 or SEC 1). Required.
	KeyFile string `yaml:"key_file"`
}

// UpstreamTLS is how the gateway talks TLS to one route's upstream. A
// relative path starts at the configuration file's directory.
type UpstreamTLS struct {
	// CAFile holds the PEM certificates of the authorities that sign the
	// upstream's certificate (a private CA). Default: the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and key the gateway
	// presents when the upstream asks for one (mutual TLS); both or
	// neither. Re-read when they change and on SIGHUP, like a listener's.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the upstream's certificate must carry.
	// Default the host of the upstream URL.
	ServerName string `yaml:"server_name"`
}

// validateTLS resolves every TLS file against the configuration file's
// directory and checks that it loads: a pair's key matches its
// certificate, a CA file parses.
func (c *Config) validateTLS(bad badFunc, o *options) {
	c.TLS = checkTLSFiles(bad, "tls", c.TLS, o.dir)
	c.AdminTLS = checkTLSFiles(bad, "admin_tls", c.AdminTLS, o.dir)
	if c.AdminTLS != nil && c.AdminListen == "" {
		bad("admin_tls", `admin_listen is "": there is no admin listener to serve over TLS`)
	}
	c.Worker.AdminTLS = checkTLSFiles(bad, "worker.admin_tls", c.Worker.AdminTLS, o.dir)
	if c.Worker.AdminTLS != nil && c.Worker.AdminListen == "" {
		bad("worker.admin_tls", `worker.admin_listen is "": there is no worker admin listener to serve over TLS`)
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		u := r.UpstreamTLS
		if u == nil {
			continue
		}
		p := fmt.Sprintf("routes[%d].upstream_tls", i)
		switch {
		case r.Enqueue != nil && r.Upstream == "":
			bad(p, "applies to upstream routes only")
		case r.Upstream != "":
			if up, err := url.Parse(r.Upstream); err == nil && up.Scheme == "http" {
				bad(p, "the upstream %q is http://; upstream_tls needs an https:// upstream", r.Upstream)
			}
		}
		if *u == (UpstreamTLS{}) {
			bad(p, "empty: set ca_file, cert_file and key_file, or server_name")
			continue
		}
		if u.CAFile != "" {
			u.CAFile = resolve(o.dir, u.CAFile)
			if _, err := tlsfiles.LoadCAs(u.CAFile); err != nil {
				fileProblem(bad, p, err)
			}
		}
		switch {
		case u.CertFile == "" && u.KeyFile == "":
		case u.CertFile == "":
			bad(p+".cert_file", "required with key_file: the client certificate and its key go together")
		case u.KeyFile == "":
			bad(p+".key_file", "required with cert_file: the client certificate and its key go together")
		default:
			u.CertFile, u.KeyFile = resolve(o.dir, u.CertFile), resolve(o.dir, u.KeyFile)
			if _, err := tlsfiles.LoadPair(u.CertFile, u.KeyFile); err != nil {
				fileProblem(bad, p, err)
			}
		}
	}
}

// checkTLSFiles checks one listener's pair and returns it with its paths
// resolved.
func checkTLSFiles(bad badFunc, key string, f *TLSFiles, dir string) *TLSFiles {
	if f == nil {
		return nil
	}
	missing := false
	if f.CertFile == "" {
		bad(key+".cert_file", "required")
		missing = true
	}
	if f.KeyFile == "" {
		bad(key+".key_file", "required")
		missing = true
	}
	if missing {
		return f
	}
	r := &TLSFiles{CertFile: resolve(dir, f.CertFile), KeyFile: resolve(dir, f.KeyFile)}
	if _, err := tlsfiles.LoadPair(r.CertFile, r.KeyFile); err != nil {
		fileProblem(bad, key, err)
	}
	return r
}

// fileProblem reports a file that does not load at its own key.
func fileProblem(bad badFunc, key string, err error) {
	var fe *tlsfiles.FileError
	if !errors.As(err, &fe) {
		bad(key, "%v", err)
		return
	}
	bad(key+"."+fe.Role+"_file", "%q: %v", fe.Path, fe.Err)
}

func resolve(dir, path string) string {
	if filepath.IsAbs(path) || dir == "" {
		return path
	}
	return filepath.Join(dir, path)
}
