package job

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// MaxBatchItems is the most items one batch may hold, whatever a route
// declares.
const MaxBatchItems = 1000

// sendConcurrency bounds the tasks of one batch sent at once.
const sendConcurrency = 32

// BatchID derives a batch's id from its idempotency scope, as ID does a
// job's, so that a retry of the batch names the same batch.
func BatchID(tenant, route, key string) string {
	h := sha256.New()
	for _, s := range []string{tenant, route, key} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return "bat_" + hex.EncodeToString(h.Sum(nil))[:32]
}

// Batch is one accepted batch submit: the jobs to record, and the jobs of
// its items that earlier requests recorded already.
type Batch struct {
	// Tenant, Route and Key are the batch request's idempotency scope,
	// from which ID derives.
	Tenant, Route, Key string
	// Requests become the batch's new jobs, each under its own key in
	// its single route's scope. Each was decoded (Request.Decode) and its
	// schedule checked by the caller.
	Requests []Request
	// Existing are the ids of items' jobs recorded before, by a single
	// submit or another batch with the same item key.
	Existing []string
	// Items is how many items the batch held, refused ones included.
	Items int
}

// ID is the batch's id.
func (b Batch) ID() string { return BatchID(b.Tenant, b.Route, b.Key) }

// BatchState is a batch as GET /v1/batches/{id} shows it.
type BatchState struct {
	ID        string
	Items     int
	CreatedAt time.Time
	// Counts are the batch's accepted jobs by status.
	Counts map[Status]int
}

// Final reports whether every accepted job of the batch is final.
func (s BatchState) Final() bool {
	for st, n := range s.Counts {
		if n > 0 && !st.Final() {
			return false
		}
	}
	return true
}

// SubmitBatch records every job of b, and the batch, in one transaction,
// then sends the tasks of the jobs that are queued or scheduled, each
// through the path Submit sends one by, a few at a time. It returns the
// jobs in the order of b.Requests. Like Submit, it is idempotent: a job
// that exists is returned as stored. An error wrapping ErrTaskDeferred
// comes with every job: they are recorded, some tasks are late, and the
// relay sends them. Any other error means nothing was recorded.
func (e *Submitter) SubmitBatch(ctx context.Context, b Batch) ([]Row, error) {
	begin, ok := e.records.db.(interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	})
	if !ok {
		return nil, errors.New("job: submit batch: the job store cannot begin a transaction")
	}
	recs := make([]Row, len(b.Requests))
	for i, req := range b.Requests {
		if req.Spec == nil {
			return nil, errors.New("job: submit batch: no job spec")
		}
		p, err := req.Decode()
		if err != nil {
			return nil, err
		}
		recs[i] = Row{
			ID: ID(req.Tenant, req.Route, req.Key), Tenant: req.Tenant, Route: req.Route, IdempotencyKey: req.Key,
			Task: req.Spec.Task, Queue: ShardQueue(req.QueueName(), req.Tenant, e.Shards), BusinessKey: p.BusinessKey, Payload: req.Body,
		}
	}
	id := b.ID()
	err := pgx.BeginFunc(ctx, begin, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for i, req := range b.Requests {
			at, delaySecs := scheduleArgs(req.Spec.effective(req.Schedule))
			j := recs[i]
			batch.Queue(createJobSQL, j.ID, j.Tenant, j.Route, j.IdempotencyKey, j.Task, j.Queue, j.BusinessKey, j.Payload,
				at, delaySecs, id)
		}
		ids := make([]string, 0, len(recs)+len(b.Existing))
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		ids = append(ids, b.Existing...)
		batch.Queue(`INSERT INTO batches (tenant, id, route, idempotency_key, items, job_ids)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant, id) DO UPDATE SET job_ids = EXCLUDED.job_ids, items = EXCLUDED.items`,
			b.Tenant, id, b.Route, b.Key, b.Items, ids)
		results := tx.SendBatch(ctx, batch)
		var again []int
		for i := range b.Requests {
			var created bool
			got := &recs[i]
			err := results.QueryRow().Scan(append(got.scanTargets(), &created)...)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				// A concurrent insert this statement's snapshot could
				// not see yet: read it once the pipeline is done.
				again = append(again, i)
			case err != nil:
				_ = results.Close()
				return fmt.Errorf("job: submit batch: create job: %w", err)
			}
		}
		if _, err := results.Exec(); err != nil {
			_ = results.Close()
			return fmt.Errorf("job: submit batch: record batch: %w", err)
		}
		if err := results.Close(); err != nil {
			return fmt.Errorf("job: submit batch: %w", err)
		}
		txRecords := &Store{db: tx}
		for _, i := range again {
			got, _, err := txRecords.create(ctx, recs[i], b.Requests[i].Spec.effective(b.Requests[i].Schedule))
			if err != nil {
				return err
			}
			recs[i] = got
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := e.sendAll(ctx, recs); err != nil {
		return recs, fmt.Errorf("%w: %w", ErrTaskDeferred, err)
	}
	return recs, nil
}

