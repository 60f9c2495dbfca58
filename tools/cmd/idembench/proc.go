package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; 100 on every
// Linux build Go supports.
const clockTicks = 100

// stopGrace is how long a child has to shut down after SIGTERM before it
// is killed.
const stopGrace = 10 * time.Second

// startProc starts a child of the harness (the baseline proxy, idemgate):
// argv with env added to the harness' environment, its output appended to
// logPath. It runs in a process group of its own and dies with the harness
// (Pdeathsig), so nothing outlives a run. cpu >= 0 pins it to that CPU
// with taskset, which execs the command, so the child's pid is the pinned
// program's own.
func startProc(name string, cpu int, env []string, logPath string, argv ...string) (*proc.Proc, error) {
	if cpu >= 0 {
		argv = append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child writes to a descriptor of its own; the harness' copy is
	// not needed once it has started.
	defer logf.Close()
	return proc.Start(proc.Spec{Name: name, Path: argv[0], Args: argv[1:], Env: mergeEnv(os.Environ(), env), Log: logf})
}

// mergeEnv returns base with each KEY=VALUE of over replacing base's KEY;
// an empty VALUE removes KEY.
func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	drop := map[string]bool{}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	for _, kv := range over {
		if _, v, _ := strings.Cut(kv, "="); v != "" {
			out = append(out, kv)
		}
	}
	return out
}

// execCommand is exec.CommandContext for a child that dies with the
// harness.
func execCommand(ctx context.Context, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = mergeEnv(os.Environ(), []string{"DATABASE_URL=", "REDIS_URL="})
	return cmd
}

// procCPU is the CPU time process pid has used so far (utime + stime,
// all its threads).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	st, err := parseProcStat(b)
	if err != nil {
		return 0, err
	}
	return ticks(st.utime + st.stime), nil
}

// rss is the child's resident set size in bytes (VmRSS).
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// cpuStat is the busy and total time of each CPU, from /proc/stat.
type cpuStat struct{ busy, total []uint64 }

func readCPUStat() cpuStat {
	var s cpuStat
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		var total, idle uint64
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			if i < 8 { // user nice system idle iowait irq softirq steal
				total += n
			}
			if i == 3 || i == 4 {
				idle += n
			}
		}
		s.busy = append(s.busy, total-idle)
		s.total = append(s.total, total)
	}
	return s
}

// busyShare is how busy cpu was between a and b, 0..1; -1 when unknown.
func busyShare(a, b cpuStat, cpu int) float64 {
	if cpu < 0 || cpu >= len(a.busy) || cpu >= len(b.busy) || b.total[cpu] == a.total[cpu] {
		return -1
	}
	return float64(b.busy[cpu]-a.busy[cpu]) / float64(b.total[cpu]-a.total[cpu])
}

// freePort returns a loopback address nothing listens on right now.
func freePort() (string, error) {
	port, err := proc.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// waitHTTP polls url until it answers 200, p exits, or the timeout passes.
func waitHTTP(ctx context.Context, p *proc.Proc, url string, timeout time.Duration) error {
	return proc.WaitUntil(ctx, timeout, url, p, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %s", p.Name(), resp.Status)
		}
		return nil
	})
}
