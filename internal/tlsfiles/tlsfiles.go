package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is the least time between two looks at a Pair's files.
const DefaultInterval = 5 * time.Second

// The roles of the files a FileError names.
const (
	RoleCert = "cert"
	RoleKey  = "key"
	RoleCA   = "ca"
)

// FileError is a file that could not be used.
type FileError struct {
	// Role is RoleCert, RoleKey or RoleCA.
	Role string
	// Path is the file as it was given.
	Path string
	// Err says what is wrong with it.
	Err error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s file %s: %v", e.Role, e.Path, e.Err) }

func (e *FileError) Unwrap() error { return e.Err }

// Options tunes a Pair. The zero value is usable.
type Options struct {
	// Interval is the least time between two looks at the files' size and
	// modification time. Default DefaultInterval.
	Interval time.Duration
	// Logger reports every reload and every file that could not be used.
	// Default: discarded.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Pair is a certificate and its private key read from two files, re-read
// when they change. It is safe for concurrent use.
type Pair struct {
	certFile, keyFile string
	o                 Options

	cert atomic.Pointer[tls.Certificate]

	// mu is held while the files are looked at; a handshake that finds it
	// held goes on with the current certificate instead of waiting.
	mu     sync.Mutex
	stamps [2]stamp
	next   time.Time // no look at the files before this
}

// stamp is what a look at a file sees: enough to notice a replaced file.
type stamp struct {
	mod  time.Time
	size int64
	ok   bool
}

// Load reads the certificate and key files. It fails, with a *FileError,
// when they cannot be used: a process must not start without its
// certificate.
func Load(certFile, keyFile string, o Options) (*Pair, error) {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p := &Pair{certFile: certFile, keyFile: keyFile, o: o}
	// The look comes before the read: a file replaced in between is
	// read again at the next look, never missed.
	p.stamps = p.look()
	cert, err := LoadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	p.cert.Store(cert)
	p.next = o.Now().Add(o.Interval)
	p.o.Logger.Info("tls certificate loaded", p.describe(cert)...)
	return p, nil
}

// Certificate returns the certificate to use now, after re-reading the
// files if Interval has passed since the last look and either file's size
// or modification time changed.
func (p *Pair) Certificate() *tls.Certificate {
	if p.mu.TryLock() {
		if !p.o.Now().Before(p.next) {
			_ = p.refresh(false)
		}
		p.mu.Unlock()
	}
	return p.cert.Load()
}

// GetCertificate is tls.Config.GetCertificate for a server.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.Certificate(), nil
}

// GetClientCertificate is tls.Config.GetClientCertificate for a client
// that presents the pair (mutual TLS).
func (p *Pair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return p.Certificate(), nil
}

// Reload re-reads the files now, changed or not. When they cannot be used
// it returns the error (also logged) and the previous certificate stays.
func (p *Pair) Reload() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refresh(true)
}

// refresh looks at the files and re-reads them when they changed or when
// forced. The new stamps are kept even when the files cannot be used, so a
// broken file is reported once, and read again when it changes.
func (p *Pair) refresh(force bool) error {
	p.next = p.o.Now().Add(p.o.Interval)
	stamps := p.look()
	if !force && stamps == p.stamps {
		return nil
	}
	p.stamps = stamps
	cert, err := LoadPair(p.certFile, p.keyFile)
	if err != nil {
		p.o.Logger.Error("tls certificate not reloaded; the previous one stays in use",
			"cert_file", p.certFile, "key_file", p.keyFile, "err", err)
		return err
	}
	p.cert.Store(cert)
	p.o.Logger.Info("tls certificate reloaded", p.describe(cert)...)
	return nil
}

func (p *Pair) look() [2]stamp {
	var s [2]stamp
	for i, f := range []string{p.certFile, p.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			s[i] = stamp{mod: fi.ModTime(), size: fi.Size(), ok: true}
		}
	}
	return s
}

func (p *Pair) describe(cert *tls.Certificate) []any {
	attrs := []any{"cert_file", p.certFile}
	if leaf := cert.Leaf; leaf != nil {
		attrs = append(attrs, "subject", leaf.Subject.String(), "dns_names", leaf.DNSNames,
			"serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return attrs
}

// LoadPair reads a certificate (followed by any intermediates) and its
// private key from PEM files. A *FileError names the file at fault: the
// certificate file when it holds no usable certificate, the key file when
// its key cannot be read or does not match the certificate.
func LoadPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := readFile(RoleCert, certFile)
	if err != nil {
		return nil, err
	}
	chain, err := parseCertificates(certPEM)
	if err != nil {
		return nil, &FileError{Role: RoleCert, Path: certFile, Err: err}
	}
	keyPEM, err := readFile(RoleKey, keyFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Role: RoleKey, Path: keyFile, Err: errors.New(strings.TrimPrefix(err.Error(), "tls: "))}
	}
	if cert.Leaf == nil {
		cert.Leaf = chain[0]
	}
	return &cert, nil
}

// LoadCAs reads the PEM certificates of the authorities to trust. Every
// CERTIFICATE block must parse, and there must be at least one.
func LoadCAs(caFile string) (*x509.CertPool, error) {
	b, err := readFile(RoleCA, caFile)
	if err != nil {
		return nil, err
	}
	certs, err := parseCertificates(b)
	if err != nil {
		return nil, &FileError{Role: RoleCA, Path: caFile, Err: err}
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

func readFile(role, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		// The path is the FileError's own; the os error would repeat it.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &FileError{Role: role, Path: path, Err: err}
	}
	return b, nil
}

// parseCertificates returns every CERTIFICATE block of a PEM file,
// refusing one that does not parse and a file with none.
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return certs, nil
}

// ServerConfig is the TLS configuration of a listener serving pair: TLS
// 1.2 or later, HTTP/2 offered before HTTP/1.1.
func ServerConfig(pair *Pair) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: pair.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}

// ClientConfig is the TLS configuration of a client: roots are the
// authorities it trusts (nil: the system's), serverName the name it checks
// the server's certificate against ("": the host it dials), and pair, when
// not nil, the certificate it presents when the server asks for one.
func ClientConfig(roots *x509.CertPool, serverName string, pair *Pair) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: serverName}
	if pair != nil {
		c.GetClientCertificate = pair.GetClientCertificate
	}
	return c
}