// sendAll sends the task of each queued or scheduled job in recs through
// enqueue, the one path a job's task takes, sendConcurrency at a time;
// then, with Broker, waits once for each queue's replicas. It returns the
// first failure: the relay sends what was not sent.
func (e *Submitter) sendAll(ctx context.Context, recs []Row) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	slots := make(chan struct{}, sendConcurrency)
	queues := map[string]bool{}
	for _, r := range recs {
		if r.Status != StatusQueued && r.Status != StatusScheduled {
			continue
		}
		queues[r.Queue] = true
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := e.enqueue(ctx, r); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	if e.Broker != nil {
		for q := range queues {
			if err := e.Broker.wait(ctx, q); err != nil {
				return err
			}
		}
	}
	return nil
}

// Batch returns tenant's batch with id and counts its jobs by status.
func (s *Store) Batch(ctx context.Context, tenant, id string) (BatchState, error) {
	if !Storable(id) || !Storable(tenant) {
		return BatchState{}, ErrNotFound
	}
	const q = `
SELECT b.id, b.items, b.created_at, s.status, count(j.id)
  FROM batches b
  LEFT JOIN LATERAL (SELECT unnest(b.job_ids) AS id) m ON true
  LEFT JOIN jobs j ON j.id = m.id AND j.tenant = b.tenant
  LEFT JOIN LATERAL (SELECT CASE WHEN j.status = 'scheduled' AND j.not_before <= now() THEN 'queued' ELSE j.status END AS status) s ON true
 WHERE b.tenant = $1 AND b.id = $2
 GROUP BY b.id, b.items, b.created_at, s.status`
	rows, err := s.db.Query(ctx, q, tenant, id)
	if err != nil {
		return BatchState{}, fmt.Errorf("job: get batch: %w", err)
	}
	defer rows.Close()
	st := BatchState{Counts: map[Status]int{}}
	found := false
	for rows.Next() {
		var status *string
		var n int
		if err := rows.Scan(&st.ID, &st.Items, &st.CreatedAt, &status, &n); err != nil {
			return BatchState{}, fmt.Errorf("job: get batch: %w", err)
		}
		found = true
		if status != nil && n > 0 {
			st.Counts[Status(*status)] = n
		}
	}
	if err := rows.Err(); err != nil {
		return BatchState{}, fmt.Errorf("job: get batch: %w", err)
	}
	if !found {
		return BatchState{}, ErrNotFound
	}
	return st, nil
}

// Batch returns tenant's batch with id, its jobs counted by status.
func (e *Submitter) Batch(ctx context.Context, tenant, id string) (BatchState, error) {
	return e.records.Batch(ctx, tenant, id)
}

// BatchByID returns the batch with id whatever its tenant (operators):
// its tenant, its jobs counted by status, and those jobs in item order.
func (s *Store) BatchByID(ctx context.Context, id string) (string, BatchState, []Row, error) {
	if !Storable(id) {
		return "", BatchState{}, nil, ErrNotFound
	}
	var tenant string
	var ids []string
	err := s.db.QueryRow(ctx, `SELECT tenant, job_ids FROM batches WHERE id = $1 ORDER BY created_at LIMIT 1`, id).Scan(&tenant, &ids)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", BatchState{}, nil, ErrNotFound
	}
	if err != nil {
		return "", BatchState{}, nil, fmt.Errorf("job: get batch: %w", err)
	}
	st, err := s.Batch(ctx, tenant, id)
	if err != nil {
		return "", BatchState{}, nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT `+recordColumns+` FROM jobs WHERE tenant = $1 AND id = ANY($2) ORDER BY array_position($2, id)`, tenant, ids)
	if err != nil {
		return "", BatchState{}, nil, fmt.Errorf("job: batch jobs: %w", err)
	}
	defer rows.Close()
	var jobs []Row
	for rows.Next() {
		j, err := scanRecord(rows)
		if err != nil {
			return "", BatchState{}, nil, fmt.Errorf("job: batch jobs: %w", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return "", BatchState{}, nil, fmt.Errorf("job: batch jobs: %w", err)
	}
	return tenant, st, jobs, nil
}

// BatchOf returns the id of the batch job id was submitted in; "" when it
// was submitted alone.
func (s *Store) BatchOf(ctx context.Context, id string) (string, error) {
	var batch *string
	err := s.db.QueryRow(ctx, `SELECT batch_id FROM jobs WHERE id = $1`, id).Scan(&batch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", ErrNotFound
	case err != nil:
		return "", fmt.Errorf("job: batch of %s: %w", id, err)
	case batch == nil:
		return "", nil
	}
	return *batch, nil
}
