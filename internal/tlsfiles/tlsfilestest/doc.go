// Package tlsfilestest makes throwaway certificate authorities and
// certificates for tests, written as the PEM files an operator deploys.
//
//	ca := tlsfilestest.NewCA(t)
//	leaf := ca.Issue(t, "127.0.0.1", "localhost")
//	certFile, keyFile := leaf.Write(t, dir, "server")
//	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
//
// Keys are Ed25519, so two certificates issued for the same names have
// files of the same size: a test can replace a certificate without its
// size changing, and set the old modification time back, to tell a forced
// reload from one noticed by a look at the files.
package tlsfilestest
