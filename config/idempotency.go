package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Idempotency is a complete set of idempotency settings: the defaults in
// Config.Idempotency, or a route's effective settings from
// Route.Idempotency. Each is a field of idempotency.Config, whose default
// and rule it has; MiddlewareConfig returns it in that form.
type Idempotency struct {
	// Methods that require an Idempotency-Key, upper case. Default
	// idempotency.DefaultMethods, POST and PATCH; an explicit empty list
	// means no method needs one. A method that is not a standard one
	// ("post", "PURGE") needs one too unless the list is empty.
	Methods []string `yaml:"methods"`
	// KeySyntax is "compat" (default, idempotency.DefaultKeySyntax: an
	// RFC 8941 sf-string or a bare token) or "strict" (sf-string only).
	KeySyntax string `yaml:"key_syntax"`
	// MaxKeyLength after parsing, 1..4096. Default
	// idempotency.DefaultMaxKeyLength, 255.
	MaxKeyLength int `yaml:"max_key_length"`
	// Retention of a record. Default idempotency.DefaultRetention, 24h.
	Retention Duration `yaml:"retention"`
	// Lease of a claim, at least 100ms and at most Retention. Default
	// idempotency.DefaultLease, 30s.
	Lease Duration `yaml:"lease"`
	// StoreTimeout bounds each call to the store (a claim, a renewal,
	// storing an outcome): past it a claim is answered 503 with
	// Retry-After, and an outcome is stored in the background. Default
	// idempotency.DefaultStoreTimeout, 2s.
	StoreTimeout Duration `yaml:"store_timeout"`
	// WaitInFlight > 0 holds a concurrent duplicate and replays the
	// original's response instead of answering 409. Default 0.
	WaitInFlight Duration `yaml:"wait_in_flight"`
	// MaxRequestBytes bounds a request body (413 beyond). Default
	// idempotency.DefaultMaxRequestBytes, 1048576.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// MaxStoredResponseBytes bounds a stored response body; a larger one is
	// stored without its body. Default
	// idempotency.DefaultMaxStoredResponseBytes, 1048576.
	MaxStoredResponseBytes int64 `yaml:"max_stored_response_bytes"`
	// Fingerprint chooses what, besides method, route, path, query and
	// Content-Type, identifies a request.
	Fingerprint Fingerprint `yaml:"fingerprint"`
	// OnStoreError is "fail_closed" (default, idempotency.DefaultOnStoreError:
	// 503) or "fail_open" (run the request unprotected).
	OnStoreError string `yaml:"on_store_error"`
	// OnAmbiguous is "release" (default, idempotency.DefaultOnAmbiguous: a
	// retry runs again with the same key forwarded) or "hold" (409 until an
	// operator resolves the key).
	OnAmbiguous string `yaml:"on_ambiguous"`
	// ForwardKey is the Idempotency-Key an upstream receives:
	// "tenant_scoped" (default, idempotency.DefaultForwardKey:
	// "{tenant}:{key}", so two tenants never share a key at an upstream)
	// or "as_sent" (the key alone, for upstreams that scope keys by
	// Idemgate-Tenant). Either is the key in canonical form, unquoted.
	ForwardKey string `yaml:"forward_key"`
}

// Fingerprint chooses what identifies a request. In a route's override a
// nil list inherits the default and a non-nil one (even empty) replaces it.
type Fingerprint struct {
	// Headers are request headers included in the fingerprint. Default none.
	Headers []string `yaml:"headers"`
	// JSONFields are JSON Pointers ("/order_id"): when set, only these
	// fields of a JSON body count. Default none: the whole body, canonical.
	JSONFields []string `yaml:"json_fields"`
}

// IdempotencyOverride is a route's idempotency block: each field that is
// set (non-nil) replaces the default of Config.Idempotency.
type IdempotencyOverride struct {
	Methods                []string    `yaml:"methods"`
	KeySyntax              *string     `yaml:"key_syntax"`
	MaxKeyLength           *int        `yaml:"max_key_length"`
	Retention              *Duration   `yaml:"retention"`
	Lease                  *Duration   `yaml:"lease"`
	StoreTimeout           *Duration   `yaml:"store_timeout"`
	WaitInFlight           *Duration   `yaml:"wait_in_flight"`
	MaxRequestBytes        *int64      `yaml:"max_request_bytes"`
	MaxStoredResponseBytes *int64      `yaml:"max_stored_response_bytes"`
	Fingerprint            Fingerprint `yaml:"fingerprint"`
	OnStoreError           *string     `yaml:"on_store_error"`
	OnAmbiguous            *string     `yaml:"on_ambiguous"`
	ForwardKey             *string     `yaml:"forward_key"`
}

// withDefaults fills the unset settings with the middleware's defaults. A
// zero here means the default, as it does in idempotency.Config.
func (d Idempotency) withDefaults() Idempotency {
	if d.Methods == nil {
		d.Methods = idempotency.DefaultMethods()
	}
	d.Methods = upper(d.Methods)
	setDefault(&d.KeySyntax, string(idempotency.DefaultKeySyntax))
	setDefault(&d.MaxKeyLength, idempotency.DefaultMaxKeyLength)
	setDefault(&d.Retention, Duration(idempotency.DefaultRetention))
	setDefault(&d.Lease, Duration(idempotency.DefaultLease))
	setDefault(&d.StoreTimeout, Duration(idempotency.DefaultStoreTimeout))
	setDefault(&d.MaxRequestBytes, idempotency.DefaultMaxRequestBytes)
	setDefault(&d.MaxStoredResponseBytes, idempotency.DefaultMaxStoredResponseBytes)
	setDefault(&d.OnStoreError, string(idempotency.DefaultOnStoreError))
	setDefault(&d.OnAmbiguous, string(idempotency.DefaultOnAmbiguous))
	setDefault(&d.ForwardKey, string(idempotency.DefaultForwardKey))
	return d
}

