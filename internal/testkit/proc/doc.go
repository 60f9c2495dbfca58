// Package proc starts and stops the child processes of the fault and
// topology suites (internal/chaos, internal/topology) and of the benchmark
// harness (tools/cmd/idembench): servers on free loopback ports, each in a
// process group of its own so that a signal reaches everything it forked,
// and killed by the kernel (Pdeathsig) if the parent dies without cleaning
// up. WaitUntil polls a server until it answers, failing early when its
// process has exited.
package proc
