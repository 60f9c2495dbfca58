package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/topology"
)

// Through a transaction pooler, a database_url that leaves pgx's cache of
// prepared statements on is refused when the gateway starts, with the
// fix, instead of failing statements now and then under load.
func TestPoolerWithoutQueryModeIsRefused(t *testing.T) {
	t.Parallel()
	bouncer := topology.StartPgBouncer(t)
	pooled := bouncer.URL(testkit.PostgresURL(t))
	cfg := writeConfig(t, "postgres", pooled, "", "http://127.0.0.1:1", "")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"serve", "--config", cfg}, func(string) string { return "" }, &out, &errOut)
	if ctx.Err() != nil {
		t.Fatal("the gateway started on a pooled database_url without default_query_exec_mode")
	}
	if code := idemgate.ExitCode(err, &errOut); code != 2 || !strings.Contains(errOut.String(), "add default_query_exec_mode=exec to database_url") {
		t.Fatalf("serve: exit %d (%v), want 2 naming default_query_exec_mode=exec\n%s", code, err, errOut.String())
	}
}

// migrate takes the direct connection when there is one: here
// database_url (and DATABASE_URL) lead nowhere.
func TestMigrateUsesTheDirectURL(t *testing.T) {
	t.Parallel()
	direct := testkit.Database(t, exampleTables())
	nowhere := "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"
	cfg := writeConfig(t, "postgres", nowhere, "", "http://127.0.0.1:1", fmt.Sprintf("database_direct_url: %q\n", direct))
	tests := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"database_direct_url", nil, []string{"migrate", "status", "--config", cfg}},
		{"DATABASE_DIRECT_URL", map[string]string{"DATABASE_URL": nowhere, "DATABASE_DIRECT_URL": direct}, []string{"migrate", "status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, tt.env, tt.args...)
			if code != 0 || !strings.Contains(out, "00001_idempotency.sql") || strings.Contains(out, "pending") {
				t.Fatalf("migrate status: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// migrate up holds a session lock, which a transaction pooler would leave
// behind on one of its server connections: up and down through a pooler
// are refused, naming database_direct_url, and roll nothing back.
func TestMigrateThroughAPoolerIsRefused(t *testing.T) {
	t.Parallel()
	bouncer := topology.StartPgBouncer(t)
	direct := testkit.Database(t, exampleTables())
	pooled := bouncer.URL(direct)
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "down"}} {
		code, out, errOut := cli(t, map[string]string{"DATABASE_URL": pooled}, args...)
		if code != 2 || !strings.Contains(errOut, "goes through a connection pooler") || !strings.Contains(errOut, "database_direct_url") {
			t.Fatalf("%s through a pooler: exit %d, want 2 naming database_direct_url\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, out, errOut := cli(t, map[string]string{"DATABASE_URL": direct}, "migrate", "status"); code != 0 || strings.Contains(out, "pending") {
		t.Fatalf("after the refused migrations: exit %d, want every migration still applied\n%s%s", code, out, errOut)
	}
}
