package manifests

import (
	"bufio"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The kustomizations users build: the root (the base as it is) and the
// example overlay.
const (
	rootKustomization    = "deploy/kubernetes"
	exampleKustomization = "deploy/kubernetes/overlays/example"
)

// The names the deployment uses for its parts; the alert rules and the
// docs (docs/operations/kubernetes.md) refer to them.
const (
	gatewayName = "idemgate-gateway"
	workerName  = "idemgate-worker"
	migrateName = "idemgate-migrate"
)

func TestKubernetes(t *testing.T) {
	for _, dir := range []string{rootKustomization, exampleKustomization} {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			checkCluster(t, render(t, dir))
		})
	}
}

func checkCluster(t *testing.T, c *cluster) {
	gw, wk := c.deployment(t, gatewayName), c.deployment(t, workerName)
	_, gwData := c.configFile(t, gw)
	_, wkData := c.configFile(t, wk)
	if gwData == nil || wkData == nil {
		t.Fatalf("the gateway and the worker must run with --config")
	}
	gwConf, wkConf := parseConfig(t, gwData), parseConfig(t, wkData)

	t.Run("config", func(t *testing.T) {
		// The file in the ConfigMap passes `idemgate config check` with
		// the environment each container gets from the Secret: the
		// placeholders are valid values and every ${VAR} is set.
		for _, w := range c.workloads(t) {
			name, data := c.configFile(t, w)
			if data == nil {
				continue
			}
			file := filepath.Join(t.TempDir(), path.Base(name))
			if err := os.WriteFile(file, data, 0o600); err != nil {
				t.Fatal(err)
			}
			configCheck(t, idemgateBin, file, c.env(t, w))
		}
	})

	t.Run("secrets", func(t *testing.T) {
		for _, w := range c.workloads(t) {
			c.env(t, w) // reports each reference to a missing Secret or key
		}
	})

	t.Run("probes", func(t *testing.T) {
		// No exec probe or hook anywhere: the image has no shell.
		for _, w := range c.workloads(t) {
			for what, p := range map[string]*corev1.Probe{"liveness": w.ctr.LivenessProbe, "readiness": w.ctr.ReadinessProbe, "startup": w.ctr.StartupProbe} {
				if p != nil && p.Exec != nil {
					t.Errorf("%s: %s probe runs %v, but the image has no shell", w.name, what, p.Exec.Command)
				}
			}
			if l := w.ctr.Lifecycle; l != nil {
				for what, h := range map[string]*corev1.LifecycleHandler{"preStop": l.PreStop, "postStart": l.PostStart} {
					if h != nil && h.Exec != nil {
						t.Errorf("%s: %s hook runs %v, but the image has no shell", w.name, what, h.Exec.Command)
					}
				}
			}
		}
		// The gateway: /healthz and /readyz on its public listener
		// (TestGatewayServesProbePaths asks a running gateway).
		listen := containerPort(t, "listen", gwConf.listen)
		wantHTTPProbe(t, gw, "liveness", gw.ctr.LivenessProbe, "/healthz", listen)
		wantHTTPProbe(t, gw, "readiness", gw.ctr.ReadinessProbe, "/readyz", listen)
		// The worker serves /healthz, open without a token, on
		// worker.admin_listen; it has no /readyz.
		workerAdmin := containerPort(t, "worker.admin_listen", wkConf.workerAdminListen)
		wantHTTPProbe(t, wk, "liveness", wk.ctr.LivenessProbe, "/healthz", workerAdmin)
		wantHTTPProbe(t, wk, "readiness", wk.ctr.ReadinessProbe, "/healthz", workerAdmin)
	})

	t.Run("services", func(t *testing.T) {
		// Each Service sends to the pods of one Deployment, and each of
		// its ports reaches a port the process listens on.
		listeners := map[string][]int{
			gatewayName: {containerPort(t, "listen", gwConf.listen), containerPort(t, "admin_listen", gwConf.adminListen)},
			workerName:  {containerPort(t, "worker.admin_listen", wkConf.workerAdminListen)},
		}
		for _, name := range []string{gatewayName, workerName} {
			svc, ok := c.services[name]
			if !ok {
				t.Errorf("no Service %s", name)
				continue
			}
			got := c.podsSelectedBy(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
			if !slices.Equal(got, []string{name}) {
				t.Errorf("Service %s selects the pods of %v, want those of %s only", name, got, name)
				continue
			}
			w := c.deployment(t, name)
			var reached []int
			for _, p := range svc.Spec.Ports {
				target := p.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(p.Port)
				}
				reached = append(reached, containerPortOf(t, w, target))
			}
			for _, port := range listeners[name] {
				if !slices.Contains(reached, port) {
					t.Errorf("Service %s reaches ports %v; the configuration listens on %d too", name, reached, port)
				}
			}
			for _, port := range reached {
				if !slices.Contains(listeners[name], port) {
					t.Errorf("Service %s sends to port %d, where the configuration has no listener (%v)", name, port, listeners[name])
				}
			}
		}
	})

	t.Run("selectors", func(t *testing.T) {
		for name, d := range c.deployments {
			if !selects(t, d.Spec.Selector, d.Spec.Template.Labels) {
				t.Errorf("Deployment %s: selector %v does not match its pods' labels %v", name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
			}
		}
		if len(c.pdbs) == 0 {
			t.Errorf("no PodDisruptionBudget")
		}
		gatewayCovered := false
		for name, pdb := range c.pdbs {
			got := c.podsSelectedBy(t, pdb.Spec.Selector)
			if len(got) != 1 || c.deployments[got[0]] == nil {
				t.Errorf("PodDisruptionBudget %s selects the pods of %v, want one Deployment's", name, got)
				continue
			}
			gatewayCovered = gatewayCovered || got[0] == gatewayName
		}
		if !gatewayCovered {
			t.Errorf("no PodDisruptionBudget covers the gateways")
		}
	})

	t.Run("security", func(t *testing.T) {
		uid := dockerfileUser(t)
		for _, w := range c.workloads(t) {
			psc, sc := w.pod.SecurityContext, w.ctr.SecurityContext
			nonRoot := (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) ||
				(psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
			if !nonRoot {
				t.Errorf("%s: runAsNonRoot is not set", w.name)
			}
			if psc != nil && psc.RunAsUser != nil && *psc.RunAsUser != uid {
				t.Errorf("%s: runAsUser %d, but the image's user is %d", w.name, *psc.RunAsUser, uid)
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: readOnlyRootFilesystem is not true", w.name)
			}
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation is not false", w.name)
			}
			if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("%s: capabilities are not dropped", w.name)
			}
			if name := imageName(w.ctr.Image); name != "idemgate" {
				t.Errorf("%s: image %q, want the idemgate image", w.name, w.ctr.Image)
			}
			if w.ctr.Resources.Requests.Memory().IsZero() || w.ctr.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: no memory request or limit", w.name)
			}
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		// The kubelet kills a pod when its grace period ends: it must
		// outlast the shutdown the configuration allows
		// (server.shutdown_timeout bounds the gateway's, drain included).
		g := gw.pod.TerminationGracePeriodSeconds
		if g == nil || time.Duration(*g)*time.Second <= gwConf.shutdownTimeout {
			t.Errorf("gateway terminationGracePeriodSeconds %v, want above server.shutdown_timeout = %s", deref(g), gwConf.shutdownTimeout)
		}
		if gwConf.drainDelay >= gwConf.shutdownTimeout {
			t.Errorf("server.drain_delay %s leaves nothing of server.shutdown_timeout %s for requests in flight", gwConf.drainDelay, gwConf.shutdownTimeout)
		}
		// A gateway asked to stop must leave the Service before its
		// listeners close: either it drains (its readiness probe fails
		// for drain_delay, longer than the probe takes to notice) or a
		// preStop hook delays the SIGTERM.
		switch {
		case gwConf.drainDelay > 0:
			p := gw.ctr.ReadinessProbe
			if p != nil {
				period, failures := p.PeriodSeconds, p.FailureThreshold
				if period == 0 {
					period = 10 // Kubernetes' defaults
				}
				if failures == 0 {
					failures = 3
				}
				notice := time.Duration(period*failures) * time.Second
				if notice >= gwConf.drainDelay {
					t.Errorf("gateway readiness probe notices a drain after %s, but server.drain_delay is %s: the listeners close first", notice, gwConf.drainDelay)
				}
			}
		case gw.ctr.Lifecycle == nil || gw.ctr.Lifecycle.PreStop == nil:
			t.Errorf("gateway: neither server.drain_delay nor a preStop delay: the Service still sends requests to a gateway that has closed its listeners")
		}
		// A worker gives running jobs worker.shutdown_timeout, then
		// cancels them and waits up to one worker.lock_ttl for their
		// handlers to return.
		g = wk.pod.TerminationGracePeriodSeconds
		if need := wkConf.workerShutdownTimeout + wkConf.workerLockTTL; g == nil || time.Duration(*g)*time.Second <= need {
			t.Errorf("worker terminationGracePeriodSeconds %v, want above worker.shutdown_timeout + worker.lock_ttl = %s", deref(g), need)
		}
		if s := c.deployments[gatewayName].Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != 0 {
			t.Errorf("gateway rolling update may take gateways away before their replacements are ready (maxUnavailable %v)", s)
		}
	})

	t.Run("migration", func(t *testing.T) {
		j := c.job(t, migrateName)
		args := append(slices.Clone(j.ctr.Command), j.ctr.Args...)
		if len(args) < 2 || args[0] != "migrate" || args[1] != "up" {
			t.Errorf("Job %s runs %v, want idemgate migrate up", migrateName, args)
		}
		env := c.env(t, j)
		if name, _ := c.configFile(t, j); name == "" && env["DATABASE_URL"] == "" {
			t.Errorf("Job %s has neither --config nor DATABASE_URL", migrateName)
		}
		if env["DATABASE_URL"] != "" && env["DATABASE_URL"] != c.env(t, gw)["DATABASE_URL"] {
			t.Errorf("Job %s migrates another database than the gateways use", migrateName)
		}
		spec := c.jobs[migrateName].Spec
		if p := spec.Parallelism; p != nil && *p != 1 {
			t.Errorf("Job %s parallelism %d: two migrations at once would race", migrateName, *p)
		}
		if rp := j.pod.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
			t.Errorf("Job %s restartPolicy %q", migrateName, rp)
		}
	})

	t.Run("autoscaling", func(t *testing.T) {
		if len(c.hpas) == 0 {
			t.Fatalf("no HorizontalPodAutoscaler")
		}
		for name, h := range c.hpas {
			ref := h.Spec.ScaleTargetRef
			if ref.Kind != "Deployment" || c.deployments[ref.Name] == nil {
				t.Errorf("HorizontalPodAutoscaler %s scales %s %s, which the kustomization does not have", name, ref.Kind, ref.Name)
				continue
			}
			if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
				t.Errorf("HorizontalPodAutoscaler %s: minReplicas %v, maxReplicas %d: want at least 2 and at most max", name, deref(h.Spec.MinReplicas), h.Spec.MaxReplicas)
			}
			if r := c.deployments[ref.Name].Spec.Replicas; r != nil {
				t.Errorf("Deployment %s sets replicas %d, which every apply would restore over what HorizontalPodAutoscaler %s chose", ref.Name, *r, name)
			}
			w := c.deployment(t, ref.Name)
			for _, m := range h.Spec.Metrics {
				if m.Resource != nil && w.ctr.Resources.Requests.Name(m.Resource.Name, "").IsZero() {
					t.Errorf("HorizontalPodAutoscaler %s scales on %s, but %s requests none", name, m.Resource.Name, w.name)
				}
			}
		}
	})

	t.Run("monitoring", func(t *testing.T) {
		checkServiceMonitors(t, c, map[string]int{
			gatewayName: containerPort(t, "admin_listen", gwConf.adminListen),
			workerName:  containerPort(t, "worker.admin_listen", wkConf.workerAdminListen),
		})
	})
}

