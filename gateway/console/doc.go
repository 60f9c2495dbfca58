// Package console is the operator console: server-rendered pages on the
// admin listener, at /admin/ui/, for the person on call who opens a
// browser rather than a terminal. It shows what the gateway and
// PostgreSQL already hold — recent requests by tenant and route
// (gateway.RecentRequests), jobs by status, stuck jobs (reconcile.StuckJobs),
// a key's record and claims, a job's attempts with their fencing tokens,
// its effects and the verdict (internal/explain), the recurring schedules
// with their slots (job.Schedules), the fairness pools' tenants
// (job.Fairness) — and acts through the
// same code as the command line: requeue (job.Relay.Requeue, `idemgate
// jobs requeue`), replay and delete of a failed job (job.DeadLetters,
// `idemgate dlq`), cancel (job.Submitter.CancelByID, `idemgate jobs
// cancel`), resolve and delete of a key (the store, as the admin API).
//
// Every page is html/template output, readable without JavaScript; the
// stylesheet and one small script are embedded and served from
// /admin/ui/static/, so no request leaves the admin listener's origin, and
// the Content-Security-Policy forbids any that would. Stored data is only
// ever text: html/template escapes it, a stored body that is not JSON is
// shown as text, credentials in stored headers and secret-looking members
// of JSON documents are masked.
//
// Live updates poll rather than stream: a job or key page asks a small
// JSON document (…/live, a version of what the page shows) every two
// seconds while it is visible, and fetches the page again only when the
// version changed. A stream (Server-Sent Events) would hold a connection
// per open page against the admin listener's write timeout and through any
// proxy in between; a poll is one short request, stops by itself when the
// tab is hidden (visibilitychange), and needs no server state.
//
// Authentication and cross-site protection are the admin listener's: the
// console is mounted with gateway.AdminMount, which asks for the admin
// token (HTTP Basic, the token as password, or Bearer) and refuses a
// cross-origin POST. The console sets no cookie, so there is no session
// to bind a token to; every state-changing action is a POST behind a
// confirmation page that says what it does to the stores.
//
//	h, err := console.New(console.Options{Stories: explainer, Keys: store, Jobs: job.NewStore(pool)})
//	g.AdminMount(console.DefaultPrefix, h)
package console
