package config

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/config/internal/strictyaml"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/internal/yamljson"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers"
)

// Job declares one job: the payload a route accepts (its JSON Schema), the
// identity it forms and how the worker runs it. Config.Jobs returns the
// compiled form.
type Job struct {
	// Task is the asynq task type: required, unique, [a-z0-9_.:-]+.
	Task string `yaml:"task"`
	// Queue is where the job goes unless its route names another; it must
	// be one of worker.queues. Default workers.DefaultQueue, "default".
	Queue string `yaml:"queue"`
	// Schema is the payload's JSON Schema (draft 2020-12) written inline,
	// in YAML or JSON. Exactly one of Schema and SchemaFile.
	Schema yaml.Node `yaml:"schema"`
	// SchemaFile is a JSON or YAML file holding the schema, relative to
	// the configuration file's directory.
	SchemaFile string `yaml:"schema_file"`
	// BusinessKey is a template ("shipment:{order_id}") of the job's
	// identity. Required. Every field it names must be required by the
	// schema, so that every valid payload forms a key.
	BusinessKey string `yaml:"business_key"`
	// Resource is a template of the entity the worker locks and fences on
	// ("order:{order_id}"). Default none: no lock, no fencing token.
	Resource string `yaml:"resource"`
	// MaxAttempts counts real attempts. Default worker.max_attempts.
	MaxAttempts int `yaml:"max_attempts"`
	// Delay is how long after it is accepted a job runs when its request
	// sends no Idemgate-Delay or Idemgate-Not-Before. Default 0: at once.
	Delay time.Duration `yaml:"delay"`
	// MaxDelay bounds how far ahead a request may schedule the job; a
	// later schedule is refused with 422 schedule-out-of-range. Default
	// job.DefaultMaxDelay, 720h.
	MaxDelay *time.Duration `yaml:"max_delay"`
	// Deliver, when set, delivers the job over HTTP; nil means a Go
	// handler registered in code runs it.
	Deliver *Deliver `yaml:"deliver"`
	// Limits are the declared limits (limits:) each attempt takes first,
	// all or none. Default none.
	Limits []LimitUse `yaml:"limits"`
	// OnFinal, when set, POSTs one signed event per final status the job
	// reaches (see OnFinal). Default none.
	OnFinal *OnFinal `yaml:"on_final"`
	// Fairness names the pool under fairness the job's tasks wait in, so
	// that tenants share the workers by weight. Default none: a task goes
	// to its queue at once, first come first served.
	Fairness string `yaml:"fairness"`
	// Priority is the job's tier in its fairness pool: a higher tier is
	// dispatched first, whatever the tenants' shares. Default 0. It needs
	// fairness.
	Priority int `yaml:"priority"`
	// Debounce, when set, folds the submits under one debounce key into
	// one pending job. Default none: every submit is a job.
	Debounce *Debounce `yaml:"debounce"`
}

// Deliver says how the worker hands a job over.
type Deliver struct {
	// HTTP POSTs the job to a receiver (the HTTP delivery contract).
	HTTP *DeliverHTTP `yaml:"http"`
}

// DeliverHTTP is deliver.http: where the worker POSTs a job and how it
// signs it.
type DeliverHTTP struct {
	// URL is the receiver's absolute http:// or https:// URL. Required.
	URL string `yaml:"url"`
	// Secret is "whsec_" + the base64 of at least 16 random bytes (the
	// Standard Webhooks form), or several such secrets separated by
	// spaces while one rotates: each signs every delivery. Required.
	Secret string `yaml:"secret"`
	// Timeout bounds one attempt. Default 30s.
	Timeout *time.Duration `yaml:"timeout"`
	// Headers are added to every delivery. They may not replace the
	// headers the delivery sets itself (Content-Type, webhook-*,
	// Idempotency-*, Idemgate-*, traceparent).
	Headers map[string]string `yaml:"headers"`
}

// Option changes how Load and Parse read a configuration.
type Option func(*options)

type options struct {
	// dir is where schema_file paths start.
	dir string
	// defaults are the WithDefaultJobs documents, in the order given.
	defaults [][]byte
	// handlers are the tasks with a Go handler; nil means not checked.
	handlers map[string]bool
	// defaultsErr says why defaults could not be read.
	defaultsErr error
	// settings are the keys the program claims (WithSettings).
	settings []extension.Setting
}

