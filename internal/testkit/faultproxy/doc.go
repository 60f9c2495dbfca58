// Package faultproxy is a TCP proxy for tests that break the network
// between a client and its server on purpose. Point the client at Addr
// instead of the server; Freeze then stops every byte in both directions
// while the connections stay open, as a network partition or a hung peer
// does, Thaw lets the bytes held back through, and CloseConns cuts every
// connection at once.
//
//	p, err := faultproxy.New("127.0.0.1:5432")
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { _ = p.Close() })
//	// connect to p.Addr() …
//	p.Freeze() // calls now wait for answers that do not come
//	p.Thaw()   // and get them
//
// SetDelay holds what the target sends for a while before the client
// gets it: on a replication stream (replica → proxy → primary) it makes
// the replica lag by exactly that much, and DropHeld, after the primary
// is killed, loses the held tail as a host crash does (delay.go).
//
// A frozen proxy still accepts connections, as the kernel completes the
// handshake whatever the proxy does, but forwards nothing on them until
// Thaw.
package faultproxy
