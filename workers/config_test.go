package workers

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/workers/lock"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	if c.Concurrency != 10 || c.LockTTL != 30*time.Second || c.MaxAttempts != 10 || c.ShutdownTimeout != 25*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
	if !maps.Equal(c.Queues, map[string]int{"default": 1}) {
		t.Fatalf("default queues = %v", c.Queues)
	}
	if c.Retry.Base != time.Second || c.Retry.Max != 10*time.Minute || c.Retry.Busy != 2*time.Second || c.Retry.Rand == nil {
		t.Fatalf("default retry = %+v", c.Retry)
	}
	set := Config{Concurrency: 3, Queues: map[string]int{"critical": 6}, LockTTL: time.Minute, MaxAttempts: 4}.WithDefaults()
	if set.Concurrency != 3 || set.Queues["critical"] != 6 || len(set.Queues) != 1 || set.LockTTL != time.Minute || set.MaxAttempts != 4 {
		t.Fatalf("explicit values overridden: %+v", set)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		// want lists a fragment of each expected problem; nil = valid.
		want []string
	}{
		{name: "zero config is valid", cfg: Config{}},
		{name: "explicit valid config", cfg: Config{Concurrency: 2, Queues: map[string]int{"a": 1, "b": 3}, LockTTL: 5 * time.Second, MaxAttempts: 1, ShutdownTimeout: time.Second}},
		{name: "negative concurrency", cfg: Config{Concurrency: -1}, want: []string{"worker.concurrency"}},
		{name: "bad queues", cfg: Config{Queues: map[string]int{" ": 1, "low": 0}}, want: []string{"empty queue name", "worker.queues.low"}},
		{name: "lock ttl too short", cfg: Config{LockTTL: time.Millisecond}, want: []string{"worker.lock_ttl"}},
		{name: "lock ttl below a millisecond step", cfg: Config{LockTTL: 10*time.Millisecond + time.Microsecond}, want: []string{"worker.lock_ttl"}},
		{name: "negative max attempts", cfg: Config{MaxAttempts: -2}, want: []string{"worker.max_attempts"}},
		{name: "negative shutdown timeout", cfg: Config{ShutdownTimeout: -time.Second}, want: []string{"worker.shutdown_timeout"}},
		{name: "retry max below base", cfg: Config{Retry: Backoff{Base: time.Minute, Max: time.Second}}, want: []string{"retry max"}},
		{
			name: "every problem at once",
			cfg:  Config{Concurrency: -1, LockTTL: -time.Second, MaxAttempts: -1, ShutdownTimeout: -1, Retry: Backoff{Busy: -1}},
			want: []string{"worker.concurrency", "worker.lock_ttl", "worker.max_attempts", "worker.shutdown_timeout", "retry busy"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if !testkit.WantError(t, "Validate", err, tt.want) {
				return
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tt.want) {
				t.Errorf("Validate reported %d problems, want %d: %v", n, len(tt.want), err)
			}
		})
	}
}

func TestNewServerValidates(t *testing.T) {
	t.Parallel()
	_, err := NewServer(nil, Config{MaxAttempts: -1}, nil)
	if err == nil {
		t.Fatal("NewServer accepted a nil connection, a nil handler and a bad config")
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 3 {
		t.Fatalf("NewServer: %v, want the three problems joined", err)
	}
}

func TestConfigDeps(t *testing.T) {
	t.Parallel()
	d := Config{LockTTL: 7 * time.Second}.Deps(fakeDB{}, fakeRedis{})
	if d.Lock.TTL != 7*time.Second || d.MaxAttempts != DefaultMaxAttempts || d.DB == nil || d.Redis == nil {
		t.Fatalf("Deps = %+v", d)
	}
}

func TestConfigFieldErrors(t *testing.T) {
	t.Parallel()
	err := Config{Concurrency: -1, Queues: map[string]int{"bulk": 0, "a b": 1, "": 2}, LockTTL: 5 * time.Millisecond}.Validate()
	var got []FieldError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		fe, ok := errors.AsType[*FieldError](e)
		if !ok {
			t.Fatalf("%v (%T) is not a *FieldError", e, e)
		}
		got = append(got, *fe)
	}
	want := []FieldError{
		{Field: "concurrency", Message: "must be positive, not -1"},
		{Field: "lock_ttl", Message: "5ms is shorter than the minimum 10ms"},
		{Field: "queues", Message: "empty queue name"},
		{Field: "queues", Queue: "a b", Message: `"a b" is not a queue name (letters, digits, '_', '.', ':' and '-')`},
		{Field: "queues", Queue: "bulk", Message: "priority must be positive, not 0"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Validate:\n%+v\nwant\n%+v", got, want)
	}
	if s := want[4]; (&s).Error() != "worker.queues.bulk: priority must be positive, not 0" {
		t.Errorf("Error() = %q", (&s).Error())
	}
}

func TestConfigQueues(t *testing.T) {
	t.Parallel()
	// nil takes the default queue; an empty map is a mistake, not a
	// request for the default.
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("nil queues: %v", err)
	}
	if err := (Config{Queues: map[string]int{}}).Validate(); err == nil || !strings.Contains(err.Error(), "worker.queues: needs at least one queue") {
		t.Errorf("empty queues: %v", err)
	}
	for name, ok := range map[string]bool{"default": true, "bulk:low-1.a_b": true, "": false, " ": false, "a b": false, "{x}": false} {
		if err := CheckQueueName(name); (err == nil) != ok {
			t.Errorf("CheckQueueName(%q) = %v", name, err)
		}
	}
	if DefaultLockTTL != lock.DefaultTTL {
		t.Errorf("DefaultLockTTL %s is not the lock's own default %s", DefaultLockTTL, lock.DefaultTTL)
	}
}
