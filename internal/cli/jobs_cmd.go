package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/job"
)

// runJobs is `idemgate jobs list` (GET /admin/jobs from the database),
// `idemgate jobs requeue JOB_ID...` (the relay's work, for the jobs an
// operator names, whatever the age of their records) and `idemgate jobs
// cancel JOB_ID...` (POST /admin/jobs/{id}/cancel for each).
func runJobs(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("jobs", "jobs list [--json] [--tenant T] [--status S] [--task T] [--created-after TIME] [--created-before TIME] [--limit N] [--cursor C] | requeue|cancel JOB_ID... --config FILE", stdout)
	lf := addListFlags(fs.FlagSet)
	reason := fs.String("reason", "", "requeue, cancel: why, kept in the audit trail (at most 1000 bytes)")
	pos, err := fs.parseArgs(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		fs.Usage()
		return usagef("jobs: want list, or requeue or cancel followed by job ids")
	case pos[0] == "list" && len(pos) > 1:
		fs.Usage()
		return usagef("jobs list: takes no arguments, only flags (got %q)", pos[1])
	case pos[0] == "list":
	case pos[0] != "requeue" && pos[0] != "cancel":
		fs.Usage()
		return usagef("jobs: unknown operation %q (want list, requeue or cancel)", pos[0])
	case len(pos) == 1:
		fs.Usage()
		return usagef("jobs %s: name at least one job id", pos[0])
	}
	op, ids := pos[0], pos[1:]
	if set := listOnly(fs.FlagSet); op != "list" && len(set) > 0 {
		return usagef("jobs %s: %s is a flag of jobs list", op, strings.Join(set, ", "))
	}
	if op == "list" && *reason != "" {
		return usagef("jobs list: --reason is a flag of jobs requeue and jobs cancel")
	}
	if job.CheckReason(*reason) != nil {
		return usagef("jobs %s: --reason is at most %d bytes of UTF-8", op, job.MaxReasonBytes)
	}
	var (
		filter job.ListFilter
		limit  int
	)
	if op == "list" {
		if filter, limit, err = lf.query(fs.FlagSet); err != nil {
			return err
		}
	}
	cfg, err := fs.load(ext, getenv, false)
	if err != nil {
		return err
	}
	var cl closers
	defer cl.close()
	if op == "list" {
		return listJobs(ctx, cfg, &cl, filter, limit, *lf.json, stdout)
	}
	enq, inspector, err := openJobQueue(ctx, cfg, &cl, "jobs")
	if err != nil {
		return err
	}
	audit := cliAudit{records: enq.Records(), getenv: getenv, stderr: stderr}
	if op == "cancel" {
		enq.Inspector = inspector
		return cancelJobs(ctx, enq, ids, audit, *reason, stdout)
	}
	relay := job.NewRelay(enq, inspector, job.RelayOptions{})

	var (
		errs []error
		done []job.Action
	)
	defer func() { audit.record(ctx, job.Action{Action: "requeue", Reason: *reason}, done) }()
	for _, id := range ids {
		rec, sent, err := relay.Requeue(ctx, id)
		switch {
		case errors.Is(err, job.ErrNotFound):
			errs = append(errs, fmt.Errorf("%s: no such job", id))
		case errors.Is(err, job.ErrFinished) && rec.Status == job.StatusSucceeded:
			fmt.Fprintf(stdout, "%s: already succeeded, nothing to do\n", id)
		case errors.Is(err, job.ErrFinished) && rec.Status == job.StatusCancelled:
			errs = append(errs, fmt.Errorf("%s: cancelled, not requeued: a cancelled job does not run again", id))
		case errors.Is(err, job.ErrFinished):
			errs = append(errs, fmt.Errorf("%s: %s, not requeued: use `idemgate dlq replay %s`", id, rec.Status, id))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		case sent:
			done = append(done, job.Action{Tenant: rec.Tenant, JobID: id})
			fmt.Fprintf(stdout, "%s: requeued (%s, %s on queue %s)\n", id, rec.Status, rec.Task, rec.Queue)
		default:
			fmt.Fprintf(stdout, "%s: task present (%s, %s on queue %s)\n", id, rec.Status, rec.Task, rec.Queue)
		}
	}
	return errors.Join(errs...)
}

// cancelJobs cancels each job and says the status it is left in; a job
// that cannot be cancelled (unknown, succeeded, failed) is an error that
// does not stop the others. The jobs it cancelled are one action in the
// audit trail.
func cancelJobs(ctx context.Context, jobs *job.Submitter, ids []string, audit cliAudit, reason string, stdout io.Writer) error {
	var (
		errs []error
		done []job.Action
	)
	defer func() { audit.record(ctx, job.Action{Action: "cancel", Reason: reason}, done) }()
	for _, id := range ids {
		rec, _, err := jobs.CancelByID(ctx, id)
		switch {
		case errors.Is(err, job.ErrNotFound):
			errs = append(errs, fmt.Errorf("%s: no such job", id))
		case errors.Is(err, job.ErrNotCancellable):
			errs = append(errs, fmt.Errorf("%s: %s, not cancellable", id, rec.Status))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		case rec.Status == job.StatusCancelling:
			done = append(done, job.Action{Tenant: rec.Tenant, JobID: id})
			fmt.Fprintf(stdout, "%s: cancelling (an attempt is in flight; its end decides: succeeded or cancelled)\n", id)
		default:
			done = append(done, job.Action{Tenant: rec.Tenant, JobID: id})
			fmt.Fprintf(stdout, "%s: %s\n", id, rec.Status)
		}
	}
	return errors.Join(errs...)
}