// checkServiceMonitors: the ServiceMonitors scrape /metrics on the admin
// listener of the gateways and the workers, under the job names the alert
// rules expect.
func checkServiceMonitors(t *testing.T, c *cluster, adminPorts map[string]int) {
	if len(c.monitors) == 0 {
		t.Fatalf("no ServiceMonitor")
	}
	jobRE := alertJobs(t)
	scraped := map[string]bool{}
	for mname, m := range c.monitors {
		for _, sname := range slices.Sorted(maps.Keys(c.services)) {
			svc := c.services[sname]
			if !selects(t, &m.Spec.Selector, svc.Labels) {
				continue
			}
			if m.Spec.JobLabel != "" {
				t.Errorf("ServiceMonitor %s: jobLabel %q changes the job label from the Service's name, which the alert rules use", mname, m.Spec.JobLabel)
			}
			if !jobRE.MatchString(sname) {
				t.Errorf("ServiceMonitor %s scrapes Service %s, whose job name the alert rules (%s) do not watch", mname, sname, jobRE)
			}
			w := c.deployment(t, sname)
			for _, ep := range m.Spec.Endpoints {
				i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
				if i < 0 {
					t.Errorf("ServiceMonitor %s: Service %s has no port %q", mname, sname, ep.Port)
					continue
				}
				if got := containerPortOf(t, w, svc.Spec.Ports[i].TargetPort); got != adminPorts[sname] {
					t.Errorf("ServiceMonitor %s scrapes %s on port %d, but /metrics is on the admin listener, port %d", mname, sname, got, adminPorts[sname])
				}
				if ep.Path != "" && ep.Path != "/metrics" {
					t.Errorf("ServiceMonitor %s: path %q, want /metrics", mname, ep.Path)
				}
				if a := ep.Authorization; a == nil || a.Credentials == nil {
					t.Errorf("ServiceMonitor %s: no bearer token: /metrics needs the admin token", mname)
				} else if s, ok := c.secrets[a.Credentials.Name]; !ok {
					t.Errorf("ServiceMonitor %s: Secret %s is not in the kustomization", mname, a.Credentials.Name)
				} else if _, ok := s.StringData[a.Credentials.Key]; !ok {
					if _, ok := s.Data[a.Credentials.Key]; !ok {
						t.Errorf("ServiceMonitor %s: Secret %s has no key %s", mname, s.Name, a.Credentials.Key)
					}
				}
				scraped[sname] = true
			}
		}
	}
	for _, name := range []string{gatewayName, workerName} {
		if !scraped[name] {
			t.Errorf("no ServiceMonitor scrapes Service %s", name)
		}
	}
}

