package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is one child process of the suite. It runs in a process group of
// its own, so a signal reaches it and every process it forked, and the
// kernel kills it (Pdeathsig) if the suite itself dies without cleaning up.
type Proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been waited for
	err  error         // Wait's result, set before done is closed
}

// Spec describes a child to start.
type Spec struct {
	Name string
	Path string
	Args []string
	Env  []string // nil: the suite's environment
	Dir  string   // working directory
	Log  *os.File // stdout and stderr
	As   *syscall.Credential
}

// Start starts the child s describes.
func Start(s Spec) (*Proc, error) {
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = s.Env
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = s.Log, s.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.As}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	p := &Proc{name: s.Name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Name is the name the child was started with.
func (p *Proc) Name() string { return p.name }

// Pid is the child's process id, which is also its process group's.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Err is how the process ended; nil while it runs.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process group.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("%s: already exited: %v", p.name, p.err)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: %v: %w", p.name, sig, err)
	}
	return nil
}

// Kill ends the process group at once and waits for the process.
func (p *Proc) Kill() {
	if !p.Exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// Stop asks the process to end with sig, continues it in case it is
// stopped, and kills it if it has not ended within grace.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Wait waits up to d for the process to exit.
func (p *Proc) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// ChildEnv is the suite's environment without the variables that would
// point a child at other servers: DATABASE_URL, DATABASE_DIRECT_URL and
// REDIS_URL override the configuration file, and libpq-style PG* variables
// fill in connections.
func ChildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "DATABASE_URL", name == "DATABASE_DIRECT_URL", name == "REDIS_URL", name == "REDIS_CLUSTER_URL":
		case strings.HasPrefix(name, "PG"):
		default:
			env = append(env, kv)
		}
	}
	return env
}

// FreePort is a TCP port on 127.0.0.1 free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// WaitUntil polls check every 50ms until it succeeds, p exits, ctx ends or
// d passes.
func WaitUntil(ctx context.Context, d time.Duration, what string, p *Proc, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s: %s exited: %v", what, p.name, p.err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s: %v", what, d, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Sleep waits d, or less when ctx ends first, and reports whether it
// waited the whole of d: the pause of the suites' loops, which must stop
// with their context.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Children lists the processes whose parent is pid, read from /proc: the
// processes a server forked, which may have left its process group (a
// PostgreSQL backend calls setsid).
func Children(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out, nil
}

// parentOf reads pid's parent from /proc/pid/stat; false when pid is gone.
func parentOf(pid int) (int, bool) {
	st, ok := stat(pid)
	if !ok || len(st) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(st[1])
	return ppid, err == nil
}

// stat is /proc/pid/stat's fields after the command name (the state,
// then the parent, ...); false when pid is gone. The name, in
// parentheses, may hold spaces and parentheses itself: the fields start
// after its last closing one.
func stat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

// Command is pid's command line as ps shows it, its arguments joined by
// spaces: a server that rewrites it (PostgreSQL's "postgres: walwriter")
// shows what the process is. "" when pid is gone.
func Command(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// WaitGone waits up to d until every process of pids is gone: exited, or
// a zombie (dead, its memory released, waiting for a parent that may
// never reap it, an orphan's adoptive init).
func WaitGone(pids []int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for _, pid := range pids {
		for {
			st, ok := stat(pid)
			if !ok || (len(st) > 0 && st[0] == "Z") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d (%s) still running after %s", pid, Command(pid), d)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}
