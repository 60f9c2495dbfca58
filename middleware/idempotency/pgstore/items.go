package pgstore

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/internal/headerjson"
)

var _ idempotency.ItemStore = (*Store)(nil)

// ClaimMany claims the records of reqs (a batch's items) in one round trip
// and one commit: the statements go in one pipeline, which PostgreSQL runs
// as one implicit transaction, in the primary key's order so that two
// batches cannot deadlock. A claim the pipeline does not settle (a record
// that changed under it, a failed statement, a commit whose outcome is not
// known) is made again on its own by Claim, with the same owner, which
// finds a claim the pipeline did make.
func (s *Store) ClaimMany(ctx context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.ClaimResult, error) {
	results := make([]idempotency.ClaimResult, len(reqs))
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return compareScopes(reqs[a].Scope, reqs[b].Scope) })
	settled := make([]bool, len(reqs))
	if err := s.claimPipeline(ctx, reqs, order, results, settled); err != nil && ctx.Err() != nil {
		return nil, err
	}
	for i, ok := range settled {
		if ok {
			continue
		}
		res, err := s.Claim(ctx, reqs[i])
		if err != nil {
			return nil, err
		}
		results[i] = res
	}
	return results, nil
}

// claimPipeline sends the claims of reqs in order in one pipeline and
// settles those whose answer is final; it settles none unless the
// pipeline committed.
func (s *Store) claimPipeline(ctx context.Context, reqs []idempotency.ClaimRequest, order []int, results []idempotency.ClaimResult, settled []bool) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	for _, i := range order {
		req, sc := reqs[i], reqs[i].Scope
		b.Queue(claimSQL, sc.Tenant, sc.Route, sc.Key, req.Fingerprint, req.Owner, req.Lease, req.Retention, s.instance)
	}
	br := conn.SendBatch(ctx, b)
	got := make([]idempotency.ClaimResult, len(reqs))
	ok := make([]bool, len(reqs))
	for _, i := range order {
		var r row
		err := br.QueryRow().Scan(&r.claimed, &r.stale, &r.takeover, &r.rec.Fingerprint, &r.state, &r.rec.FencingToken, &r.rec.Owner,
			&r.lease, &r.status, &r.headers, &r.body, &r.omitted,
			&r.rec.CreatedAt, &r.rec.UpdatedAt, &r.rec.ExpiresAt)
		if err != nil {
			continue // ErrNoRows (a race) or a failure: Claim decides
		}
		req := reqs[i]
		rec, err := r.record(req.Scope)
		if err != nil {
			continue
		}
		mine := rec.State == idempotency.StateInFlight && rec.Owner == req.Owner
		switch {
		case r.claimed || mine:
			got[i], ok[i] = idempotency.ClaimResult{Claimed: true, TakeOver: r.takeover, Record: rec}, true
		case !r.stale:
			got[i], ok[i] = idempotency.ClaimResult{Record: rec}, true
		}
	}
	if err := br.Close(); err != nil {
		return err // not known to have committed: Claim settles every one
	}
	copy(results, got)
	copy(settled, ok)
	return nil
}

var _ idempotency.ItemCompleter = (*Store)(nil)

// CompleteMany stores the answers of a batch's claimed items in one round
// trip and one commit, as ClaimMany claims them. When the pipeline's
// commit is not known, each answer is stored again on its own by
// Complete, which is conditional on the owner and so stores it once.
func (s *Store) CompleteMany(ctx context.Context, items []idempotency.ItemCompletion) []error {
	errs := make([]error, len(items))
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return compareScopes(items[a].Scope, items[b].Scope)
	})
	if err := s.completePipeline(ctx, items, order, errs); err == nil {
		return errs
	}
	for i, it := range items {
		errs[i] = s.Complete(ctx, it.Scope, it.Owner, it.Response, it.Retention)
	}
	return errs
}

func (s *Store) completePipeline(ctx context.Context, items []idempotency.ItemCompletion, order []int, errs []error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	for _, i := range order {
		it := items[i]
		var headers json.RawMessage
		if it.Response.Header != nil {
			headers = headerjson.Append(make([]byte, 0, headerjson.Size(it.Response.Header)), it.Response.Header)
		}
		body := it.Response.Body
		if it.Response.BodyOmitted {
			body = nil
		}
		sc := it.Scope
		b.Queue(completeSQL, sc.Tenant, sc.Route, sc.Key, it.Owner,
			it.Response.Status, headers, body, it.Response.BodyOmitted, it.Retention,
			false, s.channel, scopeID(sc))
	}
	br := conn.SendBatch(ctx, b)
	refused := make([]bool, len(items))
	for _, i := range order {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return err
		}
		refused[i] = tag.RowsAffected() == 0
	}
	if err := br.Close(); err != nil {
		return err
	}
	for i, r := range refused {
		if r {
			status := items[i].Response.Status
			s.refused(ctx, items[i].Scope, items[i].Owner, "completion refused: the claim was taken over", &status)
			errs[i] = idempotency.ErrNotOwner
		}
	}
	return nil
}