// alertJobs is the job names the alert rules watch, from IdemgateTargetDown's
// up{job=~"…"}.
func alertJobs(t *testing.T) *regexp.Regexp {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, "deploy/prometheus/alerts.yml"), &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if m := regexp.MustCompile(`up\{job=~"([^"]+)"\}`).FindStringSubmatch(r.Expr); m != nil {
				return regexp.MustCompile("^(?:" + m[1] + ")$")
			}
		}
	}
	t.Fatal(`deploy/prometheus/alerts.yml: no rule on up{job=~"…"}`)
	return nil
}

func wantHTTPProbe(t *testing.T, w workload, what string, p *corev1.Probe, path string, port int) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP %s probe", w.name, what)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: %s probe on %s, want %s", w.name, what, p.HTTPGet.Path, path)
	}
	if got := containerPortOf(t, w, p.HTTPGet.Port); got != port {
		t.Errorf("%s: %s probe on port %d, but %s is served on %d", w.name, what, got, path, port)
	}
	if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		t.Errorf("%s: %s probe over HTTPS, but the configuration has no TLS", w.name, what)
	}
}

// TestKubernetesOverlay: the example overlay changes what it says it
// changes, and nothing escapes its namespace.
func TestKubernetesOverlay(t *testing.T) {
	t.Parallel()
	base, ov := render(t, rootKustomization), render(t, exampleKustomization)
	if _, ok := ov.namespaces["idemgate"]; !ok {
		t.Errorf("the overlay does not create its namespace idemgate")
	}
	for _, o := range ov.objects {
		if !o.clusterScoped && o.namespace != "idemgate" {
			t.Errorf("%s %s is in namespace %q, want idemgate", o.kind, o.name, o.namespace)
		}
	}
	for _, w := range ov.workloads(t) {
		if w.ctr.Image != "registry.example.com/idemgate:1.0.0" {
			t.Errorf("%s: image %q, want the overlay's registry.example.com/idemgate:1.0.0", w.name, w.ctr.Image)
		}
	}
	if got, was := deref(ov.deployments[workerName].Spec.Replicas), deref(base.deployments[workerName].Spec.Replicas); got != int32(4) || got == was {
		t.Errorf("worker replicas %v (base %v), want the overlay's 4", got, was)
	}
	w := ov.deployment(t, workerName)
	if got := w.ctr.Resources.Requests.Cpu().String(); got != "1" {
		t.Errorf("worker CPU request %s, want the overlay's 1", got)
	}
	if !slices.Equal(w.ctr.Args, base.deployment(t, workerName).ctr.Args) || len(w.ctr.Env) != len(base.deployment(t, workerName).ctr.Env) {
		t.Errorf("the overlay's worker patch replaced the container instead of merging into it")
	}
	if h := ov.hpas[gatewayName]; h == nil || deref(h.Spec.MinReplicas) != int32(3) || h.Spec.MaxReplicas != 20 {
		t.Errorf("gateway autoscaler %v, want the overlay's 3 to 20", h)
	}
}

