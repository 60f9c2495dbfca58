package manifests

import (
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const composeDir = "deploy/compose"

// composeFile is the part of deploy/compose/compose.yaml the tests read.
type composeFile struct {
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image string `json:"image"`
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build"`
	Entrypoint  []string          `json:"entrypoint"`
	Command     []string          `json:"command"`
	Environment map[string]string `json:"environment"`
	Ports       []string          `json:"ports"`
	Volumes     []string          `json:"volumes"`
	DependsOn   map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	ReadOnly        bool   `json:"read_only"`
	StopGracePeriod string `json:"stop_grace_period"`
}

// stopGrace is how long compose waits after SIGTERM before it kills the
// container (10s unless stop_grace_period says otherwise).
func (s composeService) stopGrace(t *testing.T) time.Duration {
	t.Helper()
	if s.StopGracePeriod == "" {
		return 10 * time.Second
	}
	d, err := time.ParseDuration(s.StopGracePeriod)
	if err != nil {
		t.Fatalf("stop_grace_period %q: %v", s.StopGracePeriod, err)
	}
	return d
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var f composeFile
	if err := yaml.Unmarshal(readRepoFile(t, composeDir+"/compose.yaml"), &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(f.Services) == 0 {
		t.Fatal("compose.yaml: no services")
	}
	return f
}

// idemgate says whether a service runs the image the repository builds.
func (s composeService) idemgate() bool { return s.Build != nil }

// examplesEntrypoint is idemgate with the example jobs, which the demo's
// idemgate services run.
const examplesEntrypoint = "/usr/local/bin/idemgate-examples"

// subcommand is what an idemgate service runs: serve, worker, migrate…,
// or "" for another binary of the image.
func (s composeService) subcommand() string {
	if !s.idemgate() || (len(s.Entrypoint) > 0 && s.Entrypoint[0] != examplesEntrypoint) || len(s.Command) == 0 {
		return ""
	}
	return s.Command[0]
}

// mount is the host file or directory mounted at target, relative to the
// repository, or "".
func (s composeService) mount(target string) string {
	for _, v := range s.Volumes {
		f := strings.Split(v, ":")
		if len(f) >= 2 && f[1] == target && strings.HasPrefix(f[0], ".") {
			return path.Join(composeDir, f[0])
		}
	}
	return ""
}

// TestComposeImages: a service runs the image this repository's
// Dockerfile builds, or an upstream image pinned to a version.
func TestComposeImages(t *testing.T) {
	t.Parallel()
	pinned := regexp.MustCompile(`^[a-z0-9./-]+:v?\d+(\.\d+)+(-[a-z0-9.]+)?(@sha256:[0-9a-f]{64})?$`)
	bins, _ := imageBinaries(t)
	for name, s := range loadCompose(t).Services {
		if s.idemgate() {
			ctx := path.Join(composeDir, s.Build.Context)
			if df := path.Join(ctx, s.Build.Dockerfile); df != "Dockerfile" {
				t.Errorf("service %s builds %s, want the repository's Dockerfile", name, df)
			}
			if imageName(s.Image) != "idemgate" {
				t.Errorf("service %s tags the image it builds %q, want idemgate", name, s.Image)
			}
			if len(s.Entrypoint) > 0 && !slices.Contains(bins, s.Entrypoint[0]) {
				t.Errorf("service %s runs %s, which the image does not hold (%v)", name, s.Entrypoint[0], bins)
			}
			if !s.ReadOnly {
				t.Errorf("service %s: read_only is not set: the image writes nothing and should run so", name)
			}
			continue
		}
		if !pinned.MatchString(s.Image) {
			t.Errorf("service %s: image %q is neither built here nor pinned to a version", name, s.Image)
		}
	}
}

// TestComposeFilesExist: every host file compose.yaml mounts, and every
// file the mounted Prometheus and Grafana configuration names, is in the
// repository.
func TestComposeFilesExist(t *testing.T) {
	t.Parallel()
	for name, s := range loadCompose(t).Services {
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if !strings.HasPrefix(src, ".") {
				continue // a named volume
			}
			if _, err := os.Stat(repoPath(path.Join(composeDir, src))); err != nil {
				t.Errorf("service %s mounts %s: %v", name, src, err)
			}
		}
		if s.Build != nil {
			if _, err := os.Stat(repoPath(path.Join(composeDir, s.Build.Context, s.Build.Dockerfile))); err != nil {
				t.Errorf("service %s builds with %v", name, err)
			}
		}
	}
}

// TestComposeConfig: the configuration the idemgate services mount passes
// `idemgate config check` with the environment compose gives them, and
// each runs with it.
func TestComposeConfig(t *testing.T) {
	t.Parallel()
	f := loadCompose(t)
	checked := 0
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		s := f.Services[name]
		sub := s.subcommand()
		if sub == "" {
			continue
		}
		i := slices.Index(s.Command, "--config")
		if i < 0 || i+1 >= len(s.Command) {
			t.Errorf("service %s runs idemgate %s without --config", name, sub)
			continue
		}
		host := s.mount(s.Command[i+1])
		if host == "" {
			t.Errorf("service %s: --config %s is not a file mounted from the repository", name, s.Command[i+1])
			continue
		}
		configCheck(t, examplesBin, repoPath(host), s.Environment)
		checked++
	}
	if checked == 0 {
		t.Fatal("compose.yaml has no idemgate service with a configuration")
	}
}

