package receiver

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	t.Parallel()
	v := testVerifier(t)

	t.Run("valid", func(t *testing.T) {
		t.Parallel()
		w := newWire("acme", "shipment:o-1", 7)
		d, err := Read(request(t, testSecret, w), v, 0)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		want := Delivery{
			Type: "shipment.book", Timestamp: now, JobID: w.JobID, Tenant: "acme",
			BusinessKey: "shipment:o-1", Attempt: 1, FencingToken: 7, Data: w.Data,
		}
		if d.Type != want.Type || !d.Timestamp.Equal(want.Timestamp) || d.JobID != want.JobID ||
			d.Tenant != want.Tenant || d.BusinessKey != want.BusinessKey || d.Attempt != want.Attempt ||
			d.FencingToken != want.FencingToken || string(d.Data) != string(want.Data) {
			t.Fatalf("Read = %+v, want %+v", d, want)
		}
	})

	for _, tc := range []struct {
		name    string
		edit    func(r *http.Request)
		body    string // replaces the envelope, signed
		max     int64
		want    error
		wantMsg string
	}{
		{name: "bad signature", edit: func(r *http.Request) { r.Header.Set("webhook-signature", "v1,AAAA") }, want: ErrSignature},
		{name: "Idempotency-Key differs", edit: func(r *http.Request) { r.Header.Set("Idempotency-Key", "shipment:o-2") },
			want: ErrEnvelope, wantMsg: `Idempotency-Key "shipment:o-2" is not business_key "shipment:o-1"`},
		{name: "Idempotency-Key missing", edit: func(r *http.Request) { r.Header.Del("Idempotency-Key") }, want: ErrEnvelope},
		{name: "tenant differs", edit: func(r *http.Request) { r.Header.Set("Idemgate-Tenant", "globex") },
			want: ErrEnvelope, wantMsg: `Idemgate-Tenant "globex" is not tenant "acme"`},
		{name: "fencing token differs", edit: func(r *http.Request) { r.Header.Set("Idempotency-Fencing-Token", "8") },
			want: ErrEnvelope, wantMsg: `Idempotency-Fencing-Token "8" is not fencing_token 7`},
		{name: "fencing token header missing", edit: func(r *http.Request) { r.Header.Del("Idempotency-Fencing-Token") }, want: ErrEnvelope},
		{name: "not JSON", body: `shipment please`, want: ErrEnvelope},
		{name: "two objects", body: `{"type":"a","job_id":"j","tenant":"acme","business_key":"k"} {}`, want: ErrEnvelope},
		{name: "missing fields", body: `{"type":"shipment.book","fencing_token":"7"}`,
			want: ErrEnvelope, wantMsg: "missing job_id, business_key"},
		{name: "token not a number", body: `{"type":"a","job_id":"j","tenant":"acme","business_key":"shipment:o-1","fencing_token":"seven"}`,
			want: ErrEnvelope, wantMsg: "fencing_token"},
		{name: "negative token", body: `{"type":"a","job_id":"j","tenant":"acme","business_key":"shipment:o-1","fencing_token":"-7"}`,
			want: ErrEnvelope},
		{name: "too large", max: 64, want: ErrEnvelope, wantMsg: "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWire("acme", "shipment:o-1", 7)
			r := request(t, testSecret, w)
			if tc.body != "" {
				r = signedRequest(t, testSecret, w, []byte(tc.body))
			}
			if tc.edit != nil {
				tc.edit(r)
			}
			_, err := Read(r, v, tc.max)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Read error = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Read error = %q, want it to say %q", err, tc.wantMsg)
			}
		})
	}

	t.Run("too large is a MaxBytesError", func(t *testing.T) {
		t.Parallel()
		_, err := Read(request(t, testSecret, newWire("acme", "k", 1)), v, 16)
		var tooLarge *http.MaxBytesError
		if !errors.As(err, &tooLarge) || tooLarge.Limit != 16 {
			t.Fatalf("Read error = %v, want an *http.MaxBytesError with limit 16", err)
		}
	})

	t.Run("no resource: no token anywhere", func(t *testing.T) {
		t.Parallel()
		w := newWire("acme", "k", 0)
		body := []byte(`{"type":"a","job_id":"` + w.JobID + `","tenant":"acme","business_key":"k","data":{}}`)
		r := signedRequest(t, testSecret, w, body)
		r.Header.Del("Idempotency-Fencing-Token")
		d, err := Read(r, v, 0)
		if err != nil || d.FencingToken != 0 {
			t.Fatalf("Read = %+v, %v; want token 0", d, err)
		}
	})

	t.Run("no tenant: a job enqueued without one", func(t *testing.T) {
		t.Parallel()
		w := newWire("", "k", 3)
		r := request(t, testSecret, w)
		d, err := Read(r, v, 0)
		if err != nil || d.Tenant != "" || d.BusinessKey != "k" {
			t.Fatalf("Read = %+v, %v; want tenant \"\"", d, err)
		}
		r = request(t, testSecret, w)
		r.Header.Set("Idemgate-Tenant", "acme")
		if _, err := Read(r, v, 0); !errors.Is(err, ErrEnvelope) {
			t.Fatalf("Read with a tenant header but none in the body = %v, want ErrEnvelope", err)
		}
	})

	t.Run("token as a JSON number", func(t *testing.T) {
		t.Parallel()
		w := newWire("acme", "k", 9)
		body := []byte(`{"type":"a","job_id":"` + w.JobID + `","tenant":"acme","business_key":"k","fencing_token":9}`)
		d, err := Read(signedRequest(t, testSecret, w, body), v, 0)
		if err != nil || d.FencingToken != 9 {
			t.Fatalf("Read = %+v, %v; want token 9", d, err)
		}
	})
}

// FuzzParse checks that no body panics the parser and that what it accepts
// names an effect.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"type":"a","job_id":"j","tenant":"t","business_key":"k","fencing_token":"7","data":{}}`,
		`{"fencing_token":7}`, `{"fencing_token":"-1"}`, `{"fencing_token":null}`, `[]`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := parse(body)
		if err != nil {
			if !errors.Is(err, ErrEnvelope) {
				t.Fatalf("parse error %v does not match ErrEnvelope", err)
			}
			return
		}
		if d.BusinessKey == "" || d.FencingToken < 0 {
			t.Fatalf("parse accepted %q as %+v", body, d)
		}
		if !json.Valid(body) {
			t.Fatalf("parse accepted invalid JSON %q", body)
		}
	})
}
