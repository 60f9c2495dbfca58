package job

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind. Nothing
// is ignored: every goroutine a test starts has an owner that stops it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
