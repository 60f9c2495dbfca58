// Package testkit gives integration tests their services: a PostgreSQL
// schema (or database) of their own with every migration applied, and a
// Redis URL. Tests that need a service skip with a clear message when its
// variable is unset; `make test` sets them all, so there nothing is
// skipped. Tests that must stop a replica start private Redis servers of
// their own (replicas.go; redis-server in PATH, required under
// TEST_TOPOLOGY). Eventually is the one way a test waits for something
// to happen: it polls with a deadline that only stops a broken test. Its
// subpackages start child processes (proc) and break the network between
// a client and its server (faultproxy).
//
//	dbURL := testkit.Postgres(t)   // TEST_DATABASE_URL, fresh schema
//	direct := testkit.Database(t)  // a fresh database, for tests through a pooler
//	rdb := testkit.Redis(t)        // TEST_REDIS_URL
//	primary, replica := testkit.RedisReplicated(t)
//	resume := replica.Stop(t)      // SIGSTOP until resume()
//	testkit.Eventually(t, "the job ran", 30*time.Second, func() bool { return ran.Load() })
package testkit
