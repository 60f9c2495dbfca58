package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// point fills the store with f and measures every scenario against it.
func (r *scaleRun) point(ctx context.Context, store string, cand *target, f fillSpec, pt *scalePoint) error {
	fmt.Fprintf(r.log, "%s: filling %s records (%s expired)\n", store, fmtCount(f.Records), fmtCount(f.Expired))
	t0 := time.Now()
	last := t0
	progress := func(done int64) {
		if time.Since(last) > 15*time.Second {
			last = time.Now()
			fmt.Fprintf(r.log, "  %s of %s written, %.0f s\n", fmtCount(done), fmtCount(f.Records), time.Since(t0).Seconds())
		}
	}
	switch store {
	case "postgres":
		if err := fillPostgres(ctx, r.svc.pool, f, r.o.chunk, progress); err != nil {
			return err
		}
		pt.FillSeconds = time.Since(t0).Seconds()
		t1 := time.Now()
		sz, err := pgSizes(ctx, r.svc.pool, f.Records)
		if err != nil {
			return err
		}
		pt.PG = &sz
		fmt.Fprintf(r.log, "  filled in %.0f s; VACUUM ANALYZE %.0f s; %.0f B/record (records: table %.0f + indexes %.0f; claim ledger %.0f)\n",
			pt.FillSeconds, time.Since(t1).Seconds(), sz.PerRecord, sz.RecordsHeap/float64(f.Records), sz.RecordsIndexes/float64(f.Records), sz.ClaimsTotal/float64(f.Records))
	case "redis":
		before := r.redisUsed(ctx)
		if err := fillRedis(ctx, r.svc.rdb, redisstore.DefaultPrefix, f, progress); err != nil {
			return err
		}
		pt.FillSeconds = time.Since(t0).Seconds()
		sz := redisSizes(ctx, r.svc.rdb, f.redisKey(redisstore.DefaultPrefix, f.key(f.Records/2)))
		sz.UsedDelta = int64(r.redisUsed(ctx)) - int64(before)
		sz.PerRecord = float64(sz.UsedDelta) / float64(f.Records)
		pt.Redis = &sz
		fmt.Fprintf(r.log, "  filled in %.0f s; used_memory +%d MiB, %.0f B/record; MEMORY USAGE of a record %d B (%s)\n",
			pt.FillSeconds, sz.UsedDelta>>20, sz.PerRecord, sz.SampleBytes, sz.Encoding)
	}
	b := &r.o.bench
	for _, sc := range []string{"unique", "replay", "inflight"} {
		for round := range r.o.rounds {
			var p pairRecord
			var err error
			if p.Base, err = measure(ctx, r.base, b, baselineSpec(r.base, b)); err != nil {
				return err
			}
			spec, after, err := r.candidateSpec(ctx, cand, f, sc, round)
			if err != nil {
				return err
			}
			p.Cand, err = measure(ctx, cand, b, spec)
			if aerr := after(); err == nil {
				err = aerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", sc, err)
			}
			pt.Scenarios[sc] = append(pt.Scenarios[sc], p)
			r.check(store, f.Records, sc, p)
			fmt.Fprintf(r.log, "  %-8s round %d: baseline %6.0f req/s p99 %-7s | idemgate %6.0f req/s p99 %-7s | ratio %.2f%s\n",
				sc, round+1, p.Base.RPS, fmtDur(p.Base.P99), p.Cand.RPS, fmtDur(p.Cand.P99), p.Ratio(), extraLine(sc, p))
		}
	}
	if store == "postgres" && f.Expired > 0 {
		j, err := r.janitor(ctx, cand)
		pt.Janitor = j
		if err != nil {
			return fmt.Errorf("janitor: %w", err)
		}
	}
	return nil
}

// candidateSpec is the idemgate side of one run: new keys (claims),
// filled keys (replays), or one key held in flight (409s).
func (r *scaleRun) candidateSpec(ctx context.Context, cand *target, f fillSpec, sc string, round int) (loadSpec, func() error, error) {
	b := &r.o.bench
	id := fmt.Sprintf("%s%s-%s-%d-%d", r.prefix, sc, fmtCount(f.Records), round, time.Now().UnixNano())
	spec := loadSpec{name: "idemgate", concurrency: b.concurrency, duration: b.duration, target: cand.base + "/v1/payments"}
	none := func() error { return nil }
	switch sc {
	case "unique":
		spec.key = uniqueKeys(id)
	case "replay":
		spec.key = f.liveKey
	case "inflight":
		spec.target = cand.base + "/v1/payments/slow"
		spec.key = oneKey(id)
		release, err := holdOriginal(ctx, r.up, spec.target, id)
		return spec, release, err
	}
	return spec, none, nil
}

