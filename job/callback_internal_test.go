package job

import "testing"

// TestWithTenant: an event's data is the job document with the job's
// tenant as its first member; a document naming the same tenant is kept,
// one naming another, or not an object, is refused.
func TestWithTenant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, tenant, want string
		bad                     bool
	}{
		{name: "document", doc: `{"id":"job_1","status":"succeeded"}`, tenant: "acme", want: `{"tenant":"acme","id":"job_1","status":"succeeded"}`},
		{name: "empty object", doc: `{}`, tenant: "acme", want: `{"tenant":"acme"}`},
		{name: "escaped", doc: `{"id":"job_1"}`, tenant: `a"b<c`, want: `{"tenant":"a\"b<c","id":"job_1"}`},
		{name: "same tenant kept", doc: `{"id":"job_1","tenant":"acme"}`, tenant: "acme", want: `{"id":"job_1","tenant":"acme"}`},
		{name: "another tenant", doc: `{"tenant":"globex"}`, tenant: "acme", bad: true},
		{name: "not an object", doc: `["acme"]`, tenant: "acme", bad: true},
		{name: "null", doc: `null`, tenant: "acme", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := withTenant([]byte(tc.doc), tc.tenant)
			switch {
			case tc.bad && err == nil:
				t.Fatalf("withTenant(%s, %q) = %s, want an error", tc.doc, tc.tenant, got)
			case !tc.bad && (err != nil || string(got) != tc.want):
				t.Fatalf("withTenant(%s, %q) = %s, %v; want %s", tc.doc, tc.tenant, got, err, tc.want)
			}
		})
	}
}
