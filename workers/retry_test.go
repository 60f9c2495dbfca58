package workers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/workers/fence"
	"github.com/idemgate/idemgate/workers/lock"
)

func TestBackoffRetryDelay(t *testing.T) {
	t.Parallel()
	// highest draws the top of the range, lowest the bottom.
	highest := func(n int64) int64 { return n - 1 }
	lowest := func(int64) int64 { return 0 }
	busy := &LockBusyError{Resource: "order:1", Err: lock.ErrBusy}
	lost := &OwnershipLostError{Resource: "order:1", Err: fence.Stale("order:1", 1, 2)}
	retryAfter5s := &RetryAfterError{After: 5 * time.Second, Err: errors.New("429")}
	// The clock stands 300ms past a second: a Retry-After's wait is
	// rounded up to end on a whole second (asynq keeps a retry's time in
	// whole seconds, rounded down), 700ms more.
	now := time.Date(2026, 1, 2, 3, 4, 5, 300_000_000, time.UTC)
	b := Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second, Busy: time.Second, Now: func() time.Time { return now }}

	tests := []struct {
		name string
		n    int
		err  error
		rand func(int64) int64
		want time.Duration
	}{
		{name: "first failure, top of range", n: 0, err: errors.New("x"), rand: highest, want: 100*time.Millisecond - 1},
		{name: "doubles", n: 1, err: errors.New("x"), rand: highest, want: 200*time.Millisecond - 1},
		{name: "doubles again", n: 3, err: errors.New("x"), rand: highest, want: 800*time.Millisecond - 1},
		{name: "capped at max", n: 10, err: errors.New("x"), rand: highest, want: 2*time.Second - 1},
		{name: "no overflow for huge n", n: 1 << 20, err: errors.New("x"), rand: highest, want: 2*time.Second - 1},
		{name: "full jitter reaches zero", n: 5, err: errors.New("x"), rand: lowest, want: 0},
		{name: "busy lock, bottom", n: 7, err: fmt.Errorf("wrapped: %w", busy), rand: lowest, want: 500 * time.Millisecond},
		{name: "busy lock, top", n: 7, err: busy, rand: highest, want: 1500*time.Millisecond - 1},
		{name: "lost ownership is short too", n: 9, err: lost, rand: lowest, want: 500 * time.Millisecond},
		{name: "retry-after floors the jitter", n: 0, err: fmt.Errorf("wrapped: %w", retryAfter5s), rand: lowest, want: 5*time.Second + 700*time.Millisecond},
		{name: "retry-after above max", n: 0, err: &RetryAfterError{After: time.Hour, Err: errors.New("x")}, rand: highest, want: time.Hour + 700*time.Millisecond},
		{name: "jitter above retry-after", n: 3, err: &RetryAfterError{After: time.Millisecond, Err: errors.New("x")}, rand: highest, want: 800*time.Millisecond - 1},
		{name: "unavailable, first", n: 0, err: Unavailable(errors.New("503")), rand: highest, want: 100*time.Millisecond - 1},
		{name: "unavailable keeps doubling", n: 3, err: fmt.Errorf("wrapped: %w", Unavailable(errors.New("503"))), rand: highest, want: 800*time.Millisecond - 1},
		{name: "unavailable capped at max", n: 40, err: Unavailable(errors.New("503")), rand: highest, want: 2*time.Second - 1},
		{name: "unavailable with retry-after", n: 0, err: Unavailable(retryAfter5s), rand: lowest, want: 5*time.Second + 700*time.Millisecond},
		{name: "retry-after wrapping unavailable", n: 0, err: &RetryAfterError{After: 5 * time.Second, Err: Unavailable(errors.New("503"))}, rand: lowest, want: 5*time.Second + 700*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := b
			b.Rand = tt.rand
			if got := b.RetryDelay(tt.n, tt.err, nil); got != tt.want {
				t.Fatalf("RetryDelay(%d, %v) = %s, want %s", tt.n, tt.err, got, tt.want)
			}
		})
	}
}

