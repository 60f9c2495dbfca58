package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/problem"
)

// listFlags are the flags of `idemgate jobs list`, named as GET
// /admin/jobs names its query parameters.
type listFlags struct {
	tenant, status, task, createdAfter, createdBefore, cursor *string
	limit                                                     *int
	json                                                      *bool
}

func addListFlags(fs *flag.FlagSet) listFlags {
	return listFlags{
		tenant:        fs.String("tenant", "", "list: only this tenant's jobs (default every tenant's)"),
		status:        fs.String("status", "", "list: only jobs in this status (a due scheduled job is queued)"),
		task:          fs.String("task", "", "list: only jobs of this task"),
		createdAfter:  fs.String("created-after", "", "list: only jobs created after this time (RFC 3339)"),
		createdBefore: fs.String("created-before", "", "list: only jobs created before this time (RFC 3339)"),
		cursor:        fs.String("cursor", "", "list: start after this cursor (the next page a previous list printed)"),
		limit:         fs.Int("limit", gateway.DefaultListLimit, fmt.Sprintf("list: at most this many jobs, 1 to %d, newest first", gateway.MaxListLimit)),
		json:          fs.Bool("json", false, "list: print the page as GET /admin/jobs answers it"),
	}
}

// listOnly names the list flags set on the command line, for the
// operations that take none.
func listOnly(fs *flag.FlagSet) []string {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "list: ") {
			set = append(set, "--"+f.Name)
		}
	})
	return set
}

// query is the flags as GET /admin/jobs's query, checked by the same
// parser: a wrong flag is refused as the API refuses the parameter.
func (lf listFlags) query(fs *flag.FlagSet) (job.ListFilter, int, error) {
	q := url.Values{}
	fs.Visit(func(f *flag.Flag) {
		name := strings.ReplaceAll(f.Name, "-", "_")
		if strings.HasPrefix(f.Usage, "list: ") && name != "json" {
			q.Set(name, f.Value.String())
		}
	})
	f, limit, err := gateway.ParseJobList(q)
	var re *problem.Error
	if errors.As(err, &re) {
		msgs := make([]string, len(re.Fields))
		for i, ff := range re.Fields {
			msgs[i] = "--" + strings.ReplaceAll(ff.Field, "_", "-") + ": " + ff.Message
		}
		return f, 0, usagef("jobs list: %s", strings.Join(msgs, "; "))
	}
	return f, limit, err
}

// listJobs prints a page of jobs, newest first, as a table or, with
// --json, the document GET /admin/jobs answers; the table ends with the
// command line of the next page.
func listJobs(ctx context.Context, cfg *config.Config, cl *closers, f job.ListFilter, limit int, asJSON bool, stdout io.Writer) error {
	pool, err := newServices(cfg, cl).postgres(ctx)
	if err != nil {
		return err
	}
	jobs, next, err := job.NewStore(pool).List(ctx, f, limit)
	if errors.Is(err, job.ErrBadCursor) {
		return usagef("jobs list: --cursor: not a cursor a list printed; start again without one")
	}
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(gateway.JobListDocument(jobs, next))
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB ID\tTENANT\tTASK\tSTATUS\tATTEMPTS\tCREATED AT")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", j.ID, j.Tenant, j.Task, j.Status, j.Attempts, j.CreatedAt.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next == "" {
		fmt.Fprintf(stdout, "%d job(s)\n", len(jobs))
		return nil
	}
	fmt.Fprintf(stdout, "%d job(s); the next page: --cursor %s\n", len(jobs), next)
	return nil
}
