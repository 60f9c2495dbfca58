// Package config reads idemgate's configuration: one YAML file, one struct
// tree. Parse expands ${VAR} and ${VAR:-default} from an injected getenv,
// decodes the file refusing unknown keys (a mistyped key must not quietly
// switch a protection off), lets the environment's DATABASE_URL and
// REDIS_URL replace the file's values, fills every default documented on
// the fields and validates the whole. A bad file yields a *Problems error
// that lists every mistake at once, one per line, as
//
//	FILE:LINE: KEY: MESSAGE
//
// so `idemgate config check` can print them all and a user fixes them in
// one pass. Each route's idempotency block overrides the defaults field by
// field; Route.Idempotency returns the merged, concrete settings.
//
// Jobs are declared under jobs: each names its task, the JSON Schema of
// its payload (inline or in a schema_file next to the configuration), the
// templates of its business key and resource, and optionally its HTTP
// delivery. Parse compiles every schema once; Config.Jobs and Config.Job
// return the compiled job.Specs. An enqueue route must name a declared
// job. Two options cover what the file cannot know: WithDefaultJobs
// supplies the jobs of routes that name a task without declaring it (the
// examples, for configurations written before jobs:), and WithHandlers
// names the tasks with a Go handler, so that a job nothing could run is
// refused before a worker starts.
//
// Expansion is textual, before the YAML is read, so a reference can stand
// for a number (tokens: ${BURST}); references in comments are left alone,
// and a value that might contain YAML syntax (": ", " #", a leading quote)
// is best written inside quotes: "${VAR}". Write $${ for a literal ${.
//
//	cfg, err := config.Load("idemgate.yaml", os.Getenv, config.WithDefaultJobs(examples.JobsYAML))
//	if err != nil {
//		fmt.Fprintln(stderr, err) // every problem, one per line
//		return err
//	}
//	for _, w := range cfg.Warnings() {
//		logger.Warn(w)
//	}
//	r, _ := cfg.Route("payments")
//	settings := r.Idempotency() // defaults with the route's overrides
package config
