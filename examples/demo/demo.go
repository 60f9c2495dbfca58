package demo

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/examples"
	"github.com/idemgate/idemgate/examples/invariants"
	"github.com/idemgate/idemgate/examples/partnersim"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
)

// PartnerURLKey is the configuration key of the partner's base URL.
const PartnerURLKey = "worker.partner_url"

// DefaultPartnerURL is worker.partner_url's default: where `dev` runs
// partnersim.
const DefaultPartnerURL = "http://127.0.0.1:9100"

// MetricNotificationDedup counts notification.send's look-ups of its Redis
// dedup window, by result (hit, miss), on the worker's /metrics.
const MetricNotificationDedup = "idemgate_notification_dedup_total"

// settings are the examples' own configuration, set each time a
// configuration is read.
type settings struct {
	partnerURL string
}

// Options are the example jobs as an idemgate extension.
func Options() []extension.Option {
	s := &settings{partnerURL: DefaultPartnerURL}
	return []extension.Option{
		extension.WithJobs(examples.JobsYAML),
		extension.WithHandlers(examples.Tasks(), s.register),
		extension.WithMigrations(examples.Migrations()),
		extension.WithReconcile(reconciler()),
		extension.WithEffects(effects),
		extension.WithSetting(extension.Setting{
			Key:      PartnerURLKey,
			Default:  DefaultPartnerURL,
			Set:      s.setPartnerURL,
			Listener: loopbackAddr,
		}),
		extension.WithDevServer(extension.DevServer{
			Name:    "partnersim",
			Addr:    s.partnerAddr,
			Handler: partnersim.New(partnersim.Options{}),
		}),
	}
}

func (s *settings) setPartnerURL(v string) string {
	s.partnerURL = v
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("%q is not an http:// or https:// URL with a host", v)
	}
	return ""
}

// partnerAddr is where dev mode runs partnersim: worker.partner_url's host.
func (s *settings) partnerAddr() (string, error) {
	u, err := url.Parse(s.partnerURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%s %q: dev mode runs partnersim there, so it must be http://HOST:PORT", PartnerURLKey, s.partnerURL)
	}
	return u.Host, nil
}

// loopbackAddr is the address partnersim would take in dev mode, when
// worker.partner_url names this host.
func loopbackAddr(v string) (string, bool) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !isLoopback(u.Hostname()) {
		return "", false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port), true
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// register adds the example handlers, with their dedup counter on the
// worker's registry.
func (s *settings) register(h *workers.Handlers, w extension.Worker) error {
	dedup := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricNotificationDedup,
		Help: "Look-ups of notification.send's Redis dedup window, by result (hit: the key was already there).",
	}, []string{"result"})
	for _, r := range []string{"hit", "miss"} {
		dedup.WithLabelValues(r)
	}
	if w.Metrics != nil {
		if err := w.Metrics.Register(dedup); err != nil {
			return fmt.Errorf("examples: %w", err)
		}
	}
	return examples.Register(h, examples.Business{
		DB:         w.DB,
		Redis:      w.Redis,
		PartnerURL: s.partnerURL,
		HTTPClient: w.HTTPClient,
		OnDedup: func(hit bool) {
			result := "miss"
			if hit {
				result = "hit"
			}
			dedup.WithLabelValues(result).Inc()
		},
	})
}

// reconciler is the example jobs' invariants (examples/invariants) as
// `idemgate reconcile`'s checks, with --partner to compare with
// partnersim's own account.
func reconciler() extension.Reconciler {
	var partner string
	return extension.Reconciler{
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&partner, "partner", "", "also compare with the partner's own account of applied effects (partnersim: its base URL)")
		},
		Checks: func(opts extension.ReconcileOptions) ([]reconcile.Check, error) {
			checks := invariants.Options{Grace: opts.Grace}
			if partner != "" {
				if _, err := url.Parse(partner); err != nil {
					return nil, fmt.Errorf("--partner: %w", err)
				}
				checks.PartnerEffects = func(ctx context.Context) (map[string]int, error) { return partnerEffects(ctx, partner) }
			}
			return invariants.Checks(checks), nil
		},
	}
}

// partnerEffects reads partnersim's GET /effects.
func partnerEffects(ctx context.Context, base string) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/effects", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("partner effects: %s", resp.Status)
	}
	var out map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("partner effects: %w", err)
	}
	return out, nil
}

// effects are the rows of the business tables a job's business key wrote.
func effects(ctx context.Context, db *pgxpool.Pool, task, tenant, key string) ([]extension.Effect, bool, error) {
	rows, known, err := invariants.Effects(ctx, db, task, tenant, key)
	out := make([]extension.Effect, len(rows))
	for i, r := range rows {
		out[i] = extension.Effect{Kind: r.Kind, Ref: r.Ref, WrittenAt: r.WrittenAt}
	}
	return out, known, err
}
