package chaos

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/internal/testkit/faultproxy"
	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// scenario is one fault under load.
type scenario struct {
	name    string
	store   string // the idempotency store: postgres (default) or redis
	jobs    bool   // the load submits jobs (enqueue route) instead of proxied charges
	workers int
	// spread is how long keys keep starting; the fault starts faultAt
	// into it. With faultAfterLoad the fault comes once every key has its
	// answer, and the workers start only after it.
	spread         time.Duration
	faultAt        time.Duration
	faultAfterLoad bool
	fault          func(context.Context, *env) error
	// finishWithin bounds the wait for accepted jobs to succeed.
	finishWithin time.Duration
	// lease is the gateways' idempotency lease; 0 means lease. A gateway
	// rides out a store outage without a re-run only while its lease
	// lasts: the restart scenarios, which promise no re-run, give it a
	// lease longer than a restart with crash recovery takes under load.
	lease time.Duration
	// deploy starts the servers the scenario breaks; nil: the suite's
	// shared Redis and PostgreSQL, the latter behind a fault proxy.
	deploy func(ctx context.Context, s *suite, dir, db string) (*deployment, error)
	// mixed sends half the keys to the proxy route and half to the
	// enqueue route, at once.
	mixed bool
	// settings are the options the scenario measures; a binary without
	// one of them cannot run it.
	settings []setting
	// maxKeys caps Options.Keys for a scenario whose slow upstream
	// could not serve more within finishWithin; 0: no cap.
	maxKeys int
	// upstreamLatency is the upstream's mean latency; 0 means 250ms.
	upstreamLatency time.Duration
}

// env is what a fault acts on.
type env struct {
	pg      *Postgres
	redis   *Redis
	proxy   *faultproxy.Proxy // between the idemgate processes and PostgreSQL, with the shared servers
	cluster *cluster
	dep     *deployment
}

// scenarios is the suite, in the order it runs.
func scenarios() []scenario {
	return append([]scenario{
		{name: "broker-wipe", jobs: true, workers: 1, spread: 4 * time.Second, faultAfterLoad: true, fault: restartRedis, finishWithin: 30 * time.Second},
		{name: "broker-wipe-submit", jobs: true, workers: 1, spread: 8 * time.Second, faultAt: 3 * time.Second, fault: restartRedis, finishWithin: 30 * time.Second},
		{name: "pg-restart-fast", lease: 10 * time.Second, spread: 10 * time.Second, faultAt: 2 * time.Second, fault: restartPostgres("fast", 3)},
		{name: "pg-restart-immediate", lease: 10 * time.Second, spread: 10 * time.Second, faultAt: 2 * time.Second, fault: restartPostgres("immediate", 3)},
		{name: "pg-stop-8s", spread: 16 * time.Second, faultAt: 3 * time.Second, fault: stopPostgres(8 * time.Second)},
		{name: "pg-freeze-10s", spread: 18 * time.Second, faultAt: 3 * time.Second, fault: freezePostgres(10 * time.Second)},
		{name: "gateway-sigstop", spread: 14 * time.Second, faultAt: 3 * time.Second, fault: stopGateway(2 * lease)},
		{name: "redis-store-loss", store: "redis", spread: 10 * time.Second, faultAt: 3 * time.Second, fault: restartRedis},
		{name: "gateway-sigkill", spread: 10 * time.Second, faultAt: 3 * time.Second, fault: killGateway},
		// asynq gives a dead worker's tasks back once their lease has been
		// expired for 30s, on a one-minute sweep: up to about 2 minutes.
		{name: "worker-sigkill", jobs: true, workers: 2, spread: 8 * time.Second, faultAt: 3 * time.Second, fault: killWorker, finishWithin: 150 * time.Second},
	}, failoverScenarios()...)
}

// Names lists the scenarios in the order they run.
func Names() []string {
	var names []string
	for _, s := range scenarios() {
		names = append(names, s.name)
	}
	return names
}

// pick returns the named scenarios in suite order; none named: all.
func pick(names []string) ([]scenario, error) {
	all := scenarios()
	if len(names) == 0 {
		return all, nil
	}
	var errs []error
	for _, n := range names {
		if !slices.ContainsFunc(all, func(s scenario) bool { return s.name == n }) {
			errs = append(errs, errors.New("unknown scenario "+n+" (one of "+strings.Join(Names(), ", ")+")"))
		}
	}
	if errs != nil {
		return nil, errors.Join(errs...)
	}
	return slices.DeleteFunc(all, func(s scenario) bool { return !slices.Contains(names, s.name) }), nil
}

// restartRedis kills Redis (no persistence: every key, task and record in
// it is gone) and starts it again on the same port.
func restartRedis(ctx context.Context, e *env) error { return e.redis.Restart(ctx) }

// restartPostgres is pg_ctl restart -m mode, times times, 2s apart: a
// restart takes a fraction of a second, and each one is another chance to
// catch requests between their claim and their stored outcome.
func restartPostgres(mode string, times int) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		for i := range times {
			if i > 0 && !proc.Sleep(ctx, 2*time.Second) {
				return ctx.Err()
			}
			if err := e.pg.Restart(ctx, mode); err != nil {
				return err
			}
		}
		return nil
	}
}

// stopPostgres stops PostgreSQL (-m fast) for d, then starts it.
func stopPostgres(d time.Duration) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		if err := e.pg.Stop(ctx, "fast"); err != nil {
			return err
		}
		if !proc.Sleep(ctx, d) {
			return ctx.Err()
		}
		return e.pg.Start(ctx)
	}
}

// freezePostgres stops every byte between the idemgate processes and
// PostgreSQL for d, connections left open, then lets them flow again.
func freezePostgres(d time.Duration) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		e.proxy.Freeze()
		defer e.proxy.Thaw()
		proc.Sleep(ctx, d)
		return nil
	}
}

// stopGateway SIGSTOPs the first gateway for d (longer than its lease),
// then SIGCONTs it.
func stopGateway(d time.Duration) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		gw := e.cluster.gateways[0]
		if err := gw.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		proc.Sleep(ctx, d)
		return gw.signal(syscall.SIGCONT)
	}
}

// killGateway SIGKILLs the first gateway and starts it again a second later.
func killGateway(ctx context.Context, e *env) error {
	gw := e.cluster.gateways[0]
	gw.kill()
	proc.Sleep(ctx, time.Second)
	return gw.start(ctx)
}

// killWorker SIGKILLs the first worker and starts it again a second later.
func killWorker(ctx context.Context, e *env) error {
	w := e.cluster.workers[0]
	w.kill()
	proc.Sleep(ctx, time.Second)
	return w.start(ctx)
}
