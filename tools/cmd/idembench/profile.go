package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// profileRun is one extra, unmeasured candidate run while idemgate writes
// a CPU profile and an allocation profile of the same window; it then
// renders the top of each with go tool pprof when go is on the PATH.
func profileRun(ctx context.Context, o *benchOptions, up *upstream, cand *target, c *candidate, store, sc string) ([]string, error) {
	dir := filepath.Join(o.dir, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	secs := o.profileSeconds
	spec, after, err := candidateSpec(ctx, o, up, cand, store, sc, 99, time.Duration(secs)*time.Second+1500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	stem := filepath.Join(dir, store+"-"+sc)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, kind := range []string{"profile", "allocs"} {
		name := map[string]string{"profile": ".cpu.pprof", "allocs": ".allocs.pprof"}[kind]
		wg.Go(func() {
			// Let the load reach its steady state first.
			time.Sleep(500 * time.Millisecond)
			if err := c.profile(ctx, kind, secs, stem+name); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	_, lerr := attack(ctx, cand.client, spec)
	wg.Wait()
	if aerr := after(); lerr == nil {
		lerr = aerr
	}
	if err := errors.Join(append(errs, lerr)...); err != nil {
		return nil, err
	}
	files := []string{stem + ".cpu.pprof", stem + ".allocs.pprof"}
	if gobin, err := exec.LookPath("go"); err == nil {
		for _, r := range []struct {
			in, out string
			args    []string
		}{
			{stem + ".cpu.pprof", stem + ".cpu.top.txt", []string{"-top", "-nodecount=40"}},
			{stem + ".cpu.pprof", stem + ".cpu.cum.txt", []string{"-top", "-cum", "-nodecount=60"}},
			{stem + ".allocs.pprof", stem + ".allocs.top.txt", []string{"-top", "-sample_index=alloc_space", "-nodecount=40"}},
		} {
			var out bytes.Buffer
			cmd := exec.CommandContext(ctx, gobin, append(append([]string{"tool", "pprof"}, r.args...), o.bin, r.in)...)
			cmd.Stdout, cmd.Stderr = &out, &out
			if cmd.Run() == nil {
				_ = os.WriteFile(r.out, out.Bytes(), 0o644)
				files = append(files, r.out)
			}
		}
	}
	return files, nil
}
