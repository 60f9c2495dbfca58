package faultproxy_test

import (
	"io"
	"testing"
	"time"
)

// TestDelayHoldsTargetBytesOnly: with a delay, what the target sends is
// held while what the client sends goes through at once — a replica
// behind its primary, acknowledging what it got.
func TestDelayHoldsTargetBytesOnly(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	p := newProxy(t, tg.ln.Addr().String())
	p.SetDelay(time.Hour)
	client := dial(t, p.Addr())
	server := tg.accepted(t)

	send(t, client, "ack 1")
	receive(t, server, "ack 1")
	send(t, server, "stream")
	silent(t, client, "an hour's delay")
}

// TestDelayForwardsInOrder: held bytes arrive once their delay has
// passed, in the order the target sent them.
func TestDelayForwardsInOrder(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	p := newProxy(t, tg.ln.Addr().String())
	p.SetDelay(50 * time.Millisecond)
	client := dial(t, p.Addr())
	server := tg.accepted(t)

	for _, m := range []string{"one ", "two ", "three"} {
		send(t, server, m)
	}
	receive(t, client, "one two three")
	p.SetDelay(0)
	send(t, server, "now")
	receive(t, client, "now")
}

// TestDropHeldLosesTheHeldTail: DropHeld cuts the connection and the held
// bytes never reach the client, as when the primary's host dies with
// them unsent; a new connection is forwarded again.
func TestDropHeldLosesTheHeldTail(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	p := newProxy(t, tg.ln.Addr().String())
	client := dial(t, p.Addr())
	server := tg.accepted(t)
	send(t, server, "sent ")
	receive(t, client, "sent ")

	p.SetDelay(time.Hour)
	send(t, server, "held")
	silent(t, client, "held bytes")
	p.DropHeld()
	_ = client.SetReadDeadline(time.Now().Add(waitFor))
	rest, err := io.ReadAll(client)
	if err != nil || len(rest) != 0 {
		t.Fatalf("after DropHeld the client read %q, %v; want nothing and the connection closed", rest, err)
	}

	p.SetDelay(0)
	again := dial(t, p.Addr())
	server2 := tg.accepted(t)
	send(t, server2, "after")
	receive(t, again, "after")
}
