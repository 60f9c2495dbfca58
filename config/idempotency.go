package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/config/internal/strictyaml"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// inheritIdempotency reads each route's idempotency block over a copy of
// the top-level settings, whose defaults are filled in: a route inherits
// every setting and overrides those it writes (a key written null is not
// written). It remembers which keys each route wrote, so that validation
// reports a route's problems with the settings it wrote and leaves those
// it inherits to the top level.
func (c *Config) inheritIdempotency(doc *strictyaml.Document) {
	for i := range c.Routes {
		r := &c.Routes[i]
		d := c.Idempotency.Config
		d.Methods = slices.Clone(d.Methods)
		d.Fingerprint.Headers = slices.Clone(d.Fingerprint.Headers)
		d.Fingerprint.JSONFields = slices.Clone(d.Fingerprint.JSONFields)
		r.overrides = doc.DecodeOver(fmt.Sprintf("routes[%d].idempotency", i), &d)
		d.Methods = upper(d.Methods)
		d.Route = r.Name
		r.Idempotency = d
	}
}

// validateIdempotency checks the settings d, written at prefix, with the
// middleware's own rule; set says which keys were written there (the
// others were checked where they were written). The settings are complete
// here, defaults filled in, so a key written as 0 is checked as 0.
func validateIdempotency(prefix string, d idempotency.Config, set func(string) bool, bad badFunc) {
	fields, others := split[*idempotency.FieldError](d.ValidateResolved())
	for _, e := range fields {
		name, _, _ := strings.Cut(e.Field, "[")
		switch {
		case e.Field == "route":
			// The route's name has a rule of its own: routes[i].name.
		case set(name):
			bad(prefix+"."+e.Field, "%s", e.Message)
		case e.Field == "lease" && e.With == "retention" && set("retention"):
			// Only the retention is written here: the conflict with the
			// lease it inherits is the retention's.
			bad(prefix+".retention", "%s is shorter than lease %s", d.Retention, d.Lease)
		}
	}
	for _, err := range others {
		bad(prefix, "%v", err)
	}
}
