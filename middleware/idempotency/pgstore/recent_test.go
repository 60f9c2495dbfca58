package pgstore

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
)

func TestRecent(t *testing.T) {
	t.Parallel()
	idempotencytest.Recent(t, newStore(t, testenv.Pool(t)))
}

func TestKeys(t *testing.T) {
	t.Parallel()
	idempotencytest.Keys(t, newStore(t, testenv.Pool(t)))
}
