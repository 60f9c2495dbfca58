package job

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Takeover. The relay enqueues again the task of a job whose lock nobody holds,
// under TaskID <job id>:t<token>, so another worker takes it within a lock TTL.
// Its take draws a higher fencing token, so the lost owner's writes are refused.
// Design: docs/design/takeover.md says why this is safe.

// LockProbe says which resources' locks are held. A *lock.Locker is one.
type LockProbe interface {
	Held(ctx context.Context, resources []string) ([]bool, error)
}

// TakeoverTaskID is the TaskID of the task that takes job id over from the
// attempt that held token and lost its lock.
func TakeoverTaskID(id string, token int64) string {
	return id + ":t" + strconv.FormatInt(token, 10)
}

// Takeover is what one takeover pass did.
type Takeover struct {
	// Checked counts the jobs whose lock the pass looked for.
	Checked int
	// Enqueued lists the takeover tasks the pass enqueued.
	Enqueued []string
}

// lostJob is a processing job whose latest attempt may have lost its
// lock.
type lostJob struct {
	Row
	resource string
	token    int64
}

// TakeOver enqueues a takeover task for each processing job whose latest
// attempt lost its lock (see above). It does nothing without
// RelayOptions.Locks.
func (r *Relay) TakeOver(ctx context.Context) (Takeover, error) {
	var p Takeover
	if r.opts.Locks == nil {
		return p, nil
	}
	r.takeMu.Lock()
	defer r.takeMu.Unlock()
	jobs, err := r.lostLocks(ctx)
	if err != nil || len(jobs) == 0 {
		return p, err
	}
	resources := make([]string, len(jobs))
	for i, j := range jobs {
		resources[i] = j.resource
	}
	held, err := r.opts.Locks.Held(ctx, resources)
	if err != nil {
		return p, fmt.Errorf("job: takeover: %w", err)
	}
	p.Checked = len(jobs)
	for i, j := range jobs {
		if held[i] {
			continue
		}
		id := TakeoverTaskID(j.ID, j.token)
		sent, err := r.sub.sendAs(ctx, j.Row, id, nil)
		if err != nil {
			return p, fmt.Errorf("job: takeover: %w", err)
		}
		if sent {
			p.Enqueued = append(p.Enqueued, id)
			r.opts.Logger.InfoContext(ctx, "relay: job taken over from a worker that lost its lock", "job_id", j.ID,
				"task_id", id, "task", j.Task, "queue", j.Queue, "tenant", j.Tenant, "resource", j.resource, "lost_token", j.token)
		}
	}
	return p, nil
}

// lostLocks reads the jobs a takeover pass checks, those unchanged the
// longest first.
func (r *Relay) lostLocks(ctx context.Context) ([]lostJob, error) {
	const q = `SELECT ` + recordColumns + `, x_resource, x_token FROM (
SELECT j.*, e.resource AS x_resource, e.fencing_token AS x_token, e.updated_at AS x_since
  FROM jobs j
  JOIN job_executions e ON e.tenant = j.tenant AND e.key = j.business_key
 WHERE j.status IN ('processing', 'cancelling')
   AND e.status = 'processing'
   AND e.updated_at < now() - make_interval(secs => $1)
   AND EXISTS (SELECT 1 FROM job_attempts a
                WHERE a.tenant = e.tenant AND a.key = e.key AND a.fencing_token = e.fencing_token
                  AND a.job_id = j.id AND (a.outcome IS NULL OR a.outcome = 'lock_lost'))
) jobs
 ORDER BY x_since, id
 LIMIT $2`
	rows, err := r.sub.records.db.Query(ctx, q, r.opts.LockTTL.Seconds(), r.opts.Batch)
	if err != nil {
		return nil, fmt.Errorf("job: takeover: %w", err)
	}
	defer rows.Close()
	var out []lostJob
	for rows.Next() {
		var j lostJob
		if err := rows.Scan(append(j.scanTargets(), &j.resource, &j.token)...); err != nil {
			return nil, fmt.Errorf("job: takeover: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: takeover: %w", err)
	}
	return out, nil
}

// takeoverInterval is how often Run makes a takeover pass: half the lock
// TTL unless set, so a lock that expired is noticed within one and a half
// TTLs of its last renewal.
func (o RelayOptions) takeoverInterval() time.Duration {
	if o.TakeoverInterval > 0 {
		return o.TakeoverInterval
	}
	return max(o.LockTTL/2, 10*time.Millisecond)
}
