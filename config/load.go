package config

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/idemgate/idemgate/config/internal/strictyaml"
	"github.com/idemgate/idemgate/extension"
)

// Load reads the configuration file at path; see Parse. A file that
// cannot be read is reported as the wrapped os error, not as Errors.
func Load(path string, getenv func(string) string, opts ...Option) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path, getenv, opts...)
}

// Parse reads a configuration: it expands ${VAR} and ${VAR:-default} from
// getenv (nil means an empty environment), decodes the YAML refusing
// unknown keys, lets env DATABASE_URL, DATABASE_DIRECT_URL and REDIS_URL
// replace the file's values, fills the defaults and validates the result,
// compiling every job's schema. name labels problems, and a
// jobs[].schema_file is read relative to its directory. The error, if any,
// is a *Errors listing every mistake.
//
// Expansion is textual, before the YAML is read, so a reference can stand
// for a number (tokens: ${BURST}); references in comments are left alone,
// and a value that might contain YAML syntax (": ", " #", a leading quote)
// is best written inside quotes: "${VAR}". Write $${ for a literal ${.
func Parse(data []byte, name string, getenv func(string) string, opts ...Option) (*Config, error) {
	o := newOptions(name, opts)
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	expanded, refs := expand(data, getenv)
	// Keys whose empty value means "off" start at their default, so that
	// only an explicit "" clears them; so do keys whose zero is refused.
	cfg := &Config{AdminListen: defaultAdminListen, Admin: Admin{UI: true}, Worker: defaultWorker()}
	doc := strictyaml.Decode(expanded, cfg, "listen", "store", "routes")
	r := &report{file: name, doc: doc, unread: map[string]bool{}, fromEnv: map[string]string{}}
	claimed := map[string]bool{}
	for _, s := range o.settings {
		claimed[s.Key] = true
	}
	for _, p := range doc.Errors {
		if p.Unknown && claimed[p.Key] {
			continue // the program's own key, read below
		}
		if hint, ok := examplesKey(p.Key); ok && p.Unknown {
			p.Message = hint
		}
		r.add(Error{Line: p.Line, Key: p.Key, Message: p.Message})
	}
	for _, ref := range refs {
		key := doc.KeyAt(ref.line, ref.col)
		r.add(Error{Line: ref.line, Key: key, Message: ref.msg})
		if key != "" {
			r.unread[key] = true
		}
	}
	if !doc.Usable() {
		// Without a document there is nothing meaningful to validate.
		return nil, r.result()
	}
	for _, env := range []struct {
		key, name string
		field     *string
	}{
		{"database_url", "DATABASE_URL", &cfg.DatabaseURL},
		{"database_direct_url", "DATABASE_DIRECT_URL", &cfg.DatabaseDirectURL},
		{"redis_url", "REDIS_URL", &cfg.RedisURL},
	} {
		if v := getenv(env.name); v != "" {
			*env.field = v
			r.fromEnv[env.key] = env.name
		}
	}
	cfg.withDefaults()
	cfg.readSettings(o.settings, doc, r)
	cfg.inheritIdempotency(doc)
	cfg.jobDefaults(o)
	if err := cfg.validate(o); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var pr Error
			if errors.As(e, &pr) {
				r.validation(pr)
			}
		}
	}
	if len(r.list) > 0 {
		return nil, r.result()
	}
	return cfg, nil
}

// examplesKey says where a key of idemgate-examples' own settings
// belongs, so that a binary that does not claim it (idemgate itself) says
// more than that it is unknown.
func examplesKey(key string) (string, bool) {
	if key == "worker.partner_url" {
		return "the example jobs' setting (their partner's URL), which only idemgate-examples reads " +
			"(examples/cmd/idemgate-examples); this binary has no example jobs: remove the key, or run idemgate-examples", true
	}
	return "", false
}

// readSettings gives each claimed key its value (the file's, else its
// default) and files what its Set finds wrong at the key's line. A claimed
// listener address joins the addresses `dev` warns about.
func (c *Config) readSettings(settings []extension.Setting, doc *strictyaml.Document, r *report) {
	for _, s := range settings {
		value, line, ok := doc.Scalar(s.Key)
		switch {
		case ok:
		case doc.Written(s.Key):
			r.add(Error{Line: doc.Line(s.Key), Key: s.Key, Message: "must be a string"})
			continue
		default:
			value = s.Default
		}
		if msg := s.Set(value); msg != "" {
			r.add(Error{Line: line, Key: s.Key, Message: msg})
			continue
		}
		if s.Listener != nil {
			if addr, ok := s.Listener(value); ok {
				c.claimedListeners = append(c.claimedListeners, claimedListener{key: s.Key, addr: addr})
			}
		}
	}
}

// report collects the problems of one Parse, placing each on its line.
type report struct {
	file    string
	doc     *strictyaml.Document
	list    []Error
	unread  map[string]bool   // key paths whose ${VAR} could not be expanded
	fromEnv map[string]string // key path → the variable that replaced it
}

func (r *report) add(p Error) {
	p.File = r.file
	r.list = append(r.list, p)
}

// validation files a problem found by validate, placed at its key's line
// (or its nearest parent's) unless an earlier problem explains it.
func (r *report) validation(p Error) {
	if r.doc.Unread(p.Key) {
		return
	}
	for k := p.Key; k != ""; k = strictyaml.Parent(k) {
		if r.unread[k] {
			return
		}
	}
	if env, ok := r.fromEnv[p.Key]; ok {
		p.Message += " (from " + env + ")"
	} else if p.Line == 0 {
		p.Line = r.doc.Line(p.Key)
	}
	r.add(p)
}

// result is every problem in file order, those without a line last.
func (r *report) result() *Errors {
	sort.SliceStable(r.list, func(i, j int) bool {
		a, b := r.list[i].Line, r.list[j].Line
		return a != 0 && (b == 0 || a < b)
	})
	return &Errors{List: r.list}
}
