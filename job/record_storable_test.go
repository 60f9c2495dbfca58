package job_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/job"
)

// openSpec accepts any object with a string id.
func openSpec(t *testing.T) *job.Spec {
	t.Helper()
	spec, err := job.NewSpec("note.keep", []byte(`{"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}`), "note:{id}", "")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestSubmitRefusesWhatPostgresCannotStore: a payload PostgreSQL would
// refuse is refused first, as malformed (the gateway's 400), with nothing
// recorded — not sent to the database to fail like an outage (503, the key
// released, the client retrying forever). The database itself checks the
// rule: it refuses each of those bodies, and stores each body just inside
// the bounds.
func TestSubmitRefusesWhatPostgresCannotStore(t *testing.T) {
	v := setup(t)
	spec := openSpec(t)
	submit := func(key, body string) (job.Row, error) {
		return v.e.Submit(t.Context(), job.Request{Tenant: "acme", Route: "notes", Key: key, Spec: spec, Queue: v.queue, Body: []byte(body)})
	}
	refusedByPostgres := []string{
		`{"id": "a\u0000b"}`,
		`{"id": "a", "n\u0000": 1}`,
		`{"id": "a", "deep": [{"x": ["\u0000"]}]}`,
		"{\"id\": \"caf\xe9\"}",
		`{"id": "\ud800"}`,
		`{"id": "\udc00\ud800"}`,
		`{"id": "a", "n": 1e131072}`,
		`{"id": "a", "n": -10e131071}`,
		`{"id": "a", "n": 1e-16384}`,
		`{"id": "a", "n": 1.5e-16383}`,
		`{"id": "a", "n": 0e-20000}`,
	}
	for i, body := range refusedByPostgres {
		key := "unstorable-" + string(rune('a'+i))
		_, err := submit(key, body)
		var pe *job.PayloadError
		if !errors.Is(err, job.ErrMalformed) || !errors.As(err, &pe) {
			t.Errorf("%q: %v, want a malformed payload", body, err)
		}
		if _, err := v.e.Get(t.Context(), "acme", job.ID("acme", "notes", key)); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("%q: a refused payload left a job record (%v)", body, err)
		}
		var s string
		if err := v.pool.QueryRow(t.Context(), `SELECT $1::text::jsonb::text`, body).Scan(&s); err == nil {
			t.Errorf("PostgreSQL stores %q, which Submit refuses", body)
		}
	}
	for i, body := range []string{
		// U+0001 is storable, though no key may hold it.
		`{"id": "\ufffd \ud83d\ude00 😀 é", "note": "\u0001"}`,
		`{"id": "a", "n": 1e131071, "m": -9.9e131071, "o": 0.5e131072}`,
		`{"id": "a", "n": 1e-16383, "m": 123e-16383, "o": 0.000e-16380, "z": 0e200000}`,
	} {
		key := "storable-" + string(rune('a'+i))
		if _, err := submit(key, body); err != nil {
			t.Errorf("%q: %v, want it recorded", body, err)
		}
	}
	if n := len(v.pending(t)); n != 3 {
		t.Errorf("%d tasks enqueued, want 3 (the storable payloads only)", n)
	}
}

// TestLookupsByUnstorableID: an id PostgreSQL's text cannot hold (GET
// /v1/jobs/%00, a CLI argument) names no job; it is not a database error.
func TestLookupsByUnstorableID(t *testing.T) {
	v := setup(t)
	records := v.e.Records()
	for _, id := range []string{"\x00", "job_\x00", "\xff", "job_\xc3"} {
		if _, err := v.e.Get(t.Context(), "acme", id); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", id, err)
		}
		if _, err := records.ByID(t.Context(), id); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("ByID(%q) = %v, want ErrNotFound", id, err)
		}
		if err := records.Requeue(t.Context(), id); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Requeue(%q) = %v, want ErrNotFound", id, err)
		}
		if err := records.Delete(t.Context(), id); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Delete(%q) = %v, want ErrNotFound", id, err)
		}
	}
	if _, err := v.e.Get(t.Context(), "ac\x00me", "job_1"); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Get with a NUL in the tenant = %v, want ErrNotFound", err)
	}
}

// TestSetStatusStoresAnyAnswer: the error and result a receiver's answer
// gives a job are stored even when they hold what text cannot.
func TestSetStatusStoresAnyAnswer(t *testing.T) {
	v := setup(t)
	j, err := v.e.Submit(t.Context(), v.req("odd-answer", `{"order_id":"o-odd","amount_cents":1,"currency":"EUR"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.e.Records().SetStatus(t.Context(), j.ID, job.StatusFailed, 1, "ref\x00", "answered 400: a\x00b\xffc"); err != nil {
		t.Fatalf("SetStatus: %v", err)
	}
	got, err := v.e.Records().ByID(t.Context(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != job.StatusFailed || got.Error == nil || *got.Error != "answered 400: a\uFFFDb\uFFFDc" ||
		got.ResultRef == nil || !strings.HasPrefix(*got.ResultRef, "ref") {
		t.Errorf("job after SetStatus: status %s, error %v, result_ref %v", got.Status, got.Error, got.ResultRef)
	}
}
