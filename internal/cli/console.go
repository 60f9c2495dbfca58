package cli

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/reconcile"
)

// mountConsole serves the operator console at /admin/ui/ on the admin
// listener, unless admin_listen is "" or admin.ui is false. It reads what
// the gateway reads (its store, its explainer, the job tables when it has
// PostgreSQL) and acts through what `idemgate jobs requeue` and `idemgate
// dlq` run (job.Relay, job.DeadLetters) when it has Redis too.
func mountConsole(g *gateway.Gateway, cfg *config.Config, deps gatewayDeps, opts gateway.Options, svc *services, logger *slog.Logger) error {
	if cfg.AdminListen == "" || !cfg.Admin.UI {
		return nil
	}
	co := console.Options{
		Stories:     opts.Explainer,
		Keys:        deps.store,
		StoreName:   cfg.Store,
		Requests:    g.Recent(),
		KeyRequests: g.KeyHistory(),
		Audit:       g.Audit(),
		Logger:      logger,
	}
	if opts.ReplayCache != nil {
		co.Forget = opts.ReplayCache.Forget
	}
	for _, r := range cfg.Routes {
		co.Routes = append(co.Routes, r.Name)
	}
	if f, ok := opts.Fairness.(*job.Fairness); ok {
		co.Fairness = f
	}
	if deps.pool != nil {
		co.Jobs = job.NewStore(deps.pool)
		co.Schedules = job.NewSchedules(deps.pool)
		stuck := reconcile.Options{StuckAfter: defaultStuckAfter}
		if cfg.RedisURL != "" {
			inspector, err := svc.queueInspector()
			if err != nil {
				return err
			}
			stuck.TaskState = func(_ context.Context, queue, id string) (string, error) {
				return job.TaskState(inspector, queue, id)
			}
			sub := deps.jobs
			if sub == nil {
				client, err := svc.queueClient()
				if err != nil {
					return err
				}
				sub = job.NewSubmitter(deps.pool, client)
			}
			if sub.Inspector == nil {
				sub.Inspector = inspector
			}
			co.Requeue = job.NewRelay(sub, inspector, job.RelayOptions{})
			co.Cancel = sub
			co.Rerun = func(ctx context.Context, id string) (job.Row, error) { return sub.Rerun(ctx, id, cfg.Job) }
			co.DeadLetters = job.NewDeadLetters(sub, inspector)
			co.QueuesPath = queuesPath
		}
		co.Stuck = console.StuckJobs(deps.pool, stuck)
	}
	h, err := console.New(co)
	if err != nil {
		return err
	}
	g.AdminMount(console.DefaultPrefix, h)
	return nil
}

// queuesCSP keeps the queue UI (asynqmon) on the admin listener's origin:
// its page asks for web fonts from another origin, which this refuses, so
// it falls back to the system's fonts. Its bundle is a script file of its
// own origin plus an inline bootstrap, and it styles with inline styles.
const queuesCSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; font-src 'self'; img-src 'self' data:; " +
	"script-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'self'"

func withQueuesCSP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", queuesCSP)
		next.ServeHTTP(w, r)
	})
}
