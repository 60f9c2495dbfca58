package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// With -private, the worker scenarios also count the CPU the servers
// spend: on a 2-core machine PostgreSQL's CPU, not the worker's, is what
// bounds a side's throughput, so a side's cost is its worker's CPU and
// the servers' together.

// procStat is what the harness reads from /proc/PID/stat, times in clock
// ticks.
type procStat struct {
	ppid           int
	utime, stime   int64 // the process's own, all its threads
	cutime, cstime int64 // its children that exited and were reaped
}

// parseProcStat parses a /proc/PID/stat line (proc(5)): ppid is field 4,
// utime, stime, cutime and cstime fields 14 to 17.
func parseProcStat(b []byte) (procStat, error) {
	// The command name may hold spaces and parentheses; the fields after
	// its last ')' are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	if len(f) < 15 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	var n [5]int64
	for k, idx := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("malformed /proc stat: field %d: %w", idx+3, err)
		}
		n[k] = v
	}
	return procStat{ppid: int(n[0]), utime: n[1], stime: n[2], cutime: n[3], cstime: n[4]}, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }

// clusterCPU is the CPU time a PostgreSQL cluster has used so far: the
// postmaster's own and its reaped children's (every backend that has
// exited), plus its live children's (backends, WAL writer, checkpointer
// and the other auxiliary processes). Read after the backends of a run
// have exited, a difference of two readings is the run's, whichever
// backends did the work.
func clusterCPU(postmaster int) (time.Duration, error) {
	return treeCPU("/proc", postmaster)
}

// treeCPU is clusterCPU under a proc directory of the caller's choosing.
func treeCPU(procDir string, pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", procDir, pid))
	if err != nil {
		return 0, err
	}
	root, err := parseProcStat(b)
	if err != nil {
		return 0, err
	}
	total := root.utime + root.stime + root.cutime + root.cstime
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		// A child that exits between the listing and the read is gone
		// from both; the postmaster reaps it into cutime soon after.
		b, err := os.ReadFile(procDir + "/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if st, err := parseProcStat(b); err == nil && st.ppid == pid {
			total += st.utime + st.stime
		}
	}
	return ticks(total), nil
}

// privateCPU is the CPU time the private PostgreSQL cluster and Redis
// have used so far; zero for a server the harness did not start.
func (o *benchOptions) privateCPU() (pg, rdb time.Duration) {
	if o.pgPid > 0 {
		pg, _ = clusterCPU(o.pgPid)
	}
	if o.redisPid > 0 {
		rdb, _ = procCPU(o.redisPid)
	}
	return pg, rdb
}

// serversMeasured says whether r has the servers' CPU (-private): PostgreSQL
// always spends some.
func (r workerResult) serversMeasured() bool { return r.PGCPUSeconds > 0 || r.RedisCPUSeconds > 0 }

// serverCPUPerJob is PostgreSQL's and Redis's CPU per job in µs, each
// "–" when not measured.
func (r workerResult) serverCPUPerJob() (pg, rdb string) {
	if !r.serversMeasured() || r.Jobs == 0 {
		return "–", "–"
	}
	us := func(s float64) string { return fmt.Sprintf("%.0f", s*1e6/float64(r.Jobs)) }
	return us(r.PGCPUSeconds), us(r.RedisCPUSeconds)
}
