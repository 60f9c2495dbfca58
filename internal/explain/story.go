package explain

import (
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
)

// Story is everything known about one job or key. Its shape is the Story
// schema of openapi.yaml, the document the admin endpoints promise and
// `idemgate explain --json` prints, so the two cannot drift apart.
type Story = openapi.Story

// RecordDocument is how the admin API, `idemgate keys get` and explain show
// an idempotency record: the IdempotencyRecord of openapi.yaml, the stored
// body in base64. It lives here, below the gateway, so that explain's
// record is derived from it rather than read from the store a second way.
func RecordDocument(rec idempotency.Record) openapi.IdempotencyRecord {
	d := openapi.IdempotencyRecord{
		Tenant: rec.Scope.Tenant, Route: rec.Scope.Route, Key: rec.Scope.Key,
		State: openapi.RecordState(rec.State), Fingerprint: rec.Fingerprint, FencingToken: rec.FencingToken,
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, ExpiresAt: rec.ExpiresAt,
	}
	if !rec.LeaseUntil.IsZero() {
		lu := rec.LeaseUntil
		d.LeaseUntil = &lu
	}
	if rec.Response != nil {
		body := rec.Response.Body
		if body == nil {
			body = []byte{} // "", not null: body_base64 is a string
		}
		d.Response = &openapi.StoredResponse{
			Status: rec.Response.Status, Header: rec.Response.Header,
			BodyBase64: body, BodyOmitted: rec.Response.BodyOmitted,
		}
	}
	return d
}

// storyRecord is the record document as a story tells it: StoryRecord
// carries the stored answer's status rather than the whole answer.
func storyRecord(d openapi.IdempotencyRecord) *openapi.StoryRecord {
	r := &openapi.StoryRecord{
		Tenant: d.Tenant, Route: d.Route, Key: d.Key, State: d.State, Fingerprint: d.Fingerprint,
		FencingToken: d.FencingToken, LeaseUntil: d.LeaseUntil,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, ExpiresAt: d.ExpiresAt,
	}
	if d.Response != nil {
		st := d.Response.Status
		r.Status = &st
	}
	return r
}

// optional is s for a field the schema leaves out when it is empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// value reads an optional field; absent and empty read the same.
func value(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
