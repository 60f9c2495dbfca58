package fence_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStaleTokenError(t *testing.T) {
	t.Parallel()
	err := fence.Stale("sku:9", 3, 5)
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("errors.Is(%v, ErrStaleToken) = false", err)
	}
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 3 || stale.Latest != 5 || stale.Resource != "sku:9" {
		t.Fatalf("errors.As = %+v", stale)
	}
	if errors.Is(errors.New("other"), fence.ErrStaleToken) {
		t.Fatal("an unrelated error matches ErrStaleToken")
	}
}

func TestExpect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		tag       string
		wantStale bool
	}{
		{name: "row updated", tag: "UPDATE 1"},
		{name: "rows updated", tag: "UPDATE 3"},
		{name: "row inserted", tag: "INSERT 0 1"},
		{name: "no row: stale", tag: "UPDATE 0", wantStale: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := fence.Expect(pgconn.NewCommandTag(tt.tag), "order:1", 7)
			if got := errors.Is(err, fence.ErrStaleToken); got != tt.wantStale {
				t.Fatalf("Expect(%q) = %v, want stale %v", tt.tag, err, tt.wantStale)
			}
		})
	}
}

func TestNextStrictlyIncreasesUnderConcurrency(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	const acquirers, each = 50, 4
	var (
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	errs := make(chan error, acquirers)
	for range acquirers {
		wg.Go(func() {
			last := int64(0)
			for range each {
				tok, err := fence.Next(t.Context(), pool, "order:1")
				if err != nil {
					errs <- err
					return
				}
				if tok <= last {
					errs <- errors.New("a caller saw its tokens go backwards")
					return
				}
				last = tok
				mu.Lock()
				tokens = append(tokens, tok)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			t.Fatalf("token %d was drawn twice", tokens[i])
		}
	}
	// Another resource has a counter of its own, floored by the clock too.
	first, err := fence.Next(t.Context(), pool, "order:2")
	if err != nil {
		t.Fatal(err)
	}
	if floor := time.Now().Add(-time.Hour).UnixMicro(); first < floor {
		t.Fatalf("first token of another resource = %d, want the clock in microseconds (at least %d)", first, floor)
	}
}

// TestNextAfterLostTail deletes a resource's counter row as a failover to
// a standby that never received it would lose it: the next draw must still
// be higher than every token drawn before, or a receiver could not refuse
// the lost owner's write from the new one's.
func TestNextAfterLostTail(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	resource := "order:lost-" + testkit.Prefix()
	var last int64
	for range 3 {
		tok, err := fence.Next(t.Context(), pool, resource)
		if err != nil {
			t.Fatal(err)
		}
		if tok <= last {
			t.Fatalf("token %d after %d: tokens must rise", tok, last)
		}
		last = tok
	}
	if _, err := pool.Exec(t.Context(), `DELETE FROM fencing_tokens WHERE resource = $1`, resource); err != nil {
		t.Fatal(err)
	}
	after, err := fence.Next(t.Context(), pool, resource)
	if err != nil {
		t.Fatal(err)
	}
	if after <= last {
		t.Fatalf("token after the counter was lost = %d, not above the last one drawn before (%d): a re-run would carry a token already used", after, last)
	}
	// Supersede draws through the same floor.
	if _, err := pool.Exec(t.Context(), `DELETE FROM fencing_tokens WHERE resource = $1`, resource); err != nil {
		t.Fatal(err)
	}
	sup, err := fence.Supersede(t.Context(), pool, resource)
	if err != nil {
		t.Fatal(err)
	}
	if sup <= after {
		t.Fatalf("Supersede after the counter was lost = %d, not above %d", sup, after)
	}
	if err := fence.Check(t.Context(), pool, resource, after); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Check with the token drawn before the loss = %v, want ErrStaleToken", err)
	}
}

// TestTokensSurviveRedisFlush wipes every Redis key the test wrote (its own
// prefix only: the Redis is shared with other tests, and deleting the lock
// keys is what a FLUSHALL or a restart without persistence does to them).
// The next owner still gets a higher token, and the old owner's token is
// still refused.
func TestTokensSurviveRedisFlush(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	rdb := testkit.Redis(t)
	prefix := testkit.Prefix()
	locker, err := lock.New(rdb, lock.Options{Prefix: prefix, TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	createAccounts(t, pool)

	before, err := locker.Acquire(t.Context(), "account:1")
	if err != nil {
		t.Fatal(err)
	}
	defer before.Abandon()
	oldToken, err := fence.Next(t.Context(), pool, "account:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := fencedDeposit(t.Context(), pool, "account:1", oldToken, 10); err != nil {
		t.Fatalf("first owner's write: %v", err)
	}

	keys, err := rdb.Keys(t.Context(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no lock key to flush")
	}
	if err := rdb.Del(t.Context(), keys...).Err(); err != nil {
		t.Fatal(err)
	}

	after, err := locker.Acquire(t.Context(), "account:1")
	if err != nil {
		t.Fatalf("Acquire after the flush: %v", err)
	}
	defer after.Release(context.Background())
	newToken, err := fence.Next(t.Context(), pool, "account:1")
	if err != nil {
		t.Fatal(err)
	}
	if newToken <= oldToken {
		t.Fatalf("token after the flush = %d, want more than %d", newToken, oldToken)
	}
	if err := fencedDeposit(t.Context(), pool, "account:1", newToken, 100); err != nil {
		t.Fatalf("new owner's write: %v", err)
	}
	if err := fencedDeposit(t.Context(), pool, "account:1", oldToken, 1000); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("old owner's write after the flush: %v, want a stale-token error", err)
	}
	if got := balance(t, pool, "account:1"); got != 110 {
		t.Fatalf("balance = %d, want 110 (the old owner's late write refused)", got)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	// Steps run in order against one resource, each in its own transaction.
	steps := []struct {
		name      string
		token     int64
		commit    bool
		wantStale bool
		wantErr   bool
	}{
		{name: "first token", token: 3, commit: true},
		{name: "same token again", token: 3, commit: true},
		{name: "newer token", token: 5, commit: true},
		{name: "older token", token: 4, wantStale: true},
		{name: "much older token", token: 1, wantStale: true},
		{name: "newer token rolled back", token: 9, commit: false},
		{name: "a rollback leaves the fence where it was", token: 6, commit: true},
		{name: "zero is not a token", token: 0, wantErr: true},
	}
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			tx, err := pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			err = fence.Check(t.Context(), tx, "sku:1", st.token)
			switch {
			case st.wantStale:
				var stale *fence.StaleTokenError
				if !errors.As(err, &stale) {
					t.Fatalf("Check(%d) = %v, want *StaleTokenError", st.token, err)
				}
				if stale.Latest <= st.token {
					t.Fatalf("Latest = %d, want more than the refused %d", stale.Latest, st.token)
				}
				return
			case st.wantErr:
				if err == nil || errors.Is(err, fence.ErrStaleToken) {
					t.Fatalf("Check(%d) = %v, want a non-stale error", st.token, err)
				}
				return
			case err != nil:
				t.Fatalf("Check(%d): %v", st.token, err)
			}
			if st.commit {
				if err := tx.Commit(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
		})
		if !ok {
			break
		}
	}
	if got, err := fence.Latest(t.Context(), pool, "sku:1"); err != nil || got != 6 {
		t.Fatalf("Latest = %d, %v; want 6", got, err)
	}
	if got, err := fence.Latest(t.Context(), pool, "sku:unknown"); err != nil || got != 0 {
		t.Fatalf("Latest of an unfenced resource = %d, %v; want 0", got, err)
	}
}

func TestStaleWriteLeavesRowUnchanged(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	createAccounts(t, pool)
	old, err := fence.Next(t.Context(), pool, "account:7")
	if err != nil {
		t.Fatal(err)
	}
	current, err := fence.Next(t.Context(), pool, "account:7")
	if err != nil {
		t.Fatal(err)
	}
	if err := fencedDeposit(t.Context(), pool, "account:7", current, 50); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		write func(ctx context.Context, tx pgx.Tx) error
	}{
		{
			name: "fence.Check",
			write: func(ctx context.Context, tx pgx.Tx) error {
				if err := fence.Check(ctx, tx, "account:7", old); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = 'account:7'`)
				return err
			},
		},
		{
			name: "WHERE fencing_token < $token",
			write: func(ctx context.Context, tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `
UPDATE accounts SET balance = balance + 1, fencing_token = $1
 WHERE id = 'account:7' AND fencing_token < $1`, old)
				if err != nil {
					return err
				}
				return fence.Expect(tag, "account:7", old)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return tt.write(t.Context(), tx) })
			if !errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("write with the old token: %v, want a stale-token error", err)
			}
			if got := balance(t, pool, "account:7"); got != 50 {
				t.Fatalf("balance = %d after a refused write, want 50", got)
			}
		})
	}
}

func TestCheckHoldsTheFenceUntilCommit(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	newer, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Rollback(context.Background())
	if err := fence.Check(t.Context(), newer, "order:9", 2); err != nil {
		t.Fatal(err)
	}

	older := make(chan error, 1)
	go func() {
		older <- pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
			return fence.Check(context.Background(), tx, "order:9", 1)
		})
	}()
	select {
	case err := <-older:
		t.Fatalf("the older owner's Check returned (%v) while the newer one's transaction is open", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := newer.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-older; !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("older owner's Check after the newer one committed: %v, want stale", err)
	}
}

func createAccounts(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `
CREATE TABLE accounts (
    id            text PRIMARY KEY,
    balance       bigint NOT NULL DEFAULT 0,
    fencing_token bigint NOT NULL DEFAULT 0
)`)
	if err != nil {
		t.Fatal(err)
	}
}

// fencedDeposit is a business write guarded by fence.Check.
func fencedDeposit(ctx context.Context, pool *pgxpool.Pool, account string, token, amount int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := fence.Check(ctx, tx, account, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
INSERT INTO accounts (id, balance, fencing_token) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + $2, fencing_token = $3`, account, amount, token)
		return err
	})
}

func balance(t *testing.T, pool *pgxpool.Pool, account string) int64 {
	t.Helper()
	var b int64
	if err := pool.QueryRow(t.Context(), `SELECT balance FROM accounts WHERE id = $1`, account).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}
