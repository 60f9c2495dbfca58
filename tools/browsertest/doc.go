// Package browsertest drives the operator console (/admin/ui on the admin
// listener) in a real headless Chromium, against real processes: a gateway
// and workers run from idemgate-examples, PostgreSQL and Redis from
// TEST_DATABASE_URL and TEST_REDIS_URL, the partner simulator and a slow
// upstream in the test process. Each scenario asserts what an operator sees
// on a page (a timeline of attempts or claims, a status that changes
// without a reload, a stored body shown as text), and the whole run checks
// that the pages ask nothing of another origin.
//
// It needs /usr/bin/chromium (Debian's chromium package, which
// deploy/local/services.sh --topology installs): without it the test is
// skipped, unless TEST_TOPOLOGY is set, as `make test` sets it, when it
// fails. IDEMGATE_SCREENSHOTS=1 (make screenshots) saves the pages it
// visits as PNGs in docs/.
//
//	cd tools && go test -run TestConsoleInBrowser ./browsertest
package browsertest
