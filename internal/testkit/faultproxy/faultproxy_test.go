package faultproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor bounds every wait for bytes that must arrive; generous on
// purpose. quiet is how long a read waits for bytes that must not arrive:
// a frozen proxy forwards nothing however long one waits, so a short quiet
// cannot make a test flaky, only less thorough.
const (
	waitFor = 10 * time.Second
	quiet   = 200 * time.Millisecond
)

// target is a server whose accepted connections the test reads and writes
// itself.
type target struct {
	ln    net.Listener
	conns chan net.Conn
}

func newTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln, conns: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.conns <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(tg.conns)
		for c := range tg.conns {
			_ = c.Close()
		}
	})
	return tg
}

// accepted returns the server side of the next connection the proxy made.
func (tg *target) accepted(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-tg.conns:
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(waitFor):
		t.Fatalf("the proxy did not connect to the target within %s", waitFor)
		return nil
	}
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
}

func receive(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read %q: got %q, %v", want, got, err)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// silent checks that nothing arrives on c, and that c is still open.
func silent(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(quiet))
	var b [1]byte
	n, err := c.Read(b[:])
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %d bytes, %v; want nothing and an open connection", what, n, err)
	}
}

// closed checks that c was closed by the proxy.
func closed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	var b [1]byte
	if _, err := c.Read(b[:]); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %v, want the connection closed", what, err)
	}
}

func TestForwardsBothWays(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	p := newProxy(t, tg.ln.Addr().String())
	client := dial(t, p.Addr())
	server := tg.accepted(t)
	send(t, client, "ping")
	receive(t, server, "ping")
	send(t, server, "pong")
	receive(t, client, "pong")
}

func TestFreezeHoldsBytesUntilThaw(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	p := newProxy(t, tg.ln.Addr().String())
	client := dial(t, p.Addr())
	server := tg.accepted(t)
	send(t, client, "before")
	receive(t, server, "before")

	p.Freeze()
	send(t, client, "up")
	send(t, server, "down")
	silent(t, server, "client to server while frozen")
	silent(t, client, "server to client while frozen")
	// A connection made while frozen connects, and stays mute too.
	late := dial(t, p.Addr())
	lateServer := tg.accepted(t)
	send(t, late, "late")
	silent(t, lateServer, "a connection made while frozen")

	p.Thaw()
	receive(t, server, "up")
	receive(t, client, "down")
	receive(t, lateServer, "late")
	send(t, client, "after")
	receive(t, server, "after")
}

func TestCloseConnsCutsEveryConnection(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	p := newProxy(t, tg.ln.Addr().String())
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	aServer, bServer := tg.accepted(t), tg.accepted(t)
	p.Freeze()
	send(t, a, "held")
	p.CloseConns()
	closed(t, a, "client a")
	closed(t, b, "client b")
	closed(t, aServer, "server side of a") // the held bytes were dropped
	closed(t, bServer, "server side of b")

	// The proxy still accepts, and is still frozen.
	c := dial(t, p.Addr())
	cServer := tg.accepted(t)
	send(t, c, "new")
	silent(t, cServer, "a new connection while frozen")
	p.Thaw()
	receive(t, cServer, "new")
}

func TestClose(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	p, err := faultproxy.New(tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := dial(t, p.Addr())
	tg.accepted(t)
	p.Freeze()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed(t, client, "a connection open at Close")
	if c, err := net.DialTimeout("tcp", p.Addr(), waitFor); err == nil {
		_ = c.Close()
		t.Fatal("the proxy accepted a connection after Close")
	}
}

func TestUnreachableTarget(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	p := newProxy(t, addr)
	closed(t, dial(t, p.Addr()), "a connection to an unreachable target")
}
