package manifests

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// cluster is what a kustomization renders, each object decoded into its
// Kubernetes type.
type cluster struct {
	dir         string
	objects     []object
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	secrets     map[string]*corev1.Secret
	configMaps  map[string]*corev1.ConfigMap
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	jobs        map[string]*batchv1.Job
	monitors    map[string]*monitoringv1.ServiceMonitor
	namespaces  map[string]*corev1.Namespace
}

type object struct {
	kind, name, namespace string
	clusterScoped         bool
}

// newObject is a new value of the Go type of an apiVersion and kind,
// kept in c under name, or nil for a kind these tests do not know (which
// fails them: every object is checked).
func (c *cluster) newObject(apiVersion, kind, name string) any {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return keep(&c.namespaces, name)
	case "v1 Secret":
		return keep(&c.secrets, name)
	case "v1 ConfigMap":
		return keep(&c.configMaps, name)
	case "v1 Service":
		return keep(&c.services, name)
	case "apps/v1 Deployment":
		return keep(&c.deployments, name)
	case "batch/v1 Job":
		return keep(&c.jobs, name)
	case "policy/v1 PodDisruptionBudget":
		return keep(&c.pdbs, name)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return keep(&c.hpas, name)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return keep(&c.monitors, name)
	}
	return nil
}

// keep is a new T, kept in *m under name.
func keep[T any](m *map[string]*T, name string) *T {
	if *m == nil {
		*m = map[string]*T{}
	}
	o := new(T)
	(*m)[name] = o
	return o
}

// render builds a kustomization with kustomize's Go API, as `kubectl
// kustomize` does, and decodes every object strictly.
func render(t *testing.T, dir string) *cluster {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), repoPath(dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	c := &cluster{dir: dir}
	for _, r := range resMap.Resources() {
		kind, name := r.GetKind(), r.GetName()
		data, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s %s: %v", dir, kind, name, err)
		}
		obj := c.newObject(r.GetApiVersion(), kind, name)
		if obj == nil {
			t.Errorf("%s: %s %s (%s) is a kind these tests do not check: add it to newObject", dir, kind, name, r.GetApiVersion())
			continue
		}
		if err := decodeStrict(data, obj); err != nil {
			t.Errorf("%s: %s %s does not decode strictly as %T: %v", dir, kind, name, obj, err)
			continue
		}
		c.objects = append(c.objects, object{kind: kind, name: name, namespace: r.GetNamespace(), clusterScoped: kind == "Namespace"})
	}
	if t.Failed() {
		t.FailNow()
	}
	return c
}

// workload is a pod template with its one container.
type workload struct {
	name string
	pod  *corev1.PodSpec
	ctr  *corev1.Container
}

func (c *cluster) deployment(t *testing.T, name string) workload {
	t.Helper()
	d, ok := c.deployments[name]
	if !ok {
		t.Fatalf("%s renders no Deployment %s", c.dir, name)
	}
	return onlyContainer(t, "Deployment "+name, &d.Spec.Template.Spec)
}

func (c *cluster) job(t *testing.T, name string) workload {
	t.Helper()
	j, ok := c.jobs[name]
	if !ok {
		t.Fatalf("%s renders no Job %s", c.dir, name)
	}
	return onlyContainer(t, "Job "+name, &j.Spec.Template.Spec)
}

func onlyContainer(t *testing.T, what string, pod *corev1.PodSpec) workload {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%s has %d containers, want the one idemgate container", what, len(pod.Containers))
	}
	return workload{name: what, pod: pod, ctr: &pod.Containers[0]}
}

// workloads are every pod template of the kustomization.
func (c *cluster) workloads(t *testing.T) []workload {
	var ws []workload
	for _, name := range slices.Sorted(maps.Keys(c.deployments)) {
		ws = append(ws, c.deployment(t, name))
	}
	for _, name := range slices.Sorted(maps.Keys(c.jobs)) {
		ws = append(ws, c.job(t, name))
	}
	return ws
}