// WithSettings lets the file hold the configuration keys a program built
// on idemgate claims (extension.WithSetting): each is read as a string,
// given to its Set (or its default, when the file has none), and what Set
// finds wrong is reported at the key's line like any other mistake. A
// claimed key is none of idemgate's own.
func WithSettings(settings ...extension.Setting) Option {
	return func(o *options) { o.settings = append(o.settings, settings...) }
}

// WithDefaultJobs supplies jobs for the routes that name a task the
// configuration does not declare: yamlDoc is a YAML document with a
// top-level jobs: list, in the form of the configuration's own, with
// inline schemas only. Only the jobs a route names are added; they are
// compiled and checked like declared ones, and their problems are
// reported at the route. This keeps configurations that predate jobs:,
// and name the example tasks, working. Given more than once, every
// document counts; a task two of them declare takes the first's.
func WithDefaultJobs(yamlDoc []byte) Option {
	return func(o *options) { o.defaults = append(o.defaults, yamlDoc) }
}

// WithHandlers names the tasks this program has a Go handler for. Given
// this option, a job without deliver.http whose task is not among them is
// a problem: nothing could run it. Without it (the gateway runs no jobs)
// that is not checked.
func WithHandlers(tasks ...string) Option {
	return func(o *options) {
		o.handlers = map[string]bool{}
		for _, t := range tasks {
			o.handlers[t] = true
		}
	}
}