// TestComposeTopology: two gateways, a worker, a migration the others wait
// for; the ports published are the ports the configuration listens on.
func TestComposeTopology(t *testing.T) {
	t.Parallel()
	f := loadCompose(t)
	bySub := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		bySub[f.Services[name].subcommand()] = append(bySub[f.Services[name].subcommand()], name)
	}
	if len(bySub["serve"]) < 2 || len(bySub["worker"]) < 1 || len(bySub["migrate"]) != 1 {
		t.Fatalf("compose.yaml runs serve in %v, worker in %v, migrate in %v: want two gateways, a worker and one migration", bySub["serve"], bySub["worker"], bySub["migrate"])
	}
	migrate := bySub["migrate"][0]
	if c := f.Services[migrate].Command; len(c) < 2 || c[1] != "up" {
		t.Errorf("service %s runs %v, want migrate up", migrate, c)
	}
	for _, name := range append(slices.Clone(bySub["serve"]), bySub["worker"]...) {
		if f.Services[name].DependsOn[migrate].Condition != "service_completed_successfully" {
			t.Errorf("service %s does not wait for %s to complete", name, migrate)
		}
	}

	conf := parseConfig(t, readRepoFile(t, composeDir+"/idemgate.yaml"))
	listen := containerPort(t, "listen", conf.listen)
	admin := containerPort(t, "admin_listen", conf.adminListen)
	workerAdmin := containerPort(t, "worker.admin_listen", conf.workerAdminListen)
	for _, name := range bySub["serve"] {
		if g := f.Services[name].stopGrace(t); g <= conf.shutdownTimeout {
			t.Errorf("gateway %s: compose kills it %s after SIGTERM, before server.shutdown_timeout (%s) ends", name, g, conf.shutdownTimeout)
		}
		published := publishedPorts(t, name, f.Services[name].Ports)
		if !slices.Contains(published, listen) {
			t.Errorf("gateway %s publishes %v, not its public listener's port %d", name, published, listen)
		}
		for _, p := range published {
			if p != listen && p != admin {
				t.Errorf("gateway %s publishes container port %d, where it has no listener (%d, %d)", name, p, listen, admin)
			}
		}
	}
	for _, name := range bySub["worker"] {
		if g, need := f.Services[name].stopGrace(t), conf.workerShutdownTimeout+conf.workerLockTTL; g <= need {
			t.Errorf("worker %s: compose kills it %s after SIGTERM, before worker.shutdown_timeout + worker.lock_ttl (%s)", name, g, need)
		}
		for _, p := range publishedPorts(t, name, f.Services[name].Ports) {
			if p != workerAdmin {
				t.Errorf("worker %s publishes container port %d, where it has no listener (%d)", name, p, workerAdmin)
			}
		}
	}

	// Prometheus scrapes each gateway's and worker's admin listener.
	var prom struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			Authorization struct {
				CredentialsFile string `json:"credentials_file"`
			} `json:"authorization"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	promSvc := f.Services["prometheus"]
	promConf := promSvc.mount("/etc/prometheus/prometheus.yml")
	if promConf == "" {
		t.Fatal("service prometheus mounts no /etc/prometheus/prometheus.yml from the repository")
	}
	if err := yaml.Unmarshal(readRepoFile(t, promConf), &prom); err != nil {
		t.Fatal(err)
	}
	for _, rf := range prom.RuleFiles {
		if src := promSvc.mount(path.Join("/etc/prometheus", rf)); src != "deploy/prometheus/alerts.yml" {
			t.Errorf("prometheus: rule file %s is %q, want deploy/prometheus/alerts.yml mounted beside the configuration", rf, src)
		}
	}
	targets := map[string]bool{}
	jobRE := alertJobs(t)
	for _, sc := range prom.ScrapeConfigs {
		if !jobRE.MatchString(sc.JobName) {
			t.Errorf("prometheus: job %s is not one the alert rules watch (%s)", sc.JobName, jobRE)
		}
		if cf := sc.Authorization.CredentialsFile; cf == "" || promSvc.mount(cf) == "" {
			t.Errorf("prometheus: job %s: credentials file %q is not mounted", sc.JobName, cf)
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				targets[tg] = true
			}
		}
	}
	want := map[string]bool{}
	for _, name := range bySub["serve"] {
		want[net.JoinHostPort(name, strconv.Itoa(admin))] = true
	}
	for _, name := range bySub["worker"] {
		want[net.JoinHostPort(name, strconv.Itoa(workerAdmin))] = true
	}
	if !maps.Equal(targets, want) {
		t.Errorf("prometheus scrapes %v, want the admin listeners %v", slices.Sorted(maps.Keys(targets)), slices.Sorted(maps.Keys(want)))
	}
}

// TestComposeTracing: the idemgate services export their traces to the
// collector, on a port it receives OTLP on.
func TestComposeTracing(t *testing.T) {
	t.Parallel()
	f := loadCompose(t)
	col, ok := f.Services["otel-collector"]
	if !ok {
		t.Fatal("no otel-collector service")
	}
	i := slices.IndexFunc(col.Command, func(a string) bool { return strings.HasPrefix(a, "--config=") })
	if i < 0 {
		t.Fatal("otel-collector: no --config=")
	}
	src := col.mount(strings.TrimPrefix(col.Command[i], "--config="))
	if src == "" {
		t.Fatalf("otel-collector: %s is not mounted from the repository", col.Command[i])
	}
	var conf struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					HTTP struct {
						Endpoint string `json:"endpoint"`
					} `json:"http"`
				} `json:"protocols"`
			} `json:"otlp"`
		} `json:"receivers"`
		Service struct {
			Pipelines map[string]struct {
				Receivers []string `json:"receivers"`
			} `json:"pipelines"`
		} `json:"service"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, src), &conf); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(conf.Service.Pipelines["traces"].Receivers, "otlp") {
		t.Fatalf("otel-collector: no traces pipeline from the otlp receiver")
	}
	_, port, err := net.SplitHostPort(conf.Receivers.OTLP.Protocols.HTTP.Endpoint)
	if err != nil {
		t.Fatalf("otel-collector: OTLP/HTTP endpoint: %v", err)
	}
	for name, s := range f.Services {
		if s.subcommand() != "serve" && s.subcommand() != "worker" {
			continue
		}
		// OTLP over HTTP (http/protobuf) is idemgate's default protocol.
		u, err := url.Parse(s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"])
		if err != nil || u.Hostname() != "otel-collector" || u.Port() != port {
			t.Errorf("service %s: OTEL_EXPORTER_OTLP_ENDPOINT %q, want http://otel-collector:%s", name, s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"], port)
		}
	}
}

// TestComposeGrafana: Grafana provisions the Prometheus data source and
// loads deploy/grafana/idemgate.json from the directory its provider reads.
func TestComposeGrafana(t *testing.T) {
	t.Parallel()
	g, ok := loadCompose(t).Services["grafana"]
	if !ok {
		t.Fatal("no grafana service")
	}
	prov := g.mount("/etc/grafana/provisioning")
	if prov == "" {
		t.Fatal("grafana: /etc/grafana/provisioning is not mounted from the repository")
	}
	var dashboards struct {
		Providers []struct {
			Options struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, prov+"/dashboards/idemgate.yaml"), &dashboards); err != nil {
		t.Fatal(err)
	}
	if len(dashboards.Providers) != 1 {
		t.Fatalf("grafana: %d dashboard providers, want 1", len(dashboards.Providers))
	}
	dir := dashboards.Providers[0].Options.Path
	if src := g.mount(path.Join(dir, "idemgate.json")); src != "deploy/grafana/idemgate.json" {
		t.Errorf("grafana: %s/idemgate.json is %q, want deploy/grafana/idemgate.json", dir, src)
	}
	var sources struct {
		Datasources []struct {
			Type      string `json:"type"`
			URL       string `json:"url"`
			IsDefault bool   `json:"isDefault"`
		} `json:"datasources"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, prov+"/datasources/prometheus.yaml"), &sources); err != nil {
		t.Fatal(err)
	}
	if len(sources.Datasources) != 1 || sources.Datasources[0].Type != "prometheus" || !sources.Datasources[0].IsDefault ||
		sources.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana: data sources %+v, want the default one on http://prometheus:9090", sources.Datasources)
	}
}

// publishedPorts are the container ports of compose's short port syntax
// ([HOST_IP:][HOST_PORT:]CONTAINER_PORT).
func publishedPorts(t *testing.T, service string, ports []string) []int {
	t.Helper()
	var out []int
	for _, p := range ports {
		f := strings.Split(strings.TrimSuffix(p, "/tcp"), ":")
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			t.Fatalf("service %s: port %q", service, p)
		}
		out = append(out, n)
	}
	return out
}
