package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/openapi"
)

const explainSynopsis = "explain --config FILE (--job JOB_ID | --key TENANT ROUTE KEY | --batch BATCH_ID | --schedule ID [--tenant T] [--last N]) [--json]"

// runExplain is `idemgate explain`: the whole story of one job or one
// idempotency key. Exit 1 when the story shows a violation.
func runExplain(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, _ io.Writer) error {
	fs := newConfigFlags("explain", explainSynopsis, stdout)
	jobID := fs.String("job", "", "explain the job with this id")
	byKey := fs.Bool("key", false, "explain the idempotency key TENANT ROUTE KEY (three arguments)")
	batchID := fs.String("batch", "", "explain the batch with this id: its tenant, its jobs counted by status, and each job")
	scheduleID := fs.String("schedule", "", "explain the recurring schedule with this id: its definition and its last slots with their outcomes")
	tenant := fs.String("tenant", "", "with --schedule: the schedule's tenant, needed when two tenants have one of this id")
	last := fs.Int("last", 20, "with --schedule: how many slots to list, newest first")
	asJSON := fs.Bool("json", false, "print one JSON document instead of text")
	pos, err := fs.parseArgs(args)
	if err != nil {
		return err
	}
	if *scheduleID != "" {
		if *jobID != "" || *byKey || *batchID != "" || len(pos) > 0 {
			fs.Usage()
			return usagef("explain: --schedule takes one schedule id, with --tenant and --last only")
		}
		if *last < 1 || *last > 10000 {
			return usagef("explain: --last %d is outside 1..10000", *last)
		}
		return explainSchedule(ctx, ext, fs, getenv, *tenant, *scheduleID, *last, *asJSON, stdout)
	}
	if *tenant != "" {
		fs.Usage()
		return usagef("explain: --tenant goes with --schedule")
	}
	if *batchID != "" {
		if *jobID != "" || *byKey || len(pos) > 0 {
			fs.Usage()
			return usagef("explain: --batch takes one batch id, alone")
		}
		return explainBatch(ctx, ext, fs, getenv, *batchID, *asJSON, stdout)
	}
	switch {
	case *jobID != "" && *byKey:
		fs.Usage()
		return usagef("explain: give --job or --key, not both")
	case *jobID != "" && len(pos) > 0:
		fs.Usage()
		return usagef("explain: --job takes one job id; unexpected arguments %q", pos)
	case *byKey && len(pos) != 3:
		fs.Usage()
		return usagef("explain: --key wants TENANT ROUTE KEY, got %d argument(s)", len(pos))
	case *jobID == "" && !*byKey:
		fs.Usage()
		return usagef("explain: want --job JOB_ID or --key TENANT ROUTE KEY")
	}
	cfg, err := fs.load(ext, getenv, false)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return usagef("explain: database_url is required")
	}
	var scope idempotency.Scope
	if *byKey {
		scope = idempotency.Scope{Tenant: pos[0], Route: pos[1], Key: pos[2]}
		if _, ok := cfg.Route(scope.Route); !ok {
			return usagef("explain: no route named %q in %s", scope.Route, *fs.path)
		}
		if cfg.Store == "memory" {
			return usagef("explain: store memory lives inside the gateway process; use the admin API (/admin/keys/.../explain)")
		}
	}
	var cl closers
	defer cl.close()
	x, err := newExplainer(ctx, ext, cfg, newServices(cfg, &cl))
	if err != nil {
		return err
	}
	var story *explain.Story
	if *byKey {
		story, err = x.Key(ctx, scope)
	} else {
		story, err = x.Job(ctx, *jobID)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(story)
	} else {
		err = explain.WriteText(stdout, story)
	}
	if err != nil {
		return err
	}
	if story.Violation {
		return fmt.Errorf("explain: violation: %s", story.Verdict)
	}
	return nil
}

// newExplainer wires explain to the configured stores: the job tables in
// PostgreSQL, the idempotency store, the effects the binary's extension
// knows (idemgate-examples: its business tables) and,
// with Redis, the queue. A memory store's records live in the gateway
// process, so only the gateway's own explainer (gatewayExplainer) has
// them.
func newExplainer(ctx context.Context, ext extension.Set, cfg *config.Config, svc *services) (*explain.Explainer, error) {
	pool, err := svc.postgres(ctx)
	if err != nil {
		return nil, err
	}
	var store idempotency.Store
	if cfg.Store != "memory" {
		if store, err = svc.idempotencyStore(ctx); err != nil {
			return nil, err
		}
	}
	return explainerOn(ext, cfg, svc, pool, store)
}