// TestGatewayServesProbePaths starts a gateway and asks it for every path
// the gateway Deployment's probes use: each must answer 200.
func TestGatewayServesProbePaths(t *testing.T) {
	t.Parallel()
	gw := render(t, rootKustomization).deployment(t, gatewayName)
	var paths []string
	for _, p := range []*corev1.Probe{gw.ctr.LivenessProbe, gw.ctr.ReadinessProbe, gw.ctr.StartupProbe} {
		if p != nil && p.HTTPGet != nil {
			paths = append(paths, p.HTTPGet.Path)
		}
	}
	if len(paths) == 0 {
		t.Fatal("the gateway has no HTTP probes")
	}
	base := startGateway(t)
	for _, p := range paths {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s, want 200 from a gateway whose store is up", p, resp.Status)
		}
	}
}

// startGateway runs `idemgate serve` on a loopback port with the memory
// store, which needs no service, and returns its public URL.
func startGateway(t *testing.T) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "idemgate.yaml")
	err := os.WriteFile(conf, []byte(`listen: "127.0.0.1:0"
admin_listen: ""
store: memory
auth: {mode: none}
routes:
  - {name: probe, path_prefix: /v1/, upstream: "http://127.0.0.1:9"}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, idemgateBin, "serve", "--config", conf, "--log-format", "json")
	cmd.Env = []string{}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	urls := make(chan string, 1)
	go func() {
		defer close(urls)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var line struct{ Msg, Listener, URL string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" && line.Listener == "public" {
				urls <- line.URL
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatal("idemgate serve exited before listening")
		}
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("idemgate serve did not announce its public listener within 30s")
	}
	return ""
}
