package idempotencytest

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// EndEach is the walk of a test of what a store tells other processes when
// a record ends. For each way an owner ends its claim (complete, release,
// mark unknown) it ends a record nobody watches, quiet-<way>, then one that
// watcher watches, watched-<way>, both claimed with claim under tenant t
// and route r and ended through s; it then hands check the way, the
// watched scope and its watch, still open for check to read and stop.
// Ending the quiet record first lets check tell, from the order of what
// the store sent, that it sent nothing for it.
func EndEach(t testing.TB, s idempotency.Store, watcher idempotency.Watcher, claim func(sc idempotency.Scope, owner string),
	check func(way string, watched idempotency.Scope, changed <-chan struct{}, stop func())) {
	t.Helper()
	ctx := t.Context()
	ends := map[string]func(idempotency.Scope, string) error{
		"complete": func(sc idempotency.Scope, owner string) error {
			return s.Complete(ctx, sc, owner, idempotency.Response{Status: 201}, time.Hour)
		},
		"release":      func(sc idempotency.Scope, owner string) error { return s.Release(ctx, sc, owner) },
		"mark unknown": func(sc idempotency.Scope, owner string) error { return s.MarkUnknown(ctx, sc, owner) },
	}
	for name, end := range ends {
		quiet := idempotency.Scope{Tenant: "t", Route: "r", Key: "quiet-" + name}
		claim(quiet, "o1")
		if err := end(quiet, "o1"); err != nil {
			t.Fatal(err)
		}
		watched := idempotency.Scope{Tenant: "t", Route: "r", Key: "watched-" + name}
		claim(watched, "o2")
		changed, stop, err := watcher.Watch(ctx, watched)
		if err != nil {
			t.Fatal(err)
		}
		if err := end(watched, "o2"); err != nil {
			t.Fatal(err)
		}
		check(name, watched, changed, stop)
	}
}
