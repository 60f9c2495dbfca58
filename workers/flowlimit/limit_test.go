package flowlimit_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/flowlimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLimiter(t *testing.T) *flowlimit.Limiter {
	t.Helper()
	return flowlimit.New(testkit.Redis(t), flowlimit.Options{Prefix: testkit.Prefix()})
}

func refusal(t *testing.T, err error) *flowlimit.RefusedError {
	t.Helper()
	ref, ok := errors.AsType[*flowlimit.RefusedError](err)
	if !ok {
		t.Fatalf("take: %v, want a *RefusedError", err)
	}
	return ref
}

func mustTake(t *testing.T, l *flowlimit.Limiter, holder string, lease time.Duration, rules ...flowlimit.Rule) *flowlimit.Hold {
	t.Helper()
	h, err := l.Take(t.Context(), holder, lease, rules)
	if err != nil {
		t.Fatalf("take as %s: %v", holder, err)
	}
	return h
}

func TestRateWaitIsExact(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	rule := flowlimit.Rule{Name: "api", Value: "acme", Rate: 2, Period: time.Second}
	mustTake(t, l, "a", time.Second, rule)
	_, err := l.Take(t.Context(), "b", time.Second, []flowlimit.Rule{rule})
	ref := refusal(t, err)
	if ref.Reason != flowlimit.ReasonRate || ref.Name != "api" || ref.Value != "acme" {
		t.Fatalf("refused %+v, want the rate of api/acme", ref)
	}
	// The second start is due one interval ((1s + 50ms)/2, 525ms) after
	// the first; the wait is what is left of it, never more.
	if ref.RetryAfter <= 0 || ref.RetryAfter > 525*time.Millisecond {
		t.Fatalf("RetryAfter = %s, want in (0, 525ms]", ref.RetryAfter)
	}
	// Waiting exactly that long is enough.
	time.Sleep(ref.RetryAfter)
	mustTake(t, l, "b", time.Second, rule)
}

func TestRateBurst(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	rule := flowlimit.Rule{Name: "api", Value: "acme", Rate: 1, Period: 10 * time.Second, Burst: 3}
	for i := range 3 {
		mustTake(t, l, "h"+string(rune('0'+i)), time.Second, rule)
	}
	_, err := l.Take(t.Context(), "h3", time.Second, []flowlimit.Rule{rule})
	ref := refusal(t, err)
	// Three at once spent the burst: the fourth waits one interval (10s
	// and the receiver's 50ms), less the moments since.
	if ref.Reason != flowlimit.ReasonRate || ref.RetryAfter < 9*time.Second || ref.RetryAfter > 10050*time.Millisecond {
		t.Fatalf("fourth start refused %+v, want the rate with a wait of about 10s", ref)
	}
	// Another key value has its own budget.
	mustTake(t, l, "h4", time.Second, flowlimit.Rule{Name: "api", Value: "globex", Rate: 1, Period: 10 * time.Second, Burst: 3})
}

