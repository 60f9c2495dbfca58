package telemetry_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/telemetry"
)

const (
	dashboardFile  = "../deploy/grafana/idemgate.json"
	alertsFile     = "../deploy/prometheus/alerts.yml"
	alertsTestFile = "../deploy/prometheus/alerts_test.yml"
	promConfigFile = "../deploy/prometheus/prometheus.yml"
)

var metricName = regexp.MustCompile(`\bidemgate_[a-z0-9_]+`)

// baseName strips a histogram series suffix.
func baseName(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if h, ok := strings.CutSuffix(name, s); ok && slices.Contains(telemetry.MetricNames(), name) {
			return h
		}
	}
	return name
}

// checkNames fails for every idemgate_ name in expr that is not exposed.
func checkNames(t *testing.T, where, expr string) []string {
	t.Helper()
	names := metricName.FindAllString(expr, -1)
	for _, n := range names {
		if !slices.Contains(telemetry.MetricNames(), n) {
			t.Errorf("%s queries %s, which idemgate does not expose (telemetry.MetricNames)", where, n)
		}
	}
	return names
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// grafanaVars stands in for the variables Grafana expands, so the
// expressions can be checked as plain PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$route", ".*", "${datasource}", "prometheus")

func TestDashboardQueriesOnlyExposedMetrics(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: both are needed to import it", d.UID, d.Title)
	}
	var exprs []string
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			checkNames(t, "variable $"+v.Name, v.Definition)
		}
	}
	charted := map[string]bool{}
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: grid position %+v off the 24-column grid", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("panel %d %q has no title or no query", p.ID, p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not use the $datasource variable", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.RefID == "" || strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q: a target without refId or expression", p.Title)
				}
				for _, n := range checkNames(t, fmt.Sprintf("panel %q", p.Title), tg.Expr) {
					charted[baseName(n)] = true
				}
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	for _, n := range telemetry.MetricNames() {
		if !charted[baseName(n)] {
			t.Errorf("%s is exposed but no panel charts it", baseName(n))
		}
	}

	// The expressions must be valid PromQL: promtool parses them as
	// recording rules.
	promtool := promtoolPath(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:expr_%d", i), Expr: grafanaVars.Replace(e)})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, promtool, "check", "rules", f)
}

// alertRules is the part of a Prometheus rules file the checks read.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf alertRules
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var alerts []string
	watched := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Alert == "" {
				t.Errorf("group %s: a rule without an alert name", g.Name)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a summary and a description", r.Alert)
			}
			names := checkNames(t, "alert "+r.Alert, r.Expr)
			if len(names) == 0 && !strings.Contains(r.Expr, "up{") {
				t.Errorf("%s: %q watches no idemgate series", r.Alert, r.Expr)
			}
			for _, n := range names {
				watched[n] = true
			}
		}
	}
	// What the operators were promised an alert for.
	for _, a := range []string{"IdemgateDLQGrowing", "IdemgateLocksLost", "IdemgateFencingRejections", "IdemgateStoreErrors"} {
		if !slices.Contains(alerts, a) {
			t.Errorf("no alert %s", a)
		}
	}
	for _, n := range []string{"idemgate_dlq_tasks", "idemgate_lock_lost_total", "idemgate_fencing_rejections_total", "idemgate_requests_total"} {
		if !watched[n] {
			t.Errorf("no alert watches %s", n)
		}
	}

	promtool := promtoolPath(t)
	runPromtool(t, promtool, "check", "rules", alertsFile)
	// alerts_test.yml fires each alert on made-up series and checks that a
	// quiet system fires none.
	runPromtool(t, promtool, "test", "rules", alertsTestFile)
}

type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		Authorization *struct {
			Type            string `yaml:"type"`
			CredentialsFile string `yaml:"credentials_file"`
		} `yaml:"authorization"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func TestPrometheusConfigScrapesGatewayAndWorker(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(promConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg promConfig
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", promConfigFile, err)
	}
	if !slices.Contains(cfg.RuleFiles, "alerts.yml") {
		t.Errorf("rule_files %v do not load alerts.yml", cfg.RuleFiles)
	}
	jobs := map[string]string{} // target → job
	tokenFile := ""
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job %s scrapes %s, want /metrics", sc.JobName, sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				jobs[tg] = sc.JobName
				if tg == "127.0.0.1:9090" {
					if sc.Authorization == nil || sc.Authorization.Type != "Bearer" || sc.Authorization.CredentialsFile == "" {
						t.Errorf("the gateway admin listener needs the admin token: job %s has no bearer credentials_file", sc.JobName)
					} else {
						tokenFile = sc.Authorization.CredentialsFile
					}
				}
			}
		}
	}
	// The job names are the ones IdemgateTargetDown watches.
	if jobs["127.0.0.1:9090"] != "idemgate-gateway" || jobs["127.0.0.1:9091"] != "idemgate-worker" {
		t.Errorf("targets %v, want 127.0.0.1:9090 as idemgate-gateway and 127.0.0.1:9091 as idemgate-worker", jobs)
	}

	// promtool checks that the token file exists: check a copy that points
	// at one, next to a copy of the rules.
	promtool := promtoolPath(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "admin-token")
	rules, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"prometheus.yml": []byte(strings.ReplaceAll(string(b), tokenFile, token)),
		"alerts.yml":     rules,
		"admin-token":    []byte("t0ken\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	runPromtool(t, promtool, "check", "config", filepath.Join(dir, "prometheus.yml"))
}

// promtoolPath returns promtool's path, or skips the rest of the test when
// it is not installed (apt-get install prometheus brings it).
func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus): structure checked, PromQL not parsed")
	}
	return p
}

func runPromtool(t *testing.T, promtool string, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), promtool, args...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
