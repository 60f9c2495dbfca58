// Package explain tells the whole story of one job or one idempotency key
// from what PostgreSQL (and the idempotency store) kept: the record, its
// claims, the job, every attempt from the ledger with its fencing token and
// outcome, the effects that carry the job's business key, and a one-line
// verdict that says whether the story is consistent. `idemgate explain` and
// the admin endpoints GET /admin/jobs/{id}/explain and
// GET /admin/keys/{tenant}/{route}/{key}/explain both print what it builds.
//
//	ex := &explain.Explainer{DB: pool, Records: store, Claims: claims, Effects: effects}
//	story, err := ex.Job(ctx, "job_8971…")
//	explain.WriteText(os.Stdout, story) // or json.Marshal(story)
//	if story.Violation { os.Exit(1) }
package explain