func TestRetryDelayDefaultsStayInRange(t *testing.T) {
	t.Parallel()
	for n := range 40 {
		d := RetryDelay(n, errors.New("x"), nil)
		if d < 0 || d >= DefaultRetryMax {
			t.Fatalf("RetryDelay(%d) = %s, outside [0, %s)", n, d, DefaultRetryMax)
		}
		busy := RetryDelay(n, &LockBusyError{}, nil)
		if busy < DefaultRetryBusy/2 || busy >= DefaultRetryBusy*3/2 {
			t.Fatalf("busy RetryDelay = %s, outside [%s, %s)", busy, DefaultRetryBusy/2, DefaultRetryBusy*3/2)
		}
	}
}

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		err         error
		wantFailure bool
		wantPerm    bool
		wantUnavail bool
	}{
		{name: "plain error", err: errors.New("timeout"), wantFailure: true},
		{name: "context cancelled", err: context.Canceled, wantFailure: true},
		{name: "permanent", err: Permanent(errors.New("declined")), wantFailure: true, wantPerm: true},
		{name: "wrapped permanent", err: fmt.Errorf("charge: %w", Permanent(errors.New("declined"))), wantFailure: true, wantPerm: true},
		{name: "busy lock", err: &LockBusyError{Err: lock.ErrBusy}},
		{name: "wrapped busy lock", err: fmt.Errorf("x: %w", &LockBusyError{Err: lock.ErrBusy})},
		{name: "lost ownership", err: &OwnershipLostError{Err: fence.Stale("r", 1, 2)}},
		{name: "retry after", err: &RetryAfterError{After: time.Second, Err: errors.New("429")}, wantFailure: true},
		// A failure to asynq, so the backoff grows; the handler does not
		// count it.
		{name: "unavailable", err: Unavailable(errors.New("503")), wantFailure: true, wantUnavail: true},
		{name: "wrapped unavailable", err: fmt.Errorf("charge: %w", Unavailable(errors.New("503"))), wantFailure: true, wantUnavail: true},
		{name: "retry after, unavailable", err: &RetryAfterError{After: time.Second, Err: Unavailable(errors.New("503"))}, wantFailure: true, wantUnavail: true},
		{name: "permanent and unavailable", err: Permanent(Unavailable(errors.New("gone"))), wantFailure: true, wantPerm: true, wantUnavail: true},
		{name: "nil", err: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.err == nil {
				if IsFailure(nil) || Permanent(nil) != nil || Unavailable(nil) != nil || IsUnavailable(nil) {
					t.Fatal("nil is a failure, permanent or unavailable")
				}
				return
			}
			if got := IsFailure(tt.err); got != tt.wantFailure {
				t.Fatalf("IsFailure = %v, want %v", got, tt.wantFailure)
			}
			if got := IsPermanent(tt.err); got != tt.wantPerm {
				t.Fatalf("IsPermanent = %v, want %v", got, tt.wantPerm)
			}
			if got := IsUnavailable(tt.err); got != tt.wantUnavail {
				t.Fatalf("IsUnavailable = %v, want %v", got, tt.wantUnavail)
			}
		})
	}
}

func TestErrorsUnwrap(t *testing.T) {
	t.Parallel()
	cause := errors.New("declined")
	if !errors.Is(Permanent(cause), cause) {
		t.Fatal("Permanent hides its cause")
	}
	if err := Unavailable(cause); !errors.Is(err, cause) || err.Error() != "unavailable: declined" {
		t.Fatalf("Unavailable(%v) = %q: it hides its cause", cause, err)
	}
	if err := (&LockBusyError{Err: fmt.Errorf("x: %w", lock.ErrBusy)}); !errors.Is(err, lock.ErrBusy) {
		t.Fatal("LockBusyError hides lock.ErrBusy")
	}
	if err := (&OwnershipLostError{Err: fence.Stale("r", 1, 2)}); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatal("OwnershipLostError hides the stale token")
	}
	ra := &RetryAfterError{After: 2 * time.Second, Err: cause}
	if !errors.Is(ra, cause) {
		t.Fatal("RetryAfterError hides its cause")
	}
	if msg := ra.Error(); !strings.Contains(msg, "declined") || !strings.Contains(msg, "2s") {
		t.Fatalf("RetryAfterError says %q: want the cause and the delay", msg)
	}
}
