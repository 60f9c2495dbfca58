// Package config reads idemgate's configuration: one YAML file, one struct
// tree, shared by the gateway, the worker and dev mode. Load (or Parse, for
// bytes) expands ${VAR} from an injected getenv, decodes the file refusing
// unknown keys (a mistyped key must not quietly switch a protection off),
// lets the environment's DATABASE_URL, DATABASE_DIRECT_URL and REDIS_URL
// replace the file's values, fills the defaults written next to every
// field, and validates the whole, compiling the JSON Schema of each job
// declared under jobs. Settings a library owns decode straight into that
// library's Config, which fills their defaults and checks them by its own
// rule: the idempotency block is an idempotency.Config, and each route's
// block is read over a copy of it, so a route inherits every setting it
// does not write; the worker section holds a workers.Config. A bad file
// yields an *Errors error listing every mistake at once, one per line as
// FILE:LINE: KEY: MESSAGE, so that `idemgate config check` prints them
// all and a user fixes them in one pass.
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
//	mw, err := idempotency.New(store, r.Idempotency) // the top level's settings with the route's own
package config
