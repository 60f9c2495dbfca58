package pglisten_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/pglisten"
)

func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), testkit.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// A connection that hears the test notification listens on the channel:
// a notification sent there afterwards reaches it.
func TestListenHearsTheChannel(t *testing.T) {
	t.Parallel()
	listener, writer := connect(t), connect(t)
	const channel = "pglisten_test_channel"
	if err := pglisten.Listen(t.Context(), listener, writer, channel, "pglisten_probe_", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec(t.Context(), "SELECT pg_notify($1, 'hello')", channel); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification on %s: %v", channel, err)
	}
	if n.Channel != channel || n.Payload != "hello" {
		t.Fatalf("got %q on %q, want hello on %q (the test notification must not leak)", n.Payload, n.Channel, channel)
	}
}

// silent takes the test notification and sends it nowhere, as a
// transaction pooler's other server connection would.
type silent struct{}

func (silent) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, nil
}

func TestListenFindsNotificationsDoNotArrive(t *testing.T) {
	t.Parallel()
	listener := connect(t)
	err := pglisten.Listen(t.Context(), listener, silent{}, "pglisten_test_deaf", "pglisten_probe_", 200*time.Millisecond)
	if !errors.Is(err, pglisten.ErrNotDelivered) {
		t.Fatalf("Listen = %v, want ErrNotDelivered", err)
	}
	// And it did not LISTEN on the channel: nothing is registered.
	var n int
	if err := listener.QueryRow(t.Context(), "SELECT count(*) FROM pg_listening_channels() WHERE pg_listening_channels = 'pglisten_test_deaf'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the connection listens on the channel after ErrNotDelivered")
	}
}
