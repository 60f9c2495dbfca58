package chaos

import (
	"github.com/idemgate/idemgate/internal/testkit/proc"

	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// The gateways and workers: bin/idemgate processes started from a
// configuration the suite writes, each a child killed with the suite.

const (
	tenant       = "chaos"
	tenantHeader = "X-Tenant"
	jobsPath     = "/v1/deferred-charges"
	jobTask      = "chaos.charge"
	lease        = 3 * time.Second
)

// optionalKeys are configuration keys newer binaries understand and older
// ones refuse as unknown. The suite sets each one the binary accepts
// (probeKeys) and leaves the others out, so the same suite measures both.
var optionalKeys = []string{"idempotency.store_timeout", "worker.requeue_after", "worker.requeue_interval"}

var configTemplate = template.Must(template.New("config").Parse(`listen: "{{.Listen}}"
admin_listen: ""
store: {{.Store}}
database_url: "{{.DatabaseURL}}"
redis_url: "{{.RedisURL}}"
log: {level: info, format: text}
auth: {mode: header, header: ` + tenantHeader + `}
tenants:
  - name: ` + tenant + `
idempotency:
  lease: {{.Lease}}
{{- if .Has "idempotency.store_timeout"}}
  store_timeout: 2s
{{- end}}
{{- range .In "idempotency"}}
  {{.}}
{{- end}}
server: {shutdown_timeout: 5s}
worker:
  admin_listen: "{{.WorkerAdmin}}"
  concurrency: 8
  queues: {default: 1}
  lock_ttl: 5s
  max_attempts: 25
  shutdown_timeout: 5s
{{- if .Has "worker.requeue_after"}}
  requeue_after: 3s
{{- end}}
{{- if .Has "worker.requeue_interval"}}
  requeue_interval: 1s
{{- end}}
{{- range .In "worker"}}
  {{.}}
{{- end}}
{{- range .Others}}
{{.}}
{{- end}}
jobs:
  - task: ` + jobTask + `
    schema: {type: object, required: [ref], properties: {ref: {type: string, minLength: 1}}}
    business_key: "charge:{ref}"
    max_attempts: 25
    deliver:
      http: {url: "{{.UpstreamURL}}` + deliveryPath + `", secret: "{{.Secret}}", timeout: {{.DeliverTimeout}}}
routes:
  - {name: charges, methods: [POST], path: ` + upstreamPath + `, upstream: "{{.UpstreamURL}}"}
  - {name: deferred, methods: [POST], path: ` + jobsPath + `, enqueue: {task: ` + jobTask + `}}
`))

// clusterConfig is what every member's configuration shares.
type clusterConfig struct {
	Store       string // postgres or redis
	DatabaseURL string // through the fault proxy
	RedisURL    string
	UpstreamURL string // the proxy route's upstream and the jobs' receiver
	Secret      string // signs the deliveries (whsec_…)
	Lease       time.Duration
	// DeliverTimeout bounds a job's delivery to the upstream.
	DeliverTimeout time.Duration
	keys           map[string]bool // the optional keys to set
	// Settings are a scenario's options (idempotency.redis_wait …),
	// each set only when the binary accepts it.
	Settings []setting
}

// setting is one configuration key a scenario sets: "section.name"
// (idempotency, worker, or a section of its own) and its YAML value.
type setting struct{ key, value string }

// Has reports whether the optional key is set (for the template).
func (c clusterConfig) Has(key string) bool { return c.keys[key] }

// In returns "name: value" for each setting of section (for the template).
func (c clusterConfig) In(section string) []string {
	var lines []string
	for _, st := range c.Settings {
		if sec, name, _ := strings.Cut(st.key, "."); sec == section && c.keys[st.key] {
			lines = append(lines, name+": "+st.value)
		}
	}
	return lines
}

// Others returns the settings outside idempotency and worker, each as a
// section of its own (for the template).
func (c clusterConfig) Others() []string {
	var lines []string
	for _, st := range c.Settings {
		if sec, name, _ := strings.Cut(st.key, "."); sec != "idempotency" && sec != "worker" && c.keys[st.key] {
			lines = append(lines, sec+":\n  "+name+": "+st.value)
		}
	}
	return lines
}

type memberConfig struct {
	clusterConfig
	Listen, WorkerAdmin string
}

// writeConfig writes a member's configuration file.
func writeConfig(path string, c memberConfig) error {
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, c); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// unknownKey matches idemgate config check's "FILE:LINE: KEY: unknown key".
var unknownKey = regexp.MustCompile(`(?m):\d+: ([a-z_.]+): unknown key`)

// probeKeys returns the optional keys bin accepts: it checks a
// configuration with all of them and drops those reported unknown.
func probeKeys(ctx context.Context, bin, dir string, settings []setting) (map[string]bool, error) {
	keys := map[string]bool{}
	for _, k := range optionalKeys {
		keys[k] = true
	}
	for _, st := range settings {
		keys[st.key] = true
	}
	path := filepath.Join(dir, "probe.yaml")
	// The Redis options (idempotency.redis_wait) are valid only with the
	// Redis store, and every other key with either.
	store := "postgres"
	if len(settings) > 0 {
		store = "redis"
	}
	for range 2 {
		c := memberConfig{clusterConfig: clusterConfig{
			Store: store, DatabaseURL: URL("127.0.0.1:1", "probe"), RedisURL: "redis://127.0.0.1:1/0",
			UpstreamURL: "http://127.0.0.1:1", Secret: newSecret(), Lease: lease, DeliverTimeout: 5 * time.Second, keys: keys, Settings: settings,
		}, Listen: "127.0.0.1:1", WorkerAdmin: "127.0.0.1:2"}
		if err := writeConfig(path, c); err != nil {
			return nil, err
		}
		out, err := exec.CommandContext(ctx, bin, "config", "check", "--config", path).CombinedOutput()
		if err == nil {
			return keys, nil
		}
		dropped := false
		for _, m := range unknownKey.FindAllStringSubmatch(string(out), -1) {
			if keys[m[1]] {
				delete(keys, m[1])
				dropped = true
			}
		}
		if !dropped {
			return nil, fmt.Errorf("%s config check refuses the suite's configuration: %v\n%s", bin, err, out)
		}
	}
	return nil, errors.New("config check: no configuration accepted")
}

// newSecret is a random Standard Webhooks secret.
func newSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// member is one gateway or worker process. It keeps its port and
// configuration across restarts.
type member struct {
	name   string
	bin    string
	args   []string
	health string // URL answering 200 once the member is up
	log    *os.File
	p      *proc.Proc
}

func newMember(bin, dir, name, command string, c memberConfig, health string) (*member, error) {
	cfg := filepath.Join(dir, name+".yaml")
	if err := writeConfig(cfg, c); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &member{name: name, bin: bin, args: []string{command, "--config", cfg}, health: health, log: log}, nil
}

// start runs the member and waits until its health URL answers 200.
func (m *member) start(ctx context.Context) error {
	p, err := proc.Start(proc.Spec{Name: m.name, Path: m.bin, Args: m.args, Env: proc.ChildEnv(), Log: m.log})
	if err != nil {
		return err
	}
	m.p = p
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	return proc.WaitUntil(ctx, 60*time.Second, m.name+" up", p, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.health, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", m.health, resp.Status)
		}
		return nil
	})
}

