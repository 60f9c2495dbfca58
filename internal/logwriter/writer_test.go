package logwriter

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// sink is the underlying writer: it counts writes and keeps what they
// held.
type sink struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Info lines wait in the buffer and go out together, in one write; a
// warning goes out at once, with the lines buffered before it, in order.
func TestInfoWaitsWarningsDoNot(t *testing.T) {
	var out sink
	w := New(&out, 64<<10)
	log := slog.New(Handler(slog.NewJSONHandler(w, nil), w, slog.LevelWarn))
	for i := range 100 {
		log.Info("request", "n", i)
	}
	if got := out.String(); got != "" {
		t.Fatalf("info lines written before a flush: %q", got)
	}
	log.Warn("store slow")
	got := out.String()
	if n := strings.Count(got, "\n"); n != 101 || !strings.HasSuffix(got, "\"store slow\"}\n") {
		t.Fatalf("after the warning: %d lines, ending %q; want 101, the warning last", n, got[max(0, len(got)-40):])
	}
	if out.count() != 1 {
		t.Fatalf("%d writes for 101 lines, want 1", out.count())
	}
}

// Run writes what is left when its context ends, and the lines logged
// before: nothing logged is lost on a clean exit.
func TestRunFlushesOnExit(t *testing.T) {
	var out sink
	w := New(&out, 64<<10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, time.Hour) }()
	log := slog.New(Handler(slog.NewTextHandler(w, nil), w, slog.LevelWarn))
	log.Info("last words")
	cancel()
	<-done
	if !strings.Contains(out.String(), "last words") {
		t.Fatalf("after Run returned: %q", out.String())
	}
}

// Run writes buffered lines without being asked, within its interval.
func TestRunFlushesOnItsOwn(t *testing.T) {
	var out sink
	w := New(&out, 64<<10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, 5*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	if _, err := w.Write([]byte("line\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // stops a broken test; says nothing of speed
	for out.String() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the line was never written")
		}
		time.Sleep(time.Millisecond)
	}
}

// A full buffer is written out before the interval ends, and a line
// larger than the buffer goes through whole.
func TestFullBufferAndLongLine(t *testing.T) {
	var out sink
	w := New(&out, 16)
	if _, err := w.Write([]byte("0123456789\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("abcdefghij\n")); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "0123456789\n" {
		t.Fatalf("after overflowing the buffer: %q, want the first line", got)
	}
	long := strings.Repeat("x", 100) + "\n"
	if _, err := w.Write([]byte(long)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "0123456789\nabcdefghij\n"+long {
		t.Fatalf("after the long line: %q", got)
	}
}

// WithAttrs and WithGroup keep the flush on warnings.
func TestDerivedHandlersFlushToo(t *testing.T) {
	var out sink
	w := New(&out, 64<<10)
	log := slog.New(Handler(slog.NewJSONHandler(w, nil), w, slog.LevelWarn)).With("component", "redis").WithGroup("g")
	log.Error("down")
	if !strings.Contains(out.String(), `"component":"redis"`) {
		t.Fatalf("an error through a derived logger was not written at once: %q", out.String())
	}
}