// MiddlewareConfig returns the settings as the idempotency middleware of
// route takes them.
func (d Idempotency) MiddlewareConfig(route string) idempotency.Config {
	return idempotency.Config{
		Route:                  route,
		Methods:                d.Methods,
		KeySyntax:              idempotency.KeySyntax(d.KeySyntax),
		MaxKeyLength:           d.MaxKeyLength,
		Retention:              time.Duration(d.Retention),
		Lease:                  time.Duration(d.Lease),
		StoreTimeout:           time.Duration(d.StoreTimeout),
		WaitInFlight:           time.Duration(d.WaitInFlight),
		MaxRequestBytes:        d.MaxRequestBytes,
		MaxStoredResponseBytes: d.MaxStoredResponseBytes,
		FingerprintHeaders:     d.Fingerprint.Headers,
		FingerprintJSONFields:  d.Fingerprint.JSONFields,
		OnStoreError:           idempotency.StoreErrorPolicy(d.OnStoreError),
		OnAmbiguous:            idempotency.AmbiguousPolicy(d.OnAmbiguous),
		ForwardKey:             idempotency.ForwardKeyPolicy(d.ForwardKey),
	}
}

// Idempotency returns the route's effective settings: its overrides on top
// of the configuration's defaults (the built-in defaults for a route that
// did not come from Load or Parse). The slices are the caller's own.
func (r *Route) Idempotency() Idempotency {
	d := r.inherited
	if !r.inheritSet {
		d = Idempotency{}.withDefaults()
	}
	for _, f := range r.IdempotencyOverride.fields(&d) {
		if f.set {
			f.apply()
		}
	}
	d.Methods = slices.Clone(d.Methods)
	d.Fingerprint.Headers = slices.Clone(d.Fingerprint.Headers)
	d.Fingerprint.JSONFields = slices.Clone(d.Fingerprint.JSONFields)
	return d
}

// overrideField is one key of a route's idempotency block: whether the
// override sets it, and how it replaces the default.
type overrideField struct {
	key   string
	set   bool
	apply func()
}

// fields lists the keys of the override, each applying to d. It is the
// one list of them: Route.Idempotency applies the keys a route sets, and
// set tells validateIdempotency which problems are the route's own. A key
// missing from a second list would let a route's bad value pass unreported.
func (o IdempotencyOverride) fields(d *Idempotency) []overrideField {
	return []overrideField{
		{"methods", o.Methods != nil, func() { d.Methods = upper(o.Methods) }},
		replace("key_syntax", &d.KeySyntax, o.KeySyntax),
		replace("max_key_length", &d.MaxKeyLength, o.MaxKeyLength),
		replace("retention", &d.Retention, o.Retention),
		replace("lease", &d.Lease, o.Lease),
		replace("store_timeout", &d.StoreTimeout, o.StoreTimeout),
		replace("wait_in_flight", &d.WaitInFlight, o.WaitInFlight),
		replace("max_request_bytes", &d.MaxRequestBytes, o.MaxRequestBytes),
		replace("max_stored_response_bytes", &d.MaxStoredResponseBytes, o.MaxStoredResponseBytes),
		{"fingerprint.headers", o.Fingerprint.Headers != nil, func() { d.Fingerprint.Headers = o.Fingerprint.Headers }},
		{"fingerprint.json_fields", o.Fingerprint.JSONFields != nil, func() { d.Fingerprint.JSONFields = o.Fingerprint.JSONFields }},
		replace("on_store_error", &d.OnStoreError, o.OnStoreError),
		replace("on_ambiguous", &d.OnAmbiguous, o.OnAmbiguous),
		replace("forward_key", &d.ForwardKey, o.ForwardKey),
	}
}

// replace is a key whose value, when the override sets it (v not nil),
// replaces field.
func replace[T any](key string, field, v *T) overrideField {
	return overrideField{key, v != nil, func() { *field = *v }}
}

// set reports whether the override sets the field with this key.
func (o IdempotencyOverride) set(key string) bool {
	for _, f := range o.fields(new(Idempotency)) {
		if f.key == key {
			return f.set
		}
	}
	return false
}

// validateIdempotency checks the settings d of route with the
// middleware's own rule; set says which keys were written at prefix (the
// others were checked where they were written). The settings are complete
// here, defaults filled in, so a key written as 0 is checked as 0.
func validateIdempotency(prefix, route string, d Idempotency, set func(string) bool, bad badFunc) {
	fields, others := split[*idempotency.FieldError](d.MiddlewareConfig(route).ValidateResolved())
	for _, e := range fields {
		key := idempotencyKey(e.Field)
		name, _, _ := strings.Cut(key, "[")
		switch {
		case e.Field == "route":
			// The route's name has a rule of its own: routes[i].name.
		case set(name):
			bad(prefix+"."+key, "%s", e.Message)
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

// idempotencyKey is the key, in an idempotency block, of a field of
// idempotency.Config as its FieldError names it.
func idempotencyKey(field string) string {
	name, index, _ := strings.Cut(field, "[")
	switch name {
	case "fingerprint_headers":
		name = "fingerprint.headers"
	case "fingerprint_json_fields":
		name = "fingerprint.json_fields"
	}
	if index != "" {
		return fmt.Sprintf("%s[%s", name, index)
	}
	return name
}
