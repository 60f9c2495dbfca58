package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
)

// pauseAdmin is the gateway's view of the pauses: the table, and the
// tasks, queues and limits the configuration declares.
type pauseAdmin struct {
	*job.Pauses
	cfg *config.Config
}

var _ gateway.Pauses = pauseAdmin{}

// Known refuses a task, a queue or a limit the configuration does not
// declare, naming those it does.
func (a pauseAdmin) Known(t job.PauseTarget) error {
	var known []string
	switch t.Kind {
	case job.PauseTask:
		if _, ok := a.cfg.Job(t.Name); ok {
			return nil
		}
		for _, s := range a.cfg.Jobs() {
			known = append(known, s.Task)
		}
	case job.PauseQueue:
		queues := map[string]bool{}
		for q := range a.cfg.Worker.Queues {
			queues[q] = true
		}
		for _, s := range a.cfg.Jobs() {
			queues[s.Queue] = true
		}
		for _, r := range a.cfg.Routes {
			if r.Enqueue != nil && r.Enqueue.Queue != "" {
				queues[r.Enqueue.Queue] = true
			}
		}
		if queues[t.Name] {
			return nil
		}
		known = slices.Sorted(maps.Keys(queues))
	case job.PauseLimit:
		if _, ok := a.cfg.Limit(t.Name); ok {
			return nil
		}
		for _, l := range a.cfg.LimitDefs() {
			known = append(known, l.Name)
		}
	}
	if len(known) == 0 {
		return fmt.Errorf("no %s called %q is declared, and none is", t.Kind, t.Name)
	}
	return fmt.Errorf("no %s called %q is declared (declared: %s)", t.Kind, t.Name, strings.Join(known, ", "))
}

// pauseFlags are the flags pause and resume share.
type pauseFlags struct {
	task, queue, limit, key, reason, by *string
}

func addPauseFlags(fs *flag.FlagSet, getenv func(string) string) pauseFlags {
	by := getenv("USER")
	if by == "" {
		by = "cli"
	}
	return pauseFlags{
		task:   fs.String("task", "", "the task to act on"),
		queue:  fs.String("queue", "", "the queue to act on"),
		limit:  fs.String("limit", "", "the flow limit whose key value to act on (with --key)"),
		key:    fs.String("key", "", "the limit's key value, as GET /admin/limits/{name} shows it"),
		reason: fs.String("reason", "", "why, kept in the audit trail"),
		by:     fs.String("by", by, "who acts, kept in the audit trail"),
	}
}

// target is the one target the flags name.
func (f pauseFlags) target(verb string, fs *flag.FlagSet) (job.PauseTarget, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var out []job.PauseTarget
	if set["task"] {
		out = append(out, job.PauseTarget{Kind: job.PauseTask, Name: *f.task})
	}
	if set["queue"] {
		out = append(out, job.PauseTarget{Kind: job.PauseQueue, Name: *f.queue})
	}
	if set["limit"] {
		out = append(out, job.PauseTarget{Kind: job.PauseLimit, Name: *f.limit, Key: *f.key})
	}
	switch {
	case set["key"] && !set["limit"]:
		return job.PauseTarget{}, usagef("%s: --key goes with --limit", verb)
	case len(out) != 1:
		return job.PauseTarget{}, usagef("%s: name exactly one of --task, --queue and --limit", verb)
	}
	if err := out[0].Check(); err != nil {
		return job.PauseTarget{}, usagef("%s: %v", verb, strings.TrimPrefix(err.Error(), "pause: "))
	}
	if err := job.CheckReason(*f.reason); err != nil {
		return job.PauseTarget{}, usagef("%s: --reason is at most %d bytes of UTF-8", verb, job.MaxReasonBytes)
	}
	return out[0], nil
}

// runPause is `idemgate pause`: it pauses a task, a queue or a limit key
// value in PostgreSQL, as POST /admin/pause does; the workers hear of it
// within about 2 seconds.
func runPause(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, _ io.Writer) error {
	return runPauseOrResume(ctx, ext, "pause", args, getenv, stdout)
}

// runResume is `idemgate resume`, as POST /admin/resume.
func runResume(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, _ io.Writer) error {
	return runPauseOrResume(ctx, ext, "resume", args, getenv, stdout)
}

func runPauseOrResume(ctx context.Context, ext extension.Set, verb string, args []string, getenv func(string) string, stdout io.Writer) error {
	synopsis := "pause --task T | --queue Q | --limit NAME [--key K] [--until TIME|DURATION] [--reason R] [--json] --config FILE"
	if verb == "resume" {
		synopsis = "resume --task T | --queue Q | --limit NAME [--key K] [--ramp P%/DURATION] [--reason R] [--json] --config FILE"
	}
	fs := newConfigFlags(verb, synopsis, stdout)
	pf := addPauseFlags(fs.FlagSet, getenv)
	var until, ramp *string
	if verb == "pause" {
		until = fs.String("until", "", "when the pause ends by itself: an RFC 3339 time or a duration (30m); default: until resumed")
	} else {
		ramp = fs.String("ramp", "", "give capacity back gradually: P%/DURATION, like 10%/1m; default: all at once")
	}
	asJSON := fs.Bool("json", false, "print the pause as JSON")
	pos, err := fs.parseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return usagef("%s: takes no arguments, only flags (got %q)", verb, pos[0])
	}
	t, err := pf.target(verb, fs.FlagSet)
	if err != nil {
		return err
	}
	var (
		p    = job.Pause{Target: t, By: *pf.by, Reason: *pf.reason}
		r    job.Ramp
		when = time.Now()
	)
	if until != nil && *until != "" {
		if p.Until, err = job.ParseUntil(*until, when); err != nil {
			return usagef("%s: --until: %v", verb, err)
		}
	}
	if ramp != nil && *ramp != "" {
		if r, err = job.ParseRamp(*ramp); err != nil {
			return usagef("%s: --ramp: %v", verb, err)
		}
	}
	cfg, err := fs.load(ext, getenv, false)
	if err != nil {
		return err
	}
	var cl closers
	defer cl.close()
	pool, err := newServices(cfg, &cl).postgres(ctx)
	if err != nil {
		return err
	}
	admin := pauseAdmin{Pauses: job.NewPauses(pool), cfg: cfg}
	if err := admin.Known(t); err != nil {
		return usagef("%s: %v", verb, err)
	}
	if verb == "pause" {
		p, err = admin.Pause(ctx, p)
	} else {
		p, err = admin.Resume(ctx, t, r)
	}
	if err != nil {
		if err == job.ErrNotPaused {
			return fmt.Errorf("resume: the %s is not paused", t)
		}
		return err
	}
	if _, err := job.NewStore(pool).RecordAction(ctx, job.Action{Actor: *pf.by, Action: verb, Via: "cli",
		Filter: t.String(), Reason: *pf.reason}, nil); err != nil {
		return fmt.Errorf("%s: done, but not recorded in the audit trail: %w", verb, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(gateway.PauseDocument(p))
	}
	switch {
	case verb == "resume" && r.Length() > 0:
		fmt.Fprintf(stdout, "resuming %s at %s: all of it by %s\n", t, r, p.Resumed.Add(r.Length()).UTC().Format(time.RFC3339))
	case verb == "resume":
		fmt.Fprintf(stdout, "resumed %s\n", t)
	case p.Until.IsZero():
		fmt.Fprintf(stdout, "paused %s until resumed\n", t)
	default:
		fmt.Fprintf(stdout, "paused %s until %s\n", t, p.Until.UTC().Format(time.RFC3339))
	}
	return nil
}
