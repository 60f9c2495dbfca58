// Package config reads idemgate's configuration: one YAML file, one struct
// tree, shared by the gateway, the worker and dev mode. Load (or Parse, for
// bytes) expands ${VAR} from an injected getenv, decodes the file refusing
// unknown keys (a mistyped key must not quietly switch a protection off),
// lets the environment's DATABASE_URL, DATABASE_DIRECT_URL and REDIS_URL
// replace the file's values, fills the defaults written next to every
// field, and validates the whole, compiling the JSON Schema of each job
// declared under jobs. Settings a library owns take that library's
// defaults and are checked by its own Validate: a route's idempotency
// block is an idempotency.Config, the worker section a workers.Config. A
// bad file yields a *Errors error listing every mistake at once, one per
// line as FILE:LINE: KEY: MESSAGE, so that `idemgate config check` prints
// them all and a user fixes them in one pass.
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
//	settings := r.Idempotency() // the defaults with the route's overrides
package config
