package idempotency_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// fieldErrors lists the fields Validate named, as "field: message".
func fieldErrors(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var out []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		fe, ok := errors.AsType[*idempotency.FieldError](e)
		if !ok {
			t.Fatalf("%v (%T) is not a *FieldError", e, e)
		}
		out = append(out, fe.Error())
	}
	return out
}

func TestConfigFieldErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		cfg      idempotency.Config
		validate func(idempotency.Config) error
		want     []string
	}{
		{name: "zero fields are the defaults", cfg: idempotency.Config{Route: "r"}, validate: idempotency.Config.Validate},
		{
			name:     "a zero field is zero once defaults are resolved",
			cfg:      idempotency.Config{Route: "r"},
			validate: idempotency.Config.ValidateResolved,
			want: []string{
				`key_syntax: "" is not strict or compat`,
				"max_key_length: 0 is outside 1..4096",
				"retention: must be positive, not 0s",
				"lease: must be positive, not 0s",
				"store_timeout: must be positive, not 0s",
				"commit_timeout: must be positive, not 0s",
				"max_request_bytes: must be positive, not 0",
				"max_stored_response_bytes: must be positive, not 0",
				`on_store_error: "" is not fail_closed or fail_open`,
				`on_ambiguous: "" is not release or hold`,
				`forward_key: "" is not tenant_scoped or as_sent`,
			},
		},
		{
			name: "each problem names its field and list entry",
			cfg: idempotency.Config{
				Methods: []string{"POST", "GE T"}, MaxKeyLength: -1, Retention: -time.Second, Lease: 50 * time.Millisecond,
				CommitTimeout: -time.Second,
				WaitInFlight:  -1, MaxRequestBytes: -1,
				Fingerprint: idempotency.FingerprintConfig{Headers: []string{"X-Ok", "X:Bad"}, JSONFields: []string{"/a", "b"}},
			},
			validate: idempotency.Config.Validate,
			want: []string{
				"route: required",
				`methods[1]: "GE T" is not an HTTP method`,
				"max_key_length: -1 is outside 1..4096",
				"retention: must be positive, not -1s",
				"lease: 50ms is shorter than the minimum 100ms",
				"commit_timeout: must be positive, not -1s",
				"wait_in_flight: must not be negative, not -1ns",
				"max_request_bytes: must be positive, not -1",
				`fingerprint.headers[1]: "X:Bad" is not a header name`,
				`fingerprint.json_fields[1]: "b" is not a JSON Pointer (it must start with /)`,
			},
		},
		{
			// The default lease, 30s, would outlive the record.
			name:     "a retention shorter than the default lease",
			cfg:      idempotency.Config{Route: "r", Retention: 10 * time.Second},
			validate: idempotency.Config.Validate,
			want:     []string{"lease: 30s is longer than retention 10s"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := fieldErrors(t, tt.validate(tt.cfg)); !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestConfigConflictNamesBothFields(t *testing.T) {
	t.Parallel()
	err := idempotency.Config{Route: "r", Retention: time.Minute, Lease: 2 * time.Minute}.Validate()
	fe, ok := errors.AsType[*idempotency.FieldError](err)
	if !ok || fe.Field != "lease" || fe.With != "retention" {
		t.Fatalf("Validate = %#v, want a lease problem with retention", err)
	}
}

func TestDefaultMethods(t *testing.T) {
	t.Parallel()
	m := idempotency.DefaultMethods()
	m[0] = "DELETE"
	if got := idempotency.DefaultMethods(); !slices.Equal(got, []string{"POST", "PATCH"}) {
		t.Errorf("DefaultMethods() = %v after a caller changed its copy", got)
	}
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	d := idempotency.Config{Route: "r"}.WithDefaults()
	if err := d.ValidateResolved(); err != nil {
		t.Errorf("the defaults are refused: %v", err)
	}
	if !slices.Equal(d.Methods, idempotency.DefaultMethods()) || d.KeySyntax != idempotency.DefaultKeySyntax ||
		d.Lease != idempotency.DefaultLease || d.Retention != idempotency.DefaultRetention || d.ForwardKey != idempotency.DefaultForwardKey {
		t.Errorf("WithDefaults() = %+v", d)
	}
	if d.Tenant != nil || d.ErrorHandler != nil || d.Logger != nil {
		t.Error("WithDefaults set the functions, which are New's to fill")
	}

	methods := []string{"post"}
	set := idempotency.Config{Methods: methods, Lease: time.Second, WaitInFlight: time.Second}.WithDefaults()
	if !slices.Equal(set.Methods, []string{"POST"}) || set.Lease != time.Second || set.WaitInFlight != time.Second {
		t.Errorf("WithDefaults replaced settings that were set: %+v", set)
	}
	if methods[0] != "post" {
		t.Error("WithDefaults changed the caller's methods")
	}
	if none := (idempotency.Config{Methods: []string{}}).WithDefaults(); none.Methods == nil || len(none.Methods) != 0 {
		t.Errorf("an empty list of methods became %v", none.Methods)
	}
}
