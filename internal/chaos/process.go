package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is one child process of the suite. It runs in a process group of
// its own, so a signal reaches it and every process it forked, and the
// kernel kills it (Pdeathsig) if the suite itself dies without cleaning up.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been waited for
	err  error         // Wait's result, set before done is closed
}

// procSpec describes a child to start.
type procSpec struct {
	name string
	path string
	args []string
	env  []string // nil: the suite's environment
	dir  string   // working directory
	log  *os.File // stdout and stderr
	as   *syscall.Credential
}

func startProc(s procSpec) (*proc, error) {
	cmd := exec.Command(s.path, s.args...)
	cmd.Env = s.env
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.as}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.name, err)
	}
	p := &proc{name: s.name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("%s: already exited: %v", p.name, p.err)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: %v: %w", p.name, sig, err)
	}
	return nil
}

// kill ends the process group at once and waits for the process.
func (p *proc) kill() {
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// stop asks the process to end with sig, continues it in case it is
// stopped, and kills it if it has not ended within grace.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// wait waits up to d for the process to exit.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// childEnv is the suite's environment without the variables that would
// point a child at other servers: DATABASE_URL and REDIS_URL override the
// configuration file, and libpq-style PG* variables fill in connections.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "DATABASE_URL", name == "REDIS_URL", name == "REDIS_CLUSTER_URL":
		case strings.HasPrefix(name, "PG"):
		default:
			env = append(env, kv)
		}
	}
	return env
}