// explainerOn is the explainer on pool (nil: no job tables) and store
// (nil: no records).
func explainerOn(ext extension.Set, cfg *config.Config, svc *services, pool *pgxpool.Pool, store idempotency.Store) (*explain.Explainer, error) {
	x := &explain.Explainer{Delivered: func(task string) bool {
		spec, ok := cfg.Job(task)
		return ok && spec.HTTP != nil
	}}
	if pool != nil {
		x.DB = pool
		if len(ext.Effects) > 0 {
			x.Effects = effectsOf(ext.Effects, pool)
		}
	}
	if store != nil {
		x.Keys = store
	}
	switch st := store.(type) {
	case *pgstore.Store:
		x.Claims = pgClaims(st)
	case nil:
		x.NoClaims = "store memory: the records live inside the gateway process and no claim ledger is kept"
	default:
		x.NoClaims = fmt.Sprintf("store %s keeps no claim ledger (only store postgres does)", cfg.Store)
	}
	if cfg.RedisURL != "" {
		inspector, err := svc.queueInspector()
		if err != nil {
			return nil, err
		}
		x.TaskState = func(_ context.Context, queue, id string) (string, error) {
			return job.TaskState(inspector, queue, id)
		}
	}
	return x, nil
}

// pgClaims reads pgstore's claim ledger for explain.
func pgClaims(st *pgstore.Store) func(context.Context, idempotency.Scope) ([]openapi.StoryClaim, error) {
	return func(ctx context.Context, scope idempotency.Scope) ([]openapi.StoryClaim, error) {
		claims, err := st.Claims(ctx, scope)
		out := make([]openapi.StoryClaim, len(claims))
		for i, c := range claims {
			out[i] = openapi.StoryClaim{FencingToken: c.FencingToken, Instance: c.Instance, ClaimedAt: c.ClaimedAt,
				Outcome: openapi.StoryClaimOutcome(c.Outcome)}
			if c.Reason != "" {
				reason := c.Reason
				out[i].Reason = &reason
			}
			if !c.EndedAt.IsZero() {
				end := c.EndedAt
				out[i].EndedAt = &end
			}
			if c.Status != 0 {
				st := c.Status
				out[i].Status = &st
			}
		}
		return out, err
	}
}

// effectsOf is explain's view of the effects fs know: those of the first
// that knows the task's.
func effectsOf(fs []extension.EffectsFunc, pool *pgxpool.Pool) func(ctx context.Context, task, tenant, key string) ([]openapi.StoryEffect, bool, error) {
	return func(ctx context.Context, task, tenant, key string) ([]openapi.StoryEffect, bool, error) {
		for _, f := range fs {
			rows, known, err := f(ctx, pool, task, tenant, key)
			if err != nil {
				return nil, false, err
			}
			if !known {
				continue
			}
			out := make([]openapi.StoryEffect, len(rows))
			for i, r := range rows {
				at := r.WrittenAt
				out[i] = openapi.StoryEffect{Kind: r.Kind, Ref: r.Ref, WrittenAt: &at}
			}
			return out, true, nil
		}
		return []openapi.StoryEffect{}, false, nil
	}
}

// batchStory is what `idemgate explain --batch` prints.
type batchStory struct {
	BatchID   string         `json:"batch_id"`
	Tenant    string         `json:"tenant"`
	CreatedAt time.Time      `json:"created_at"`
	Items     int            `json:"items"`
	Counts    map[string]int `json:"counts"`
	Final     bool           `json:"final"`
	Jobs      []batchJob     `json:"jobs"`
}

type batchJob struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	Status         string `json:"status"`
	Attempts       int    `json:"attempts"`
}