func TestConcurrencySlots(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	rule := flowlimit.Rule{Name: "api", Value: "acme", Concurrency: 2}
	a := mustTake(t, l, "a", time.Minute, rule)
	mustTake(t, l, "b", time.Minute, rule)
	_, err := l.Take(t.Context(), "c", time.Minute, []flowlimit.Rule{rule})
	if ref := refusal(t, err); ref.Reason != flowlimit.ReasonConcurrency || ref.RetryAfter != 0 {
		t.Fatalf("third holder refused %+v, want full slots", ref)
	}
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustTake(t, l, "c", time.Minute, rule)
	usage, err := l.Busiest(t.Context(), "api", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 1 || usage[0].Value != "acme" || strings.Join(usage[0].Holders, ",") != "b,c" {
		t.Fatalf("Busiest = %+v, want acme held by b and c", usage)
	}
}

func TestExpiredLeaseFreesAKilledHoldersSlot(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	rule := flowlimit.Rule{Name: "api", Value: "acme", Concurrency: 1}
	// The holder dies at once: it never renews nor releases.
	mustTake(t, l, "dead", 300*time.Millisecond, rule)
	if _, err := l.Take(t.Context(), "next", time.Minute, []flowlimit.Rule{rule}); refusal(t, err).Reason != flowlimit.ReasonConcurrency {
		t.Fatal("the slot should be held until the lease ends")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := l.Take(t.Context(), "next", time.Minute, []flowlimit.Rule{rule})
		if err == nil {
			break
		}
		refusal(t, err)
		if time.Now().After(deadline) {
			t.Fatal("the dead holder's slot never freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRenewedLeaseKeepsTheSlot(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	rule := flowlimit.Rule{Name: "api", Value: "acme", Concurrency: 1}
	const lease = time.Second
	h := mustTake(t, l, "alive", lease, rule)
	end := time.Now().Add(2 * lease)
	for time.Now().Before(end) {
		n, err := h.Renew(t.Context(), lease)
		if err != nil || n != 1 {
			t.Fatalf("Renew = %d, %v; want the one slot renewed", n, err)
		}
		if _, err := l.Take(t.Context(), "other", lease, []flowlimit.Rule{rule}); refusal(t, err).Reason != flowlimit.ReasonConcurrency {
			t.Fatal("a renewed slot was taken by another")
		}
		time.Sleep(lease / 5)
	}
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A released slot is not renewed back.
	if n, err := h.Renew(t.Context(), lease); err != nil || n != 0 {
		t.Fatalf("Renew after Release = %d, %v; want 0", n, err)
	}
	mustTake(t, l, "other", lease, rule)
}

func TestTakeIsAllOrNothing(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	partner := flowlimit.Rule{Name: "partner", Value: "acme", Concurrency: 1, Rate: 1, Period: time.Minute}
	account := flowlimit.Rule{Name: "account", Value: "acct-1", Concurrency: 1}
	mustTake(t, l, "first", time.Minute, account)
	_, err := l.Take(t.Context(), "second", time.Minute, []flowlimit.Rule{partner, account})
	if ref := refusal(t, err); ref.Name != "account" || ref.Reason != flowlimit.ReasonConcurrency {
		t.Fatalf("refused %+v, want account's slots", ref)
	}
	// The refused take left partner's slot and its one start per minute
	// untouched.
	mustTake(t, l, "third", time.Minute, partner)
}

func TestConcurrentTakesNeverOverrun(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	rule := flowlimit.Rule{Name: "api", Value: "acme", Concurrency: 3}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		holds []*flowlimit.Hold
	)
	for i := range 50 {
		wg.Go(func() {
			h, err := l.Take(t.Context(), flowlimit.Holder("job-"+string(rune('A'+i))), time.Minute, []flowlimit.Rule{rule})
			if err != nil {
				refusal(t, err)
				return
			}
			mu.Lock()
			holds = append(holds, h)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(holds) != 3 {
		t.Fatalf("%d of 50 concurrent takes got a slot, want 3", len(holds))
	}
}

// keySlot is Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag,
// or of the whole key when it has none, mod 16384.
func keySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func TestKeysOfOneValueShareASlot(t *testing.T) {
	t.Parallel()
	l := flowlimit.New(testkit.Redis(t), flowlimit.Options{})
	if got := keySlot("123456789"); got != 0x31C3%16384 {
		t.Fatalf("keySlot check value = %d", got)
	}
	slotsKey, tatKey := l.Keys("ship-api", "acme")
	if slotsKey != "idemgate:limit:{ship-api:acme}:slots" || tatKey != "idemgate:limit:{ship-api:acme}:tat" {
		t.Fatalf("keys %q, %q", slotsKey, tatKey)
	}
	seen := map[int]bool{}
	for _, v := range []string{"acme", "globex", "initech", "umbrella", "a}b"} {
		s, r := l.Keys("ship-api", v)
		if keySlot(s) != keySlot(r) {
			t.Errorf("value %q: slots in slot %d, rate in %d", v, keySlot(s), keySlot(r))
		}
		seen[keySlot(s)] = true
	}
	if len(seen) < 2 {
		t.Error("every value hashed to one slot: the tag does not hold the value")
	}
}

// TestClusterTakeIsAllOrNothing runs the Redis Cluster path: each rule's
// keys are in their own slot, so the rules are taken one script each and a
// refusal gives back what the others took.
func TestClusterTakeIsAllOrNothing(t *testing.T) {
	t.Parallel()
	l := flowlimit.New(testkit.RedisCluster(t), flowlimit.Options{Prefix: testkit.Prefix()})
	partner := flowlimit.Rule{Name: "partner", Value: "acme", Concurrency: 1, Rate: 1, Period: time.Minute}
	account := flowlimit.Rule{Name: "account", Value: "acct-1", Concurrency: 1}
	mustTake(t, l, "first", time.Minute, account)
	_, err := l.Take(t.Context(), "second", time.Minute, []flowlimit.Rule{partner, account})
	if ref := refusal(t, err); ref.Name != "account" {
		t.Fatalf("refused %+v, want account's slots", ref)
	}
	h := mustTake(t, l, "third", time.Minute, partner)
	if n, err := h.Renew(t.Context(), time.Minute); err != nil || n != 1 {
		t.Fatalf("Renew = %d, %v", n, err)
	}
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if usage, err := l.Busiest(t.Context(), "partner", 10); err != nil || len(usage) != 1 || usage[0].Value != "acme" {
		t.Fatalf("Busiest = %+v, %v", usage, err)
	}
}