// check notes every run whose answers were not the expected ones.
func (r *scaleRun) check(store string, n int64, sc string, p pairRecord) {
	want := http.StatusCreated
	if sc == "inflight" {
		want = http.StatusConflict
	}
	for side, res := range map[string]loadResult{"baseline": p.Base, "idemgate": p.Cand} {
		w := want
		if side == "baseline" {
			w = http.StatusCreated
		}
		if bad := res.Requests + res.Codes[0] - res.Codes[w]; bad > 0 || res.Requests == 0 {
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("%s/%s/%s %s: %d answers were not %d (codes %v, errors %v)",
				store, fmtCount(n), sc, side, bad, w, res.Codes, res.Errors))
		}
	}
	if sc == "replay" && p.Cand.Replayed != p.Cand.Requests {
		r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("%s/%s/replay: %d of %d answers were replays", store, fmtCount(n), p.Cand.Replayed, p.Cand.Requests))
	}
}

// countingJanitor counts what the janitor deletes and notes when its
// backlog ran out (the first batch that came back short).
type countingJanitor struct {
	j       idempotency.Janitor
	batch   int
	start   time.Time
	deleted atomic.Int64
	drained atomic.Int64 // ns after start; 0: not yet
}

func (c *countingJanitor) DeleteExpired(ctx context.Context, limit int) (int, error) {
	n, err := c.j.DeleteExpired(ctx, limit)
	c.deleted.Add(int64(n))
	if err == nil && n < c.batch {
		c.drained.CompareAndSwap(0, int64(time.Since(c.start)))
	}
	return n, err
}

// janitor measures claims while the store's janitor deletes the expired
// backlog, beside a baseline run and a claim run without the janitor just
// before. It runs the janitor as idemgate does, idempotency.RunJanitor on
// a pgstore.Store, but from the bench process on its own connection, so
// that idemgate's own janitor can stay parked for the other scenarios.
func (r *scaleRun) janitor(ctx context.Context, cand *target) (*janitorRecord, error) {
	b := &r.o.bench
	rec := &janitorRecord{Interval: r.o.janInterval.String(), Batch: r.o.janBatch}
	if err := r.svc.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_records WHERE expires_at <= now()`).Scan(&rec.Backlog); err != nil {
		return rec, err
	}
	var err error
	if rec.Base, err = measure(ctx, r.base, b, baselineSpec(r.base, b)); err != nil {
		return rec, err
	}
	claims := func(tag string) loadSpec {
		return loadSpec{name: "idemgate", concurrency: b.concurrency, duration: b.duration, target: cand.base + "/v1/payments",
			key: uniqueKeys(fmt.Sprintf("%sjanitor-%s-%d", r.prefix, tag, time.Now().UnixNano()))}
	}
	if rec.Without, err = measure(ctx, cand, b, claims("off")); err != nil {
		return rec, err
	}
	jpool, err := pgxpool.New(ctx, r.svc.dbURL)
	if err != nil {
		return rec, err
	}
	defer jpool.Close()
	st := pgstore.New(jpool, pgstore.WithLogger(slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	defer st.Close()
	cj := &countingJanitor{j: st, batch: r.o.janBatch, start: time.Now()}
	jctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = idempotency.RunJanitor(jctx, cj, r.o.janInterval, r.o.janBatch, slog.New(slog.DiscardHandler))
	})
	rec.With, err = measure(ctx, cand, b, claims("on"))
	elapsed := time.Since(cj.start)
	stop()
	wg.Wait()
	rec.Deleted = cj.deleted.Load()
	rec.Seconds = elapsed.Seconds()
	if d := cj.drained.Load(); d > 0 {
		rec.DrainedAfter = time.Duration(d).Seconds()
	}
	if err != nil {
		return rec, err
	}
	drained := "backlog not cleared during the run"
	if rec.DrainedAfter > 0 {
		drained = fmt.Sprintf("backlog cleared after %.1f s", rec.DrainedAfter)
	}
	fmt.Fprintf(r.log, "  janitor: baseline %6.0f req/s p99 %-7s | claims without janitor %6.0f req/s p99 %-7s | with janitor %6.0f req/s p99 %-7s (p99 ×%.2f) | deleted %d of %d expired, %.0f rows/s, %s\n",
		rec.Base.RPS, fmtDur(rec.Base.P99), rec.Without.RPS, fmtDur(rec.Without.P99), rec.With.RPS, fmtDur(rec.With.P99),
		rec.P99Factor(), rec.Deleted, rec.Backlog, rec.Rate(), drained)
	return rec, nil
}
