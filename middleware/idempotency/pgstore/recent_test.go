package pgstore

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

func TestRecent(t *testing.T) {
	t.Parallel()
	idempotencytest.Recent(t, newStore(t, testkit.Pool(t)))
}

func TestKeys(t *testing.T) {
	t.Parallel()
	idempotencytest.Keys(t, newStore(t, testkit.Pool(t)))
}