// explainBatch prints a batch: its tenant, its jobs counted by status and
// each job; `idemgate explain --job` tells one job's whole story.
func explainBatch(ctx context.Context, ext extension.Set, fs configFlags, getenv func(string) string, id string, asJSON bool, stdout io.Writer) error {
	var cl closers
	defer cl.close()
	pool, err := explainDatabase(ctx, ext, fs, getenv, &cl)
	if err != nil {
		return err
	}
	tenant, st, jobs, err := job.NewStore(pool).BatchByID(ctx, id)
	if errors.Is(err, job.ErrNotFound) {
		return fmt.Errorf("explain: no batch %q", id)
	}
	if err != nil {
		return err
	}
	story := batchStory{BatchID: st.ID, Tenant: tenant, CreatedAt: st.CreatedAt.UTC(), Items: st.Items, Counts: map[string]int{}, Final: st.Final(), Jobs: []batchJob{}}
	for s, n := range st.Counts {
		story.Counts[string(s)] = n
	}
	for _, j := range jobs {
		story.Jobs = append(story.Jobs, batchJob{ID: j.ID, IdempotencyKey: j.IdempotencyKey, Status: string(j.Status), Attempts: j.Attempts})
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(story)
	}
	fmt.Fprintf(stdout, "batch %s of tenant %s, %s: %d items, %d jobs", story.BatchID, story.Tenant, story.CreatedAt.Format(time.RFC3339), story.Items, len(story.Jobs))
	if story.Final {
		fmt.Fprint(stdout, ", all final")
	}
	fmt.Fprintln(stdout)
	for _, s := range slices.Sorted(maps.Keys(story.Counts)) {
		fmt.Fprintf(stdout, "  %-11s %d\n", s, story.Counts[s])
	}
	for _, j := range story.Jobs {
		fmt.Fprintf(stdout, "  %s  %-10s attempts %d  key %s\n", j.ID, j.Status, j.Attempts, j.IdempotencyKey)
	}
	return nil
}

// scheduleStory is what `idemgate explain --schedule` prints.
type scheduleStory struct {
	Tenant     string         `json:"tenant"`
	ID         string         `json:"schedule_id"`
	Task       string         `json:"task"`
	Spec       string         `json:"spec"`
	Timezone   string         `json:"timezone"`
	Paused     bool           `json:"paused"`
	NextFireAt time.Time      `json:"next_fire_at"`
	Slots      []scheduleSlot `json:"slots"`
}

type scheduleSlot struct {
	Slot      time.Time  `json:"slot"`
	Outcome   string     `json:"outcome"`
	JobID     string     `json:"job_id,omitempty"`
	Status    string     `json:"status,omitempty"`
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// explainSchedule prints a recurring schedule and its last slots, newest
// first: each fired with its job and status, or skipped with the reason.
func explainSchedule(ctx context.Context, ext extension.Set, fs configFlags, getenv func(string) string, tenant, id string, last int, asJSON bool, stdout io.Writer) error {
	var cl closers
	defer cl.close()
	pool, err := explainDatabase(ctx, ext, fs, getenv, &cl)
	if err != nil {
		return err
	}
	store := job.NewSchedules(pool)
	r, err := store.Find(ctx, tenant, id)
	if errors.Is(err, job.ErrNotFound) {
		return fmt.Errorf("explain: no schedule %q", id)
	}
	if err != nil {
		return err
	}
	slots, err := store.Slots(ctx, r.Tenant, r.ID, last, false)
	if err != nil {
		return err
	}
	story := scheduleStory{Tenant: r.Tenant, ID: r.ID, Task: r.Task, Spec: r.Timing.String(), Timezone: r.Timing.Zone.String(),
		Paused: r.Paused, NextFireAt: r.NextFireAt.UTC(), Slots: []scheduleSlot{}}
	for _, s := range slots {
		story.Slots = append(story.Slots, scheduleSlot{Slot: s.Slot.UTC(), Outcome: string(s.Outcome), JobID: s.JobID, Status: string(s.Status), NotBefore: s.NotBefore})
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(story)
	}
	fmt.Fprintf(stdout, "schedule %s of tenant %s: task %s, %s in %s", story.ID, story.Tenant, story.Task, story.Spec, story.Timezone)
	if story.Paused {
		fmt.Fprint(stdout, ", paused")
	}
	fmt.Fprintf(stdout, "; next slot %s\n", story.NextFireAt.Format(time.RFC3339))
	if len(story.Slots) == 0 {
		fmt.Fprintln(stdout, "  no slot yet")
	}
	for _, s := range story.Slots {
		switch {
		case s.JobID != "":
			fmt.Fprintf(stdout, "  %s  %-15s %s  %s\n", s.Slot.Format(time.RFC3339), s.Outcome, s.JobID, s.Status)
		default:
			fmt.Fprintf(stdout, "  %s  %s\n", s.Slot.Format(time.RFC3339), s.Outcome)
		}
	}
	return nil
}

// explainDatabase opens the configuration's PostgreSQL for an explain
// that reads jobs alone; cl closes it.
func explainDatabase(ctx context.Context, ext extension.Set, fs configFlags, getenv func(string) string, cl *closers) (*pgxpool.Pool, error) {
	cfg, err := fs.load(ext, getenv, false)
	if err != nil {
		return nil, err
	}
	if cfg.DatabaseURL == "" {
		return nil, usagef("explain: database_url is required")
	}
	return newServices(cfg, cl).postgres(ctx)
}
