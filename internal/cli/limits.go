package cli

import (
	"context"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/limit"
)

// limitReader is the gateway's view of the flow limits: their definitions
// from the configuration, their state from the Redis the workers count
// them in (the same redis_url, no key prefix, as the workers' locks).
type limitReader struct {
	cfg     *config.Config
	limiter *limit.Limiter
}

var _ gateway.Limits = limitReader{}

// newLimitReader returns nil when no limit is declared or Redis is not
// configured: every /admin/limits/{name} is then 404.
func newLimitReader(cfg *config.Config, rdb limit.Client) gateway.Limits {
	if rdb == nil || len(cfg.LimitDefs()) == 0 {
		return nil
	}
	return limitReader{cfg: cfg, limiter: limit.New(rdb, limit.Options{})}
}

func (r limitReader) Limit(name string) (job.Limit, bool) { return r.cfg.Limit(name) }

func (r limitReader) Busiest(ctx context.Context, name string, n int) ([]gateway.LimitUsage, error) {
	usage, err := r.limiter.Busiest(ctx, name, n)
	if err != nil {
		return nil, err
	}
	out := make([]gateway.LimitUsage, len(usage))
	for i, u := range usage {
		out[i] = gateway.LimitUsage{Value: u.Value, Holders: u.Holders, Backlog: u.Backlog, LastUsed: u.LastUsed}
	}
	return out, nil
}
