// Package tlsfiles serves and presents certificates kept in PEM files that
// an operator (or cert-manager, or certbot) replaces while the process
// runs. A Pair holds one certificate and its key; its GetCertificate (for a
// server) and GetClientCertificate (for mutual TLS to an upstream) look at
// the files' size and modification time at most once per Interval and
// re-read them when either changed. Reload re-reads them at once (on
// SIGHUP). A file that cannot be used — missing, half written, a key that
// does not match its certificate — is logged and the previous certificate
// stays in use, so a bad deployment of certificates never takes a listener
// down; connections already open are never touched.
//
//	pair, err := tlsfiles.Load("cert.pem", "key.pem", tlsfiles.Options{Logger: logger})
//	if err != nil {
//		return err // the first load must succeed
//	}
//	srv.TLSConfig = tlsfiles.ServerConfig(pair)
//	err = srv.ServeTLS(ln, "", "")
//
// LoadPair and LoadCAs check files once, as `idemgate config check` does;
// their errors are *FileError, naming the file at fault.
package tlsfiles
