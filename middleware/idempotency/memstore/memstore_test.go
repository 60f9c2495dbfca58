package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/idempotencytest"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memstore counts fencing tokens from 1, and the suite checks that too.
func TestConformance(t *testing.T) {
	idempotencytest.Run(t, func(*testing.T) idempotency.Store { return memstore.New() })
}

// A bound large enough for the suite changes nothing it checks.
func TestConformanceBounded(t *testing.T) {
	idempotencytest.Run(t, func(*testing.T) idempotency.Store { return memstore.New(memstore.WithMaxBytes(1 << 30)) })
}

func TestRecent(t *testing.T) {
	t.Parallel()
	idempotencytest.Recent(t, memstore.New())
}

func TestKeys(t *testing.T) {
	t.Parallel()
	idempotencytest.Keys(t, memstore.New())
}
