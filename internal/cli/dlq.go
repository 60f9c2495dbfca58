package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/job"
)

func runDLQ(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("dlq", "dlq list|replay JOB_ID...|delete JOB_ID... --config FILE", stdout)
	limit := fs.Int("limit", 100, "list: at most this many jobs, newest first")
	reason := fs.String("reason", "", "replay, delete: why, kept in the audit trail (at most 1000 bytes)")
	pos, err := fs.parseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return usagef("dlq: want list, replay or delete")
	}
	op, ids := pos[0], pos[1:]
	switch {
	case op == "list" && len(ids) == 0:
	case (op == "replay" || op == "delete") && len(ids) > 0:
	default:
		fs.Usage()
		return usagef("dlq: want list, or replay/delete followed by job ids")
	}
	if op == "list" && *reason != "" {
		return usagef("dlq list: --reason is a flag of dlq replay and dlq delete")
	}
	if job.CheckReason(*reason) != nil {
		return usagef("dlq %s: --reason is at most %d bytes of UTF-8", op, job.MaxReasonBytes)
	}
	cfg, err := fs.load(ext, getenv, false)
	if err != nil {
		return err
	}
	var cl closers
	defer cl.close()
	enq, inspector, err := openJobQueue(ctx, cfg, &cl, "dlq")
	if err != nil {
		return err
	}
	dl := job.NewDeadLetters(enq, inspector)
	audit := cliAudit{records: enq.Records(), getenv: getenv, stderr: stderr}
	var done []job.Action
	defer func() { audit.record(ctx, job.Action{Action: op, Reason: *reason}, done) }()

	switch op {
	case "list":
		list, err := dl.List(ctx, *limit)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB ID\tTASK\tQUEUE\tATTEMPTS\tFAILED AT\tIN ARCHIVE\tERROR")
		for _, d := range list {
			archived := "no (replay re-enqueues it)"
			if d.Archived {
				archived = "yes"
			}
			lastErr := ""
			if d.Error != nil {
				lastErr = *d.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.Task, d.Queue, d.Attempts, d.UpdatedAt.UTC().Format(time.RFC3339), archived, lastErr)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d failed job(s)\n", len(list))
		return nil
	case "replay":
		var errs []error
		for _, id := range ids {
			rec, err := dl.Replay(ctx, id)
			if err != nil {
				errs = append(errs, dlqError(id, err))
				continue
			}
			done = append(done, job.Action{Tenant: rec.Tenant, JobID: id})
			fmt.Fprintf(stdout, "%s: replayed, now %s\n", id, rec.Status)
		}
		return errors.Join(errs...)
	default:
		var errs []error
		for _, id := range ids {
			tenant := ""
			if rec, err := enq.Records().ByID(ctx, id); err == nil {
				tenant = rec.Tenant
			}
			if err := dl.Delete(ctx, id); err != nil {
				errs = append(errs, dlqError(id, err))
				continue
			}
			done = append(done, job.Action{Tenant: tenant, JobID: id})
			fmt.Fprintf(stdout, "%s: deleted\n", id)
		}
		return errors.Join(errs...)
	}
}

func dlqError(id string, err error) error {
	switch {
	case errors.Is(err, job.ErrNotFound):
		return fmt.Errorf("%s: no such job", id)
	case errors.Is(err, job.ErrNotFailed):
		return fmt.Errorf("%s: not a failed job (%v)", id, err)
	}
	return fmt.Errorf("%s: %w", id, err)
}
