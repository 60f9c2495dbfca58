package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/redisstore"
)

// fillSpec describes the completed records the growth bench writes
// straight into a store, as if that many requests had been answered: the
// same scope, fingerprint and stored response for every record, only the
// key and the times differ. The response is copied from a record the
// gateway itself completed, so a replay of any filled key is answered
// exactly like a replay of a real one.
type fillSpec struct {
	Tenant, Route string
	// KeyPrefix makes the keys of one run unlike any other run's.
	KeyPrefix string
	// Records is the number of records; the first Expired of them are past
	// their expiry (PostgreSQL only: Redis drops a key once its expiry
	// passes, so a Redis fill has none).
	Records, Expired int64
	// Retention is how long a record lives after its completion.
	Retention time.Duration
	// Now anchors every time: expired records expire over the day before
	// it, live ones over the day that starts an hour after it, so none
	// expires while the bench runs.
	Now         time.Time
	Fingerprint string
	Status      int
	Header      http.Header
	Body        []byte
}

// expiredSpan and liveSpan are the windows the expiries spread over;
// liveDelay keeps every live record alive for the length of a run.
const (
	expiredSpan = 24 * time.Hour
	liveSpan    = 24 * time.Hour
	liveDelay   = time.Hour
)

// key is the Idempotency-Key of record i: a UUID made of the MD5 of the
// prefix and i, so keys land all over the primary key's index as client
// UUIDs do. fillPostgresSQL builds the same string.
func (f fillSpec) key(i int64) string {
	sum := md5.Sum([]byte(f.KeyPrefix + strconv.FormatInt(i, 10)))
	h := hex.EncodeToString(sum[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// expiresAt is record i's expiry; fillPostgresSQL computes the same.
func (f fillSpec) expiresAt(i int64) time.Time {
	if i < f.Expired {
		return f.Now.Add(-expiredSpan + time.Duration((float64(i)+0.5)/float64(f.Expired)*float64(expiredSpan)))
	}
	live := f.Records - f.Expired
	return f.Now.Add(liveDelay + time.Duration((float64(i-f.Expired)+0.5)/float64(live)*float64(liveSpan)))
}

// liveKey spreads the n-th replay over the live records, so that
// consecutive requests hit keys far apart in the index and in memory.
func (f fillSpec) liveKey(n uint64) string {
	live := uint64(f.Records - f.Expired)
	return f.key(f.Expired + int64((n*2654435761+12345)%live))
}

func (f fillSpec) headerJSON() ([]byte, error) { return json.Marshal(f.Header) }

// fillPostgresSQL writes records $8 to $9 (inclusive) of a fill as
// completed rows, and the claim that completed each in the claim ledger,
// as pgstore's Complete leaves them. $10 is Expired, $11 Records, $12 Now
// and $13 Retention in seconds.
const fillPostgresSQL = `
WITH g AS (
	SELECT i, md5($3::text || i) AS h, md5('o' || $3::text || i) AS owner,
		CASE WHEN i < $10
			THEN $12::timestamptz + make_interval(secs => -86400 + (i + 0.5) / $10::float8 * 86400)
			ELSE $12::timestamptz + make_interval(secs => 3600 + (i - $10 + 0.5) / ($11 - $10)::float8 * 86400)
		END AS expires_at
	FROM generate_series($8::bigint, $9::bigint) AS i
), r AS (
	SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' || substr(h, 17, 4) || '-' || substr(h, 21, 12) AS key,
		owner, expires_at, expires_at - make_interval(secs => $13) AS created_at
	FROM g
), claims AS (
	INSERT INTO idempotency_claims (tenant, route, key, fencing_token, owner, instance, claimed_at, ended_at, outcome, status)
	SELECT $1, $2, key, 1, owner, 'idembench-scale', created_at, created_at + interval '20 ms', 'completed', $5
	FROM r
)
INSERT INTO idempotency_records (tenant, route, key, fingerprint, state, owner, fencing_token, lease_until,
	response_status, response_headers, response_body, body_omitted, created_at, updated_at, expires_at)
SELECT $1, $2, key, $4, 'completed', owner, 1, NULL, $5, $6::jsonb, $7::bytea, false,
	created_at, created_at + interval '20 ms', expires_at
FROM r`

// fillPostgres writes the records of f into the tables pool's search path
// finds, chunk records per statement; progress gets the count written so
// far after each.
func fillPostgres(ctx context.Context, pool *pgxpool.Pool, f fillSpec, chunk int64, progress func(int64)) error {
	if f.Records <= f.Expired {
		return fmt.Errorf("fill: %d records, %d of them expired: no live record to replay", f.Records, f.Expired)
	}
	header, err := f.headerJSON()
	if err != nil {
		return err
	}
	for lo := int64(0); lo < f.Records; lo += chunk {
		hi := min(lo+chunk, f.Records) - 1
		_, err := pool.Exec(ctx, fillPostgresSQL, f.Tenant, f.Route, f.KeyPrefix, f.Fingerprint, f.Status,
			json.RawMessage(header), f.Body, lo, hi, f.Expired, f.Records, f.Now, f.Retention.Seconds())
		if err != nil {
			return fmt.Errorf("fill records %d..%d: %w", lo, hi, err)
		}
		if progress != nil {
			progress(hi + 1)
		}
	}
	return nil
}

// redisKey is the key redisstore keeps the filled record for key at.
func (f fillSpec) redisKey(prefix, key string) string {
	return redisstore.RecordKey(prefix, idempotency.Scope{Tenant: f.Tenant, Route: f.Route, Key: key})
}

// fillRedis writes the records of f as the hashes redisstore's complete
// script leaves, each with its key's expiry at its expires field, through
// a few pipelines at once. Records whose expiry has passed are skipped:
// Redis would drop them at once.
func fillRedis(ctx context.Context, rdb redis.UniversalClient, prefix string, f fillSpec, progress func(int64)) error {
	header, err := f.headerJSON()
	if err != nil {
		return err
	}
	const (
		pipelines = 4
		perPipe   = 500
	)
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
		errMu      sync.Mutex
		errs       []error
	)
	status := strconv.Itoa(f.Status)
	// The fencing token of a Redis record is the server clock in
	// microseconds when it was claimed (claimScript).
	for range pipelines {
		wg.Go(func() {
			for ctx.Err() == nil {
				lo := next.Add(perPipe) - perPipe
				if lo >= f.Records {
					return
				}
				hi := min(lo+perPipe, f.Records)
				pipe := rdb.Pipeline()
				for i := lo; i < hi; i++ {
					exp := f.expiresAt(i)
					if !exp.After(f.Now) {
						continue
					}
					created := exp.Add(-f.Retention)
					k := f.redisKey(prefix, f.key(i))
					pipe.HSet(ctx, k,
						"tenant", f.Tenant, "route", f.Route, "key", f.key(i), "fp", f.Fingerprint,
						"state", "completed", "token", created.UnixMicro(),
						"created", created.UnixMilli(), "updated", created.UnixMilli()+20, "expires", exp.UnixMilli(),
						"status", status, "header", header, "body", f.Body, "omitted", "0")
					pipe.PExpireAt(ctx, k, exp)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
					return
				}
				n := done.Add(hi - lo)
				if progress != nil && n%(perPipe*200) < perPipe {
					progress(n)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fill redis: %w", err)
	}
	return ctx.Err()
}

// unfillRedis deletes the keys fillRedis wrote for f, by name.
func unfillRedis(ctx context.Context, rdb redis.UniversalClient, prefix string, f fillSpec) error {
	const perPipe = 1000
	for lo := int64(0); lo < f.Records; lo += perPipe {
		hi := min(lo+perPipe, f.Records)
		keys := make([]string, 0, hi-lo)
		for i := lo; i < hi; i++ {
			keys = append(keys, f.redisKey(prefix, f.key(i)))
		}
		if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
			return fmt.Errorf("delete filled keys: %w", err)
		}
	}
	return nil
}

// deleteRedisRun deletes every record whose Idempotency-Key starts with
// keyPrefix: the records the gateway wrote while the bench sent it load
// (all the bench's keys carry the run's prefix). Other records in the
// database, another bench's included, are left alone.
func deleteRedisRun(ctx context.Context, rdb *redis.Client, prefix, keyPrefix string) (int, error) {
	iter := rdb.Scan(ctx, 0, prefix+"idem:{*}", 1000).Iterator()
	var (
		batch   []string
		deleted int
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		pipe := rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(batch))
		for i, k := range batch {
			cmds[i] = pipe.HGet(ctx, k, "key")
		}
		_, _ = pipe.Exec(ctx) // a key gone meanwhile answers redis.Nil
		var mine []string
		for i, c := range cmds {
			if v, err := c.Result(); err == nil && strings.HasPrefix(v, keyPrefix) {
				mine = append(mine, batch[i])
			}
		}
		batch = batch[:0]
		if len(mine) == 0 {
			return nil
		}
		deleted += len(mine)
		return rdb.Unlink(ctx, mine...).Err()
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return deleted, err
	}
	return deleted, flush()
}
