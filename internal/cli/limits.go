package cli

import (
	"context"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/flowlimit"
)

// limitReader is the gateway's view of the flow limits: their definitions
// from the configuration, their state from the Redis the workers count
// them in (the same redis_url, no key prefix, as the workers' locks).
type limitReader struct {
	cfg     *config.Config
	limiter *flowlimit.Limiter
}

var _ gateway.Limits = limitReader{}

// newLimitReader returns nil when no limit is declared or Redis is not
// configured: every /admin/limits/{name} is then 404.
func newLimitReader(cfg *config.Config, rdb flowlimit.Client) gateway.Limits {
	if rdb == nil || len(cfg.LimitDefs()) == 0 {
		return nil
	}
	return limitReader{cfg: cfg, limiter: flowlimit.New(rdb, flowlimit.Options{})}
}

func (r limitReader) Limit(name string) (job.FlowLimit, bool) { return r.cfg.Limit(name) }

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
