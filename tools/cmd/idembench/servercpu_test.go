package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// statLine is a /proc/PID/stat line with the given ppid (field 4) and
// times (fields 14-17), its command name holding a space and a
// parenthesis, as a PostgreSQL backend's may.
func statLine(pid, ppid string, utime, stime, cutime, cstime string) string {
	return pid + " (postgres: x) y) S " + ppid + " 1000 1000 0 -1 4194560 900 0 0 0 " +
		utime + " " + stime + " " + cutime + " " + cstime + " 20 0 1 0 12345 220000000 4000 18446744073709551615\n"
}

func TestParseProcStat(t *testing.T) {
	got, err := parseProcStat([]byte(statLine("1234", "1000", "250", "50", "4000", "700")))
	want := procStat{ppid: 1000, utime: 250, stime: 50, cutime: 4000, cstime: 700}
	if err != nil || got != want {
		t.Errorf("parseProcStat = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"", "1234 (postgres) S 1 2 3", "1234 postgres S 1000 1000 1000 0 -1 4194560 900 0 0 0 x 50 0 0"} {
		if got, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) = %+v, want an error", bad, got)
		}
	}
}

// TestTreeCPU checks what the PostgreSQL column adds up: the postmaster's
// own time and its reaped children's, plus its live children's own time
// (not their reaped children's, already in theirs), and nothing of a
// process that is not its child.
func TestTreeCPU(t *testing.T) {
	dir := t.TempDir()
	write := func(pid, line string) {
		if err := os.MkdirAll(filepath.Join(dir, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pid, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("100", statLine("100", "1", "10", "20", "300", "70"))     // postmaster: 400 ticks
	write("101", statLine("101", "100", "150", "50", "999", "0"))   // backend: 200
	write("102", statLine("102", "100", "5", "5", "0", "0"))        // WAL writer: 10
	write("200", statLine("200", "1", "5000", "5000", "0", "0"))    // not the cluster's
	write("self", statLine("200", "100", "5000", "5000", "0", "0")) // not a pid
	got, err := treeCPU(dir, 100)
	if want := 6100 * time.Millisecond; err != nil || got != want {
		t.Errorf("treeCPU = %v, %v; want %v (610 ticks)", got, err, want)
	}
	if _, err := treeCPU(dir, 300); err == nil {
		t.Error("treeCPU of a process that is gone: want an error")
	}
}
