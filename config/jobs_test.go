package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// exampleTasks are the tasks idemgate has Go handlers for.
var exampleTasks = []string{"invoice.create", "inventory.adjust", "payment.charge", "notification.send"}

// exampleJobs is the declaration of the example jobs the idemgate binary
// passes to WithDefaultJobs.
func exampleJobs(t testing.TB) []byte {
	t.Helper()
	doc, err := os.ReadFile("../examples/jobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// enqueueBase is a valid configuration with a Redis URL, for enqueue routes.
const enqueueBase = minimal + "redis_url: redis://r:6379\n"

// secret is a valid webhook secret: "whsec_" + base64 of 24 bytes.
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestJobsOfValid(t *testing.T) {
	t.Parallel()
	// The options of idemgate worker: the example tasks have Go handlers.
	cfg, err := Load("testdata/valid.yaml", env(runEnv), WithDefaultJobs(exampleJobs(t)), WithHandlers(exampleTasks...), WithSettings(partnerSetting(new(string))))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	var tasks []string
	for _, s := range cfg.Jobs() {
		tasks = append(tasks, s.Task)
	}
	want := []string{"shipment.book", "label.print", "shipment.cancel", "invoice.create", "inventory.adjust", "payment.charge", "notification.send"}
	if !slices.Equal(tasks, want) {
		t.Fatalf("Jobs() tasks = %q, want the declared ones, then the default ones in route order: %q", tasks, want)
	}

	ship, ok := cfg.Job("shipment.book")
	if !ok {
		t.Fatal(`Job("shipment.book") not found`)
	}
	if ship.Queue != "default" || ship.MaxAttempts != 6 || ship.BusinessKey.String() != "shipment:{order_id}:{customer.id}" || ship.Resource.String() != "order:{order_id}" {
		t.Errorf("shipment.book = %+v", ship)
	}
	h := ship.HTTP
	if h == nil || h.URL != "https://ship.internal/hooks/shipments" || h.Timeout != 10*time.Second ||
		len(h.Secrets) != 2 || string(h.Secrets[1]) != "secret-for-tests-1234" || len(h.Secrets[0]) != 24 ||
		h.Headers["X-Api-Key"] != "dev-ship-key" || len(h.Headers) != 1 {
		t.Errorf("shipment.book deliver.http = %+v", h)
	}
	p, err := ship.Decode([]byte(`{"order_id": "o-1", "quantity": 2, "customer": {"id": "c-7"}}`))
	if err != nil || p.BusinessKey != "shipment:o-1:c-7" || p.Resource != "order:o-1" {
		t.Errorf("shipment.book Decode = %+v, %v", p, err)
	}
	if _, err := ship.Decode([]byte(`{"order_id": "o-1", "quantity": 0, "customer": {"id": "c", "email": "nope"}}`)); err == nil ||
		err.Error() != "invalid payload: customer.email: must be a valid email; quantity: must be at least 1" {
		t.Errorf("an invalid shipment: %v", err)
	}

	label, _ := cfg.Job("label.print")
	if !label.Resource.IsZero() || label.MaxAttempts != 10 || label.Queue != "default" {
		t.Errorf("label.print = %+v; want the worker's max_attempts and no resource", label)
	}
	if inv, _ := cfg.Job("invoice.create"); inv.HTTP != nil {
		t.Errorf("invoice.create delivers over HTTP (%+v); want its Go handler", inv.HTTP)
	}
	if _, err := label.Decode([]byte(`{"label_id": "x"}`)); err == nil || !strings.Contains(err.Error(), "label_id: must match the pattern") {
		t.Errorf("the YAML schema file is not applied: %v", err)
	}
	cancel, _ := cfg.Job("shipment.cancel")
	if cancel.HTTP == nil || cancel.HTTP.Timeout != job.DefaultTimeout || len(cancel.HTTP.Secrets) != 1 {
		t.Errorf("shipment.cancel deliver.http = %+v; want the default timeout", cancel.HTTP)
	}
	if got := string(cancel.Schema.JSON()); got != `{"type":"object","required":["order_id"],"properties":{"order_id":{"type":"string"},"reason":{"enum":["customer","fraud"]}}}` {
		t.Errorf("the inline schema as JSON = %s", got)
	}

	inv, ok := cfg.Job("invoice.create")
	if !ok {
		t.Fatal(`Job("invoice.create"): the default job is missing`)
	}
	p, err = inv.Decode([]byte(`{"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}`))
	if err != nil || p.BusinessKey != "invoice:o-1" || p.Resource != "order:o-1" || inv.MaxAttempts != 10 {
		t.Errorf("invoice.create Decode = %+v, %v", p, err)
	}
	notify, _ := cfg.Job("notification.send")
	p, err = notify.Decode([]byte(`{"event_id": "e-1", "user_id": "u-1", "template": "welcome"}`))
	if err != nil || p.BusinessKey != "email:welcome:u-1:e-1" || p.Resource != "user:u-1" {
		t.Errorf("notification.send Decode = %+v, %v", p, err)
	}
	if _, ok := cfg.Job("nope"); ok {
		t.Error(`Job("nope") found a job`)
	}

	jobs := cfg.Jobs()
	jobs[0] = nil
	if cfg.Jobs()[0] == nil {
		t.Error("changing the slice Jobs returned changed the configuration")
	}
}

func TestJobDefaultsAndQueues(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(enqueueBase+`worker: {queues: {critical: 5, default: 1}, max_attempts: 4}
jobs:
  - task: a.run
    queue: critical
    schema: {type: object, required: [id]}
    business_key: "a:{id}"
    deliver: {http: {url: "http://127.0.0.1:1/a", secret: `+secret+`}}
routes:
  - {name: a, methods: [POST], path: /a, enqueue: {task: a.run}}
  - {name: b, methods: [POST], path: /b, enqueue: {task: a.run, queue: default}}
  - {name: c, methods: [POST], path: /c, enqueue: {task: invoice.create}}
  - {name: d, methods: [POST], path: /d, enqueue: {task: invoice.create}}
`), "q.yaml", nil, WithDefaultJobs(exampleJobs(t)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	for _, tc := range []struct{ route, queue string }{{"a", "critical"}, {"b", "default"}, {"c", "default"}} {
		if r, _ := cfg.Route(tc.route); r.Enqueue.Queue != tc.queue {
			t.Errorf("route %s: queue %q, want %q", tc.route, r.Enqueue.Queue, tc.queue)
		}
	}
	if a, _ := cfg.Job("a.run"); a.MaxAttempts != 4 || a.HTTP.Timeout != 30*time.Second {
		t.Errorf("a.run: max_attempts %d, timeout %s; want worker.max_attempts 4 and 30s", a.MaxAttempts, a.HTTP.Timeout)
	}
	if n := len(cfg.Jobs()); n != 2 {
		t.Errorf("%d jobs, want a.run and invoice.create once, though two routes name it", n)
	}

	// A job declared under jobs: replaces the default job of its task.
	cfg, err = Parse([]byte(enqueueBase+`jobs:
  - task: invoice.create
    schema: {type: object, required: [n]}
    business_key: "inv:{n}"
routes:
  - {name: c, methods: [POST], path: /c, enqueue: {task: invoice.create}}
`), "own.yaml", nil, WithDefaultJobs(exampleJobs(t)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s, _ := cfg.Job("invoice.create"); len(cfg.Jobs()) != 1 || s.BusinessKey.String() != "inv:{n}" {
		t.Errorf("Jobs() = %d, invoice.create key %q; want the declared job only", len(cfg.Jobs()), s.BusinessKey)
	}

	// Two programs' documents both count; a task both declare takes the
	// first's.
	other := []byte("jobs:\n" +
		"  - {task: report.build, schema: {type: object, required: [r]}, business_key: \"report:{r}\"}\n" +
		"  - {task: invoice.create, schema: {type: object, required: [o]}, business_key: \"other:{o}\"}\n")
	cfg, err = Parse([]byte(enqueueBase+`routes:
  - {name: c, methods: [POST], path: /c, enqueue: {task: invoice.create}}
  - {name: r, methods: [POST], path: /r, enqueue: {task: report.build}}
`), "two.yaml", nil, WithDefaultJobs(exampleJobs(t)), WithDefaultJobs(other))
	if err != nil {
		t.Fatalf("Parse with two default documents: %v", err)
	}
	inv, _ := cfg.Job("invoice.create")
	if _, ok := cfg.Job("report.build"); !ok || len(cfg.Jobs()) != 2 || inv.BusinessKey.String() != "invoice:{order_id}" {
		t.Errorf("Jobs() = %d, invoice.create key %q; want report.build from the second document, invoice.create from the first", len(cfg.Jobs()), inv.BusinessKey)
	}
}

func TestJobProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ok.yaml", "type: object\nrequired: [id]\n")
	write("bad.json", `{"type": "object", "required": "id"}`)
	write("neither.txt", "a: [\n")
	write("ref.json", `{"$ref": "ok.yaml"}`)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}

	const schema = "schema: {type: object, required: [id]}, business_key: \"k:{id}\""
	for _, tc := range []struct {
		name string
		yaml string
		opts []Option
		want []string // every line of the error; none: the configuration is valid
	}{
		{
			name: "the schema's keys are its own, not configuration keys",
			yaml: "jobs:\n  - task: a\n    business_key: \"a:{customer.id}\"\n    schema:\n      $defs: {c: {type: object, required: [id], properties: {id: {type: string}}}}\n" +
				"      type: object\n      additionalProperties: false\n      required: [customer]\n      properties:\n        customer: {$ref: \"#/$defs/c\"}\n        copy: &c {type: string}\n        other: *c\n",
		},
		{
			name: "task, queue and counts",
			yaml: "worker: {queues: {default: 1}}\njobs:\n  - {" + schema + ", queue: bulk, max_attempts: -2}\n  - {task: Big, queue: \"a b\", " + schema + "}\n  - {task: x:y, " + schema + "}\n  - {task: x:y, " + schema + "}\n",
			want: []string{
				"x.yaml:7: jobs[0].task: required: the asynq task type, like shipment.book",
				`x.yaml:7: jobs[0].queue: "bulk" is not in worker.queues, so no worker would run its jobs`,
				"x.yaml:7: jobs[0].max_attempts: must be positive, not -2",
				`x.yaml:8: jobs[1].task: "Big" may only contain a-z, 0-9, '_', '.', ':' and '-'`,
				`x.yaml:8: jobs[1].queue: "a b" is not a queue name (letters, digits, '_', '.', ':' and '-')`,
				`x.yaml:10: jobs[3].task: "x:y" is also the task of jobs[2]`,
			},
		},
		{
			name: "schema sources",
			yaml: "jobs:\n" +
				"  - {task: a, business_key: \"k:{id}\"}\n" +
				"  - {task: b, business_key: \"k:{id}\", schema: {}, schema_file: ok.yaml}\n" +
				"  - {task: c, business_key: \"k:{id}\", schema_file: ok.yaml}\n" +
				"  - {task: d, business_key: \"k:{id}\", schema_file: missing.json}\n" +
				"  - {task: e, business_key: \"k:{id}\", schema_file: bad.json}\n" +
				"  - {task: f, business_key: \"k:{id}\", schema_file: neither.txt}\n" +
				"  - {task: g, business_key: \"k:{id}\", schema_file: sub}\n" +
				"  - {task: h, business_key: \"k:{id}\", schema_file: ref.json}\n" +
				"  - {task: i, business_key: \"k:{id}\", schema: null}\n",
			want: []string{
				"x.yaml:6: jobs[0]: needs schema or schema_file: the JSON Schema of the payload",
				"x.yaml:7: jobs[1].schema_file: schema and schema_file exclude each other; keep one",
				"x.yaml:9: jobs[3].schema_file: cannot read missing.json: no such file or directory",
				`x.yaml:10: jobs[4].schema_file: bad.json: is not a valid JSON Schema: at /required: got string, want array`,
				"x.yaml:11: jobs[5].schema_file: neither.txt is neither JSON nor YAML: line 1: did not find expected node content",
				"x.yaml:12: jobs[6].schema_file: cannot read sub: is a directory",
				`x.yaml:13: jobs[7].schema_file: ref.json: $ref "ok.yaml" leaves the document; only references inside it (#/$defs/…) are supported`,
				"x.yaml:14: jobs[8]: needs schema or schema_file: the JSON Schema of the payload",
			},
		},
		{
			name: "inline YAML without a JSON form",
			yaml: "jobs:\n  - task: a\n    business_key: \"k:{id}\"\n    schema:\n      type: object\n      type: string\n" +
				"  - task: b\n    business_key: \"k:{id}\"\n    schema: {maximum: .inf}\n" +
				"  - task: c\n    business_key: \"k:{id}\"\n    schema: {<<: {type: object}}\n" +
				"  - task: d\n    business_key: \"k:{id}\"\n    schema: {[a]: 1}\n",
			want: []string{
				`x.yaml:8: jobs[0].schema: line 10: "type" is set twice (first on line 9)`,
				"x.yaml:13: jobs[1].schema: line 13: .inf has no JSON form",
				"x.yaml:16: jobs[2].schema: line 16: merge keys (<<) have no JSON form; write the keys out",
				"x.yaml:19: jobs[3].schema: line 19: a key must be a plain name, not a list",
			},
		},
		{
			name: "templates",
			yaml: "jobs:\n" +
				"  - {task: a, schema: {type: object}}\n" +
				"  - {task: b, schema: {type: object, required: [id]}, business_key: \"k:{id\", resource: \"r}\"}\n" +
				"  - {task: c, schema: {type: object, required: [id]}, business_key: \"k:{id}:{name}\", resource: \"r:{id}\"}\n" +
				"  - task: d\n    schema: {type: object, required: [c], properties: {c: {type: object}}}\n    business_key: \"k:{c.id}\"\n" +
				"  - {task: e, schema: true, business_key: \"k:{id}\"}\n",
			want: []string{
				`x.yaml:6: jobs[0].business_key: required: a template of the job's identity, like "shipment:{order_id}"`,
				`x.yaml:7: jobs[1].business_key: template "k:{id": the { at 3 is not closed`,
				`x.yaml:7: jobs[1].resource: template "r}": a } at 2 closes no {`,
				`x.yaml:8: jobs[2].business_key: {name} names a field the schema does not require: add "name" to the schema's "required"`,
				`x.yaml:11: jobs[3].business_key: {c.id} names a field the schema does not require: add each name on the path "c.id" to "required" of its object`,
				`x.yaml:12: jobs[4].business_key: {id} names a field the schema does not require: add "id" to the schema's "required"`,
			},
		},
		{
			name: "deliver.http never echoes a credential",
			yaml: "jobs:\n" +
				"  - {task: a, " + schema + ", deliver: {http: {url: \"ftp://user:hunter2@host/x\", secret: \"whsec_hunter2hunter2hunter2\"}}}\n" +
				"  - {task: b, " + schema + ", deliver: {http: {url: \"/relative?token=hunter2\", secret: \"whsec_aHVudGVyMg==\"}}}\n" +
				"  - {task: c, " + schema + ", deliver: {http: {}}}\n" +
				"  - {task: d, " + schema + ", deliver: {http: {url: \"https://h/x\", secret: \"hunter2 " + secret + "\", timeout: -1s}}}\n" +
				"  - task: e\n    schema: {type: object, required: [id]}\n    business_key: \"k:{id}\"\n    deliver:\n      http:\n        url: https://h/x\n        secret: " + secret + "\n        timeout: 0s\n" +
				"        headers: {Content-Type: a, traceparent: b, webhook-signature: c, IDEMGATE-TENANT: d, idempotency-fencing-token: e, Host: f,\n" +
				"                  X-Key: \"hunter2\\x01\", X-Dup: a, x-dup: b, \"X Bad\": c, X-Fine: ok}\n",
			want: []string{
				"x.yaml:6: jobs[0].deliver.http.url: must be an absolute http:// or https:// URL with a host",
				`x.yaml:6: jobs[0].deliver.http.secret: the secret is not "whsec_" followed by base64`,
				"x.yaml:7: jobs[1].deliver.http.url: must be an absolute http:// or https:// URL with a host",
				"x.yaml:7: jobs[1].deliver.http.secret: the secret decodes to 7 bytes; use at least 16 random bytes",
				"x.yaml:8: jobs[2].deliver.http.url: required: the receiver's http:// or https:// URL",
				`x.yaml:8: jobs[2].deliver.http.secret: required: "whsec_" followed by the base64 of at least 16 random bytes; receivers verify webhook-signature with it`,
				`x.yaml:9: jobs[3].deliver.http.secret: secret 1 of 2 does not start with "whsec_" (a Standard Webhooks secret)`,
				"x.yaml:9: jobs[3].deliver.http.timeout: must be positive, not -1s",
				"x.yaml:17: jobs[4].deliver.http.timeout: must be positive, not 0s",
				"x.yaml:18: jobs[4].deliver.http.headers.Content-Type: Content-Type is set by every delivery; a static header cannot replace it",
				"x.yaml:18: jobs[4].deliver.http.headers.Host: Host is set by every delivery; a static header cannot replace it",
				"x.yaml:18: jobs[4].deliver.http.headers.IDEMGATE-TENANT: IDEMGATE-TENANT is set by every delivery; a static header cannot replace it",
				"x.yaml:18: jobs[4].deliver.http.headers.idempotency-fencing-token: idempotency-fencing-token is set by every delivery; a static header cannot replace it",
				"x.yaml:18: jobs[4].deliver.http.headers.traceparent: traceparent is set by every delivery; a static header cannot replace it",
				"x.yaml:18: jobs[4].deliver.http.headers.webhook-signature: webhook-signature is set by every delivery; a static header cannot replace it",
				`x.yaml:19: jobs[4].deliver.http.headers."X Bad": "X Bad" is not a header name`,
				"x.yaml:19: jobs[4].deliver.http.headers.X-Key: the value holds a line break or another control character",
				"x.yaml:19: jobs[4].deliver.http.headers.x-dup: the same header as X-Dup",
			},
		},
		{
			name: "unknown keys inside a job",
			yaml: "jobs:\n  - {task: a, " + schema + ", bussiness_key: x, deliver: {http: {url: https://h, secret: " + secret + ", retries: 3}}}\n",
			want: []string{
				`x.yaml:6: jobs[0].bussiness_key: unknown key; did you mean "business_key"?`,
				"x.yaml:6: jobs[0].deliver.http.retries: unknown key",
			},
		},
		{
			name: "an enqueue route names a declared job",
			yaml: "jobs:\n  - {task: a, " + schema + "}\n  - {task: b, " + schema + "}\nroutes:\n" +
				"  - {name: r, methods: [POST], path: /r, enqueue: {task: c}}\n  - {name: s, methods: [POST], path: /s, enqueue: {task: invoice.create}}\n",
			want: []string{
				`x.yaml:9: routes[0].enqueue.task: "c" is not a declared job; declare it under jobs (declared: a, b)`,
				`x.yaml:10: routes[1].enqueue.task: "invoice.create" is not a declared job; declare it under jobs (declared: a, b)`,
			},
		},
		{
			name: "a job's queue outside worker.queues is reported once, at the job",
			yaml: "worker: {queues: {default: 1}}\njobs:\n  - {task: a, queue: bulk, " + schema + "}\nroutes:\n  - {name: r, methods: [POST], path: /r, enqueue: {task: a}}\n",
			want: []string{`x.yaml:7: jobs[0].queue: "bulk" is not in worker.queues, so no worker would run its jobs`},
		},
		{
			name: "handlers: a job without deliver.http needs one",
			yaml: "jobs:\n  - {task: a, " + schema + "}\n  - {task: b, " + schema + "}\n  - {task: c, " + schema + ", deliver: {http: {url: https://h, secret: " + secret + "}}}\n",
			opts: []Option{WithHandlers("a")},
			want: []string{`x.yaml:7: jobs[1].task: no worker can run "b": declare deliver.http or register a Go handler for it`},
		},
		{
			name: "handlers: with none registered",
			yaml: "jobs:\n  - {task: a, " + schema + "}\n",
			opts: []Option{WithHandlers()},
			want: []string{`x.yaml:6: jobs[0].task: no worker can run "a": declare deliver.http or register a Go handler for it`},
		},
		{
			name: "handlers: not checked without the option",
			yaml: "jobs:\n  - {task: a, " + schema + "}\n",
		},
		{
			name: "default jobs: their problems are the route's",
			yaml: "routes:\n  - {name: r, methods: [POST], path: /r, enqueue: {task: a}}\n  - {name: s, methods: [POST], path: /s, enqueue: {task: b}}\n" +
				"  - {name: t, methods: [POST], path: /t, enqueue: {task: c}}\n",
			opts: []Option{WithHandlers(), WithDefaultJobs([]byte("jobs:\n" +
				"  - {task: a, schema: {type: object}, business_key: \"a:{id}\", deliver: {http: {url: https://h, secret: " + secret + "}}}\n" +
				"  - {task: b, schema_file: ok.yaml, business_key: \"b:{id}\"}\n" +
				"  - {task: c, schema: {type: object, required: [id]}, business_key: \"c:{id}\"}\n" +
				"  - {task: unused, business_key: nothing}\n"))},
			want: []string{
				`x.yaml:6: routes[0].enqueue.task: default job "a": business_key: {id} names a field the schema does not require: add "id" to the schema's "required"`,
				`x.yaml:7: routes[1].enqueue.task: default job "b": schema_file: a default job's schema must be inline`,
				`x.yaml:8: routes[2].enqueue.task: default job "c": task: no worker can run "c": declare deliver.http or register a Go handler for it`,
			},
		},
		{
			name: "default jobs that do not parse",
			yaml: "routes:\n  - {name: r, methods: [POST], path: /r, enqueue: {task: a}}\n",
			opts: []Option{WithDefaultJobs([]byte("jobs:\n  - {task: a, sheme: {}}\n"))},
			want: []string{
				`x.yaml:6: routes[0].enqueue.task: "a" is not a declared job; declare it under jobs`,
				"x.yaml: the default jobs do not parse: unmarshal errors: line 2: field sheme not found in type config.Job",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(enqueueBase+tc.yaml), filepath.Join(dir, "x.yaml"), nil, tc.opts...)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if len(cfg.Jobs()) == 0 {
					t.Error("Jobs() is empty")
				}
				return
			}
			if err == nil {
				t.Fatal("Parse accepted the configuration")
			}
			got := strings.Split(strings.ReplaceAll(err.Error(), filepath.Join(dir, "x.yaml"), "x.yaml"), "\n")
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("a problem shows a credential:\n%s", err)
			}
		})
	}
}
