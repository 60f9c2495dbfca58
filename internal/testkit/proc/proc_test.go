package proc

import (
	"slices"
	"syscall"
	"testing"
	"time"
)

// Children finds a process that left its parent's process group, as a
// PostgreSQL backend does, which a signal to the group would miss, and
// WaitGone sees it go once killed.
func TestChildrenOutsideTheGroup(t *testing.T) {
	t.Parallel()
	p, err := Start(Spec{Name: "sh", Path: "/bin/sh", Args: []string{"-c", "setsid sleep 60 & wait"}})
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(p.Kill)
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 {
		kids, err := Children(p.Pid())
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(kids, func(pid int) bool { return Command(pid) == "sleep 60" }); i >= 0 {
			child = kids[i]
		}
		if child == 0 && time.Now().After(deadline) {
			t.Fatalf("children of sh = %v, want the sleep it started", kids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pgid, err := syscall.Getpgid(child)
	if err != nil || pgid == p.Pid() {
		t.Fatalf("the child's process group = %d (%v), want one of its own", pgid, err)
	}
	if err := WaitGone([]int{child}, 50*time.Millisecond); err == nil {
		t.Fatal("WaitGone: nil for a running process")
	}
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := WaitGone([]int{child}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