func (m *member) signal(sig syscall.Signal) error {
	if m.p == nil {
		return fmt.Errorf("%s: not started", m.name)
	}
	return m.p.Signal(sig)
}

// kill ends the member with SIGKILL.
func (m *member) kill() {
	if m.p != nil {
		m.p.Kill()
	}
}

// close stops the member (SIGTERM, SIGKILL after 5s) and closes its log.
func (m *member) close() {
	if m.p != nil {
		m.p.Stop(syscall.SIGTERM, 5*time.Second)
	}
	_ = m.log.Close()
}

// cluster is the gateways and workers of one scenario.
type cluster struct {
	bin      string
	gateways []*member
	workers  []*member
	urls     []string // the gateways' base URLs
}

// newCluster writes the configurations of two gateways and of workers
// workers, each on free ports, into dir; nothing runs yet.
// wire, when not nil, changes a member's configuration (its own proxy to
// a server, for the partition scenarios).
func newCluster(bin, dir string, cfg clusterConfig, workers int, wire func(name string, c clusterConfig) clusterConfig) (*cluster, error) {
	c := &cluster{bin: bin}
	own := func(name string) clusterConfig {
		if wire == nil {
			return cfg
		}
		return wire(name, cfg)
	}
	for i := range 2 {
		port, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		name := fmt.Sprintf("gateway-%c", 'a'+i)
		m, err := newMember(bin, dir, name, "serve",
			memberConfig{clusterConfig: own(name), Listen: listen}, "http://"+listen+"/healthz")
		if err != nil {
			c.close()
			return nil, err
		}
		c.gateways = append(c.gateways, m)
		c.urls = append(c.urls, "http://"+listen)
	}
	for i := range workers {
		port, err := proc.FreePort()
		if err != nil {
			c.close()
			return nil, err
		}
		admin := fmt.Sprintf("127.0.0.1:%d", port)
		name := fmt.Sprintf("worker-%d", i+1)
		m, err := newMember(bin, dir, name, "worker",
			memberConfig{clusterConfig: own(name), Listen: "127.0.0.1:0", WorkerAdmin: admin}, "http://"+admin+"/healthz")
		if err != nil {
			c.close()
			return nil, err
		}
		c.workers = append(c.workers, m)
	}
	return c, nil
}

// migrate runs idemgate migrate up with the first gateway's configuration.
func (c *cluster) migrate(ctx context.Context) error {
	m := c.gateways[0]
	cmd := exec.CommandContext(ctx, c.bin, "migrate", "up", "--config", m.args[2])
	cmd.Env = proc.ChildEnv()
	cmd.Stdout, cmd.Stderr = m.log, m.log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("idemgate migrate up: %w (see %s)", err, m.log.Name())
	}
	return nil
}

func (c *cluster) startGateways(ctx context.Context) error {
	for _, m := range c.gateways {
		if err := m.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) startWorkers(ctx context.Context) error {
	for _, m := range c.workers {
		if err := m.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) members() []*member {
	return append(append([]*member(nil), c.gateways...), c.workers...)
}

// exited names the members that ended without being asked to: a process
// that dies of a fault in a server it depends on is a finding.
func (c *cluster) exited() error {
	var errs []error
	for _, m := range c.members() {
		if m.p != nil && m.p.Exited() {
			errs = append(errs, fmt.Errorf("%s exited on its own: %v (-dir keeps its log)", m.name, m.p.Err()))
		}
	}
	return errors.Join(errs...)
}

// close stops every member.
func (c *cluster) close() {
	for _, m := range c.members() {
		m.close()
	}
}