// env is the container's environment as the kubelet would set it, the
// Secrets' and ConfigMaps' values looked up; a reference to a missing
// Secret or key is an error.
func (c *cluster) env(t *testing.T, w workload) map[string]string {
	t.Helper()
	env := map[string]string{}
	secretValue := func(name, key string) (string, bool) {
		s, ok := c.secrets[name]
		if !ok {
			return "", false
		}
		if v, ok := s.StringData[key]; ok {
			return v, true
		}
		v, ok := s.Data[key]
		return string(v), ok
	}
	for _, from := range w.ctr.EnvFrom {
		switch {
		case from.SecretRef != nil:
			s, ok := c.secrets[from.SecretRef.Name]
			if !ok {
				t.Errorf("%s: envFrom names Secret %s, which the kustomization does not have", w.name, from.SecretRef.Name)
				continue
			}
			for k, v := range s.StringData {
				env[from.Prefix+k] = v
			}
			for k, v := range s.Data {
				env[from.Prefix+k] = string(v)
			}
		case from.ConfigMapRef != nil:
			cm, ok := c.configMaps[from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom names ConfigMap %s, which the kustomization does not have", w.name, from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		}
	}
	for _, e := range w.ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secretValue(ref.Name, ref.Key)
			if !ok {
				t.Errorf("%s: env %s: the Secret %s has no key %s", w.name, e.Name, ref.Name, ref.Key)
				continue
			}
			env[e.Name] = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := c.configMaps[ref.Name].Data[ref.Key]
			if !ok {
				t.Errorf("%s: env %s: the ConfigMap %s has no key %s", w.name, e.Name, ref.Name, ref.Key)
				continue
			}
			env[e.Name] = v
		default:
			t.Errorf("%s: env %s: a source these tests cannot resolve", w.name, e.Name)
		}
	}
	return env
}

// configFile is the file a container's --config names, read from the
// ConfigMap mounted at its directory; "" when the command has no --config.
func (c *cluster) configFile(t *testing.T, w workload) (name string, data []byte) {
	t.Helper()
	args := append(slices.Clone(w.ctr.Command), w.ctr.Args...)
	i := slices.Index(args, "--config")
	if i < 0 {
		return "", nil
	}
	if i+1 >= len(args) {
		t.Fatalf("%s: --config without a file", w.name)
	}
	file := args[i+1]
	for _, m := range w.ctr.VolumeMounts {
		if path.Dir(file) != path.Clean(m.MountPath) {
			continue
		}
		for _, v := range w.pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.ConfigMap == nil {
				t.Fatalf("%s: %s is on volume %s, which is not a ConfigMap", w.name, file, v.Name)
			}
			cm, ok := c.configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("%s: volume %s names ConfigMap %s, which the kustomization does not have", w.name, v.Name, v.ConfigMap.Name)
			}
			data, ok := cm.Data[path.Base(file)]
			if !ok {
				t.Fatalf("%s: ConfigMap %s has no key %s for --config %s", w.name, cm.Name, path.Base(file), file)
			}
			return cm.Name + "/" + path.Base(file), []byte(data)
		}
		t.Fatalf("%s: volume mount %s has no volume", w.name, m.Name)
	}
	t.Fatalf("%s: --config %s: no volume is mounted at %s", w.name, file, path.Dir(file))
	return "", nil
}

// containerPortOf resolves a probe's or Service's port (a name or a
// number) to one of the container's ports.
func containerPortOf(t *testing.T, w workload, port intstr.IntOrString) int {
	t.Helper()
	for _, p := range w.ctr.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return int(p.ContainerPort)
		}
	}
	t.Errorf("%s: port %s is not one of the container's ports", w.name, port.String())
	return 0
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// podsSelectedBy names the workloads whose pods a selector matches.
func (c *cluster) podsSelectedBy(t *testing.T, sel *metav1.LabelSelector) []string {
	t.Helper()
	var names []string
	for _, name := range slices.Sorted(maps.Keys(c.deployments)) {
		if selects(t, sel, c.deployments[name].Spec.Template.Labels) {
			names = append(names, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.jobs)) {
		if selects(t, sel, c.jobs[name].Spec.Template.Labels) {
			names = append(names, name)
		}
	}
	return names
}

// imageName is an image reference without its registry, tag or digest.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return path.Base(ref)
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}
