// Package topology starts what idemgate meets in production, on loopback,
// for the tests that run it there: nginx in front of several gateways,
// PgBouncer in transaction pooling mode in front of PostgreSQL, and a Redis
// primary with a replica and three sentinels. Each server is a private
// process on a free port, stopped when its test ends; the shared Redis and
// PostgreSQL the other tests use are never stopped or flushed.
//
// The binaries come from Debian's packages. `make test` installs them
// (deploy/local/services.sh --topology) and sets TEST_TOPOLOGY=1; without
// it a test whose binary is missing is skipped with a message saying so.
package topology