func newOptions(name string, opts []Option) *options {
	o := &options{dir: filepath.Dir(name)}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// defaultJob is a job of WithDefaultJobs that a route names.
type defaultJob struct {
	Job
	// route is the index of the first route that names it: its problems
	// are reported there.
	route int
}

// Jobs returns the compiled jobs: those of jobs:, in declaration order,
// then the default jobs the routes name. The slice is the caller's; the
// specs are shared and must not be changed.
func (c *Config) Jobs() []*job.Spec { return slices.Clone(c.specs) }

// Job returns the compiled job whose task is task.
func (c *Config) Job(task string) (*job.Spec, bool) {
	for _, s := range c.specs {
		if s.Task == task {
			return s, true
		}
	}
	return nil, false
}

// jobDefaults fills the jobs' defaults, picks the default jobs the routes
// need, and gives each enqueue route without a queue its job's queue. It
// runs after the worker's defaults, which a job's max_attempts inherits.
func (c *Config) jobDefaults(o *options) {
	for i := range c.DeclaredJobs {
		c.DeclaredJobs[i].withDefaults(c.Worker.MaxAttempts)
	}
	var defaults []Job
	for _, doc := range o.defaults {
		jobs, err := parseDefaultJobs(doc)
		o.defaultsErr = errors.Join(o.defaultsErr, err)
		defaults = append(defaults, jobs...)
	}
	c.defaulted = nil
	for i := range c.Routes {
		e := c.Routes[i].Enqueue
		if e == nil {
			continue
		}
		queue, declared := "", false
		if e.Task == "" {
			// No job: the route's problem says so.
		} else if j := c.declared(e.Task); j != nil {
			queue, declared = j.Queue, true
		} else if j := c.defaultJob(e.Task); j != nil {
			queue = j.Queue
		} else if k := slices.IndexFunc(defaults, func(j Job) bool { return j.Task == e.Task }); k >= 0 {
			d := defaultJob{Job: defaults[k], route: i}
			d.withDefaults(c.Worker.MaxAttempts)
			c.defaulted = append(c.defaulted, d)
			queue = d.Queue
		}
		if e.Queue == "" {
			e.Queue = cmp.Or(queue, workers.DefaultQueue)
			// A declared job's queue is checked where it is written.
			e.queueFromJob = declared
		}
	}
}

func (j *Job) withDefaults(maxAttempts int) {
	setDefault(&j.Queue, workers.DefaultQueue)
	setDefault(&j.MaxAttempts, maxAttempts)
	if j.MaxDelay == nil {
		j.MaxDelay = new(job.DefaultMaxDelay)
	}
	if j.Deliver != nil && j.Deliver.HTTP != nil && j.Deliver.HTTP.Timeout == nil {
		j.Deliver.HTTP.Timeout = new(job.DefaultTimeout)
	}
	if j.OnFinal != nil && j.OnFinal.HTTP != nil {
		if j.OnFinal.HTTP.Timeout == nil {
			j.OnFinal.HTTP.Timeout = new(job.DefaultTimeout)
		}
		setDefault(&j.OnFinal.HTTP.MaxAttempts, job.DefaultCallbackMaxAttempts)
	}
}

func (c *Config) declared(task string) *Job {
	for i := range c.DeclaredJobs {
		if c.DeclaredJobs[i].Task == task {
			return &c.DeclaredJobs[i]
		}
	}
	return nil
}

func (c *Config) defaultJob(task string) *Job {
	for i := range c.defaulted {
		if c.defaulted[i].Task == task {
			return &c.defaulted[i].Job
		}
	}
	return nil
}

// parseDefaultJobs reads a WithDefaultJobs document.
func parseDefaultJobs(doc []byte) ([]Job, error) {
	var d struct {
		Jobs []Job `yaml:"jobs"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("the default jobs do not parse: %s", strictyaml.ErrorText(err))
	}
	return d.Jobs, nil
}

// taskProblem says what is wrong with the task an enqueue route names, or
// "" when a job declares it.
func (c *Config) taskProblem(task string) string {
	if task == "" {
		return "required: the task of a job declared under jobs"
	}
	if c.declared(task) != nil || c.defaultJob(task) != nil {
		return ""
	}
	var known []string
	for _, j := range c.DeclaredJobs {
		if j.Task != "" && !slices.Contains(known, j.Task) {
			known = append(known, j.Task)
		}
	}
	if len(known) == 0 {
		return fmt.Sprintf("%q is not a declared job; declare it under jobs", task)
	}
	return fmt.Sprintf("%q is not a declared job; declare it under jobs (declared: %s)", task, strings.Join(known, ", "))
}

// validateJobs checks every job and compiles those routes use or jobs:
// declares; the compiled specs are kept for Jobs.
func (c *Config) validateJobs(bad badFunc, o *options) {
	if o.defaultsErr != nil {
		bad("", "%v", o.defaultsErr)
	}
	var specs []*job.Spec
	tasks := map[string]int{}
	for i := range c.DeclaredJobs {
		j := &c.DeclaredJobs[i]
		at := fmt.Sprintf("jobs[%d]", i)
		switch {
		case j.Task == "":
			bad(at+".task", "required: the asynq task type, like shipment.book")
		case !validTask(j.Task):
			bad(at+".task", "%q may only contain a-z, 0-9, '_', '.', ':' and '-'", j.Task)
		default:
			distinct(bad, tasks, "jobs", i, "task", j.Task)
		}
		switch err := workers.CheckQueueName(j.Queue); {
		case err != nil:
			bad(at+".queue", "%v", err)
		case len(c.Worker.Queues) > 0 && c.Worker.Queues[j.Queue] == 0:
			bad(at+".queue", "%q is not in worker.queues, so no worker would run its jobs", j.Queue)
		}
		if s := c.checkJob(j, at, o, bad); s != nil {
			specs = append(specs, s)
		}
	}
	for _, d := range c.defaulted {
		routeKey := fmt.Sprintf("routes[%d].enqueue.task", d.route)
		at := "default"
		// A default job is not in the file: its problems are the route's.
		atRoute := func(key, format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			if sub, ok := strings.CutPrefix(key, at+"."); ok {
				msg = sub + ": " + msg
			}
			bad(routeKey, "default job %q: %s", d.Task, msg)
		}
		if d.SchemaFile != "" {
			atRoute(at+".schema_file", "a default job's schema must be inline")
			continue
		}
		if s := c.checkJob(&d.Job, at, o, atRoute); s != nil {
			specs = append(specs, s)
		}
	}
	c.specs = specs
}

// checkJob checks what a declared and a default job have in common and
// returns the compiled spec, or nil after a problem.
func (c *Config) checkJob(j *Job, at string, o *options, bad badFunc) *job.Spec {
	failed := false
	fail := func(key, format string, args ...any) {
		failed = true
		bad(key, format, args...)
	}
	spec := &job.Spec{Task: j.Task, Queue: j.Queue, MaxAttempts: j.MaxAttempts}
	spec.Schema = j.schema(at, o.dir, fail)

	var err error
	if j.BusinessKey == "" {
		fail(at+".business_key", `required: a template of the job's identity, like "shipment:{order_id}"`)
	} else if spec.BusinessKey, err = job.ParseTemplate(j.BusinessKey); err != nil {
		fail(at+".business_key", "%v", err)
	} else {
		requireFields(spec.Schema, spec.BusinessKey, at+".business_key", fail)
	}
	if j.Resource != "" {
		if spec.Resource, err = job.ParseTemplate(j.Resource); err != nil {
			fail(at+".resource", "%v", err)
		} else {
			requireFields(spec.Schema, spec.Resource, at+".resource", fail)
		}
	}
	nonNegative(fail, at+".max_attempts", j.MaxAttempts)
	spec.Delay = j.Delay
	if j.MaxDelay != nil {
		spec.MaxDelay = *j.MaxDelay
	}
	switch {
	case j.Delay < 0:
		fail(at+".delay", "must not be negative, not %s", j.Delay)
	case spec.MaxDelay <= 0:
		fail(at+".max_delay", "must be positive, not %s", spec.MaxDelay)
	case j.Delay > spec.MaxDelay:
		fail(at+".delay", "%s is above max_delay %s", j.Delay, spec.MaxDelay)
	}
	spec.Limits = c.jobLimits(j, spec.Schema, at, fail)
	spec.Debounce = jobDebounce(j, spec.Schema, at, fail)
	spec.Fairness, spec.Priority = j.Fairness, j.Priority
	if j.Fairness != "" {
		if p := c.fairnessProblem(j.Fairness); p != "" {
			fail(at+".fairness", "%s", p)
		}
	} else if j.Priority != 0 {
		fail(at+".priority", "orders the job within its fairness pool; it needs fairness")
	}

	if j.Deliver != nil {
		if j.Deliver.HTTP == nil {
			fail(at+".deliver", "needs http (leave deliver out to run the job with a Go handler)")
		} else {
			spec.HTTP = deliverHTTP(j.Deliver.HTTP, at+".deliver.http", fail)
		}
	} else if o.handlers != nil && !o.handlers[j.Task] && j.Task != "" {
		fail(at+".task", "no worker can run %q: declare deliver.http or register a Go handler for it", j.Task)
	}
	if j.OnFinal != nil {
		spec.OnFinal = onFinal(j.OnFinal, at+".on_final", fail)
	}
	if failed {
		return nil
	}
	return spec
}

// schema reads and compiles the job's schema; nil after a problem.
func (j *Job) schema(at, dir string, bad badFunc) *job.Schema {
	inline := j.Schema.Kind != 0 && !(j.Schema.Kind == yaml.ScalarNode && j.Schema.ShortTag() == "!!null")
	switch {
	case inline && j.SchemaFile != "":
		bad(at+".schema_file", "schema and schema_file exclude each other; keep one")
		return nil
	case inline:
		doc, err := yamljson.Convert(&j.Schema)
		if err != nil {
			bad(at+".schema", "%v", err)
			return nil
		}
		s, err := job.CompileSchema(doc, at+".schema")
		if err != nil {
			bad(at+".schema", "%s", strings.TrimPrefix(err.Error(), at+".schema: "))
			return nil
		}
		return s
	case j.SchemaFile != "":
		path := j.SchemaFile
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		// Problems name the file as the configuration does.
		doc, err := readSchemaFile(path, j.SchemaFile)
		if err != nil {
			bad(at+".schema_file", "%v", err)
			return nil
		}
		s, err := job.CompileSchema(doc, j.SchemaFile)
		if err != nil {
			bad(at+".schema_file", "%v", err)
			return nil
		}
		return s
	}
	bad(at, "needs schema or schema_file: the JSON Schema of the payload")
	return nil
}

// maxSchemaBytes bounds a schema file: a schema is a page of text, and
// the file is read whole on every start.
const maxSchemaBytes = 1 << 20

// readSchemaFile reads a schema file as JSON, converting it from YAML
// when it is not JSON. name is the file as the configuration names it.
func readSchemaFile(path, name string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read %s: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSchemaBytes+1))
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read %s: %w", name, err)
	}
	if len(data) > maxSchemaBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxSchemaBytes)
	}
	if json.Valid(data) {
		return data, nil
	}
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("%s is neither JSON nor YAML: %s", name, strictyaml.ErrorText(err))
	}
	doc, err := yamljson.Convert(&n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return doc, nil
}

