package browsertest

import (
	"testing"

	"go.uber.org/goleak"
)

// root is the repository's root: the main module, with docs/ and site/.
const root = "../.."

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgx closes its pools in the background.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