// requireFields reports each field of t the schema does not require: a
// valid payload without it could not form the key.
func requireFields(s *job.Schema, t job.Template, key string, bad badFunc) {
	if s == nil {
		return // the schema's own problem explains it
	}
	for _, f := range t.Fields() {
		if s.Requires(f) {
			continue
		}
		if strings.Contains(f, ".") {
			bad(key, `{%s} names a field the schema does not require: add each name on the path %q to "required" of its object`, f, f)
		} else {
			bad(key, `{%s} names a field the schema does not require: add %q to the schema's "required"`, f, f)
		}
	}
}

// reservedHeader reports whether a delivery sets the header (lower case)
// itself, so that a static header may not replace it.
func reservedHeader(lower string) bool {
	switch lower {
	case "content-type", "content-length", "host", "connection", "transfer-encoding", "traceparent", "tracestate":
		return true
	}
	for _, prefix := range []string{"webhook-", "idempotency-", "idemgate-"} {
		if strings.HasPrefix(lower, prefix) {
			return true
		}
	}
	return false
}

// deliverHTTP checks deliver.http and returns its compiled form. Neither
// the URL nor a secret nor a header value is echoed: each may hold a
// credential.
func deliverHTTP(h *DeliverHTTP, at string, bad badFunc) *job.HTTP {
	out := &job.HTTP{URL: h.URL, Headers: map[string]string{}}
	if h.URL == "" {
		bad(at+".url", "required: the receiver's http:// or https:// URL")
	} else if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad(at+".url", "must be an absolute http:// or https:// URL with a host")
	}
	out.Secrets = secrets(h.Secret, at+".secret", bad)
	if h.Timeout != nil {
		if *h.Timeout <= 0 {
			bad(at+".timeout", "must be positive, not %s", *h.Timeout)
		}
		out.Timeout = *h.Timeout
	}
	names := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(h.Headers)) {
		key := strictyaml.Join(at+".headers", name)
		lower := strings.ToLower(name)
		switch {
		case !isToken(name):
			bad(key, "%q is not a header name", name)
			continue
		case reservedHeader(lower):
			bad(key, "%s is set by every delivery; a static header cannot replace it", name)
			continue
		case names[lower] != "":
			bad(key, "the same header as %s", names[lower])
			continue
		}
		names[lower] = name
		if strings.ContainsFunc(h.Headers[name], func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			bad(key, "the value holds a line break or another control character")
			continue
		}
		out.Headers[name] = h.Headers[name]
	}
	return out
}

// secrets decodes "whsec_<base64>" secrets, separated by spaces.
func secrets(s, key string, bad badFunc) [][]byte {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		bad(key, `required: "whsec_" followed by the base64 of at least 16 random bytes; receivers verify webhook-signature with it`)
		return nil
	}
	var out [][]byte
	for i, f := range fields {
		which := "the secret"
		if len(fields) > 1 {
			which = fmt.Sprintf("secret %d of %d", i+1, len(fields))
		}
		b64, ok := strings.CutPrefix(f, "whsec_")
		if !ok {
			bad(key, `%s does not start with "whsec_" (a Standard Webhooks secret)`, which)
			continue
		}
		k, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			k, err = base64.RawStdEncoding.DecodeString(b64)
		}
		switch {
		case err != nil:
			bad(key, `%s is not "whsec_" followed by base64`, which)
		case len(k) < 16:
			bad(key, "%s decodes to %d bytes; use at least 16 random bytes", which, len(k))
		default:
			out = append(out, k)
		}
	}
	return out
}

// validTask checks a task type: [a-z0-9_.:-]+.
func validTask(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_.:-", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
