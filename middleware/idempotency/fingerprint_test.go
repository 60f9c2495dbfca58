package idempotency_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/ijson"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

func fp(t testing.TB, f *idempotency.Fingerprinter, in idempotency.FingerprintInput) string {
	t.Helper()
	if in.Method == "" {
		in.Method = "POST"
	}
	if in.Route == "" {
		in.Route = "payments"
	}
	if in.Path == "" {
		in.Path = "/v1/payments"
	}
	got, err := f.Fingerprint(in)
	if err != nil {
		t.Fatalf("Fingerprint(%q): %v", in.Body, err)
	}
	return got
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	plain, err := idempotency.NewFingerprinter([]string{"x-partner"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := idempotency.NewFingerprinter(nil, []string{"/amount", "/items/0/sku", "/a~1b"})
	if err != nil {
		t.Fatal(err)
	}
	js := "application/json"
	base := idempotency.FingerprintInput{ContentType: js, Body: []byte(`{"amount":100,"currency":"EUR"}`)}
	with := func(mod func(*idempotency.FingerprintInput)) idempotency.FingerprintInput {
		in := base
		mod(&in)
		return in
	}
	tests := []struct {
		name string
		f    *idempotency.Fingerprinter
		a, b idempotency.FingerprintInput
		same bool
	}{
		{"identical", plain, base, base, true},
		{"json key order", plain, base, with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"currency":"EUR","amount":100}`) }), true},
		{"json white space", plain, base, with(func(in *idempotency.FingerprintInput) {
			in.Body = []byte("{ \"amount\" : 100,\n\t\"currency\":\"EUR\" }\n")
		}), true},
		{"nested key order", plain,
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"a":{"x":1,"y":[{"p":1,"q":2}]}}`) }),
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"a":{"y":[{"q":2,"p":1}],"x":1}}`) }), true},
		{"string escapes equal", plain,
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"s":"\u00e9"}`) }),
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"s":"é"}`) }), true},
		{"json +json type", plain,
			with(func(in *idempotency.FingerprintInput) { in.ContentType = "application/merge-patch+json" }),
			with(func(in *idempotency.FingerprintInput) {
				in.ContentType = "application/merge-patch+json"
				in.Body = []byte(`{"currency":"EUR","amount":100}`)
			}), true},
		{"media type case and params", plain,
			with(func(in *idempotency.FingerprintInput) { in.ContentType = "Application/JSON; charset=utf-8" }),
			with(func(in *idempotency.FingerprintInput) { in.ContentType = "application/json;charset=utf-8" }), true},
		{"query order", plain,
			with(func(in *idempotency.FingerprintInput) { in.RawQuery = "b=2&a=1" }),
			with(func(in *idempotency.FingerprintInput) { in.RawQuery = "a=1&b=2" }), true},
		{"unlisted header ignored", plain, base, with(func(in *idempotency.FingerprintInput) { in.Header = http.Header{"X-Other": {"1"}} }), true},
		{"numbers keep their text", plain, base, with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"amount":100.0,"currency":"EUR"}`) }), false},
		{"different value", plain, base, with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"amount":101,"currency":"EUR"}`) }), false},
		{"array order matters", plain,
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`[1,2]`) }),
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`[2,1]`) }), false},
		{"repeated query values keep order", plain,
			with(func(in *idempotency.FingerprintInput) { in.RawQuery = "a=1&a=2" }),
			with(func(in *idempotency.FingerprintInput) { in.RawQuery = "a=2&a=1" }), false},
		{"method", plain, base, with(func(in *idempotency.FingerprintInput) { in.Method = "PATCH" }), false},
		{"route", plain, base, with(func(in *idempotency.FingerprintInput) { in.Route = "refunds" }), false},
		{"path", plain, base, with(func(in *idempotency.FingerprintInput) { in.Path = "/v1/payments/2" }), false},
		{"content type", plain, base, with(func(in *idempotency.FingerprintInput) { in.ContentType = "text/plain" }), false},
		{"listed header", plain, base, with(func(in *idempotency.FingerprintInput) { in.Header = http.Header{"X-Partner": {"acme"}} }), false},
		{"non-JSON body is raw", plain,
			with(func(in *idempotency.FingerprintInput) {
				in.ContentType = "text/plain"
				in.Body = []byte(`{"a":1,"b":2}`)
			}),
			with(func(in *idempotency.FingerprintInput) {
				in.ContentType = "text/plain"
				in.Body = []byte(`{"b":2,"a":1}`)
			}), false},
		{"invalid JSON is raw", plain,
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"a":1,}`) }),
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"a":1,} `) }), false},
		{"trailing JSON value is not canonicalised away", plain,
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"a":1}`) }),
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"a":1}{"b":2}`) }), false},
		{"fields: others ignored", fields,
			with(func(in *idempotency.FingerprintInput) {
				in.Body = []byte(`{"amount":1,"note":"x","items":[{"sku":"A"}]}`)
			}),
			with(func(in *idempotency.FingerprintInput) {
				in.Body = []byte(`{"note":"y","items":[{"sku":"A","qty":3}],"amount":1}`)
			}), true},
		{"fields: listed differs", fields,
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"amount":1}`) }),
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"amount":2}`) }), false},
		{"fields: escaped pointer", fields,
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"a/b":1}`) }),
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"a/b":2}`) }), false},
		{"fields: absent is not null", fields,
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{}`) }),
			with(func(in *idempotency.FingerprintInput) { in.Body = []byte(`{"amount":null}`) }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := fp(t, tc.f, tc.a), fp(t, tc.f, tc.b)
			if (a == b) != tc.same {
				t.Fatalf("fingerprints equal = %v, want %v\n a: %+v\n b: %+v", a == b, tc.same, tc.a, tc.b)
			}
			if len(a) != 64 {
				t.Fatalf("fingerprint %q is not hex SHA-256", a)
			}
		})
	}
}

func TestNewFingerprinterRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		headers, fields []string
	}{
		{"pointer without slash", nil, []string{"amount"}},
		{"bad tilde", nil, []string{"/a~2"}},
		{"header with colon", []string{"x:y"}, nil},
		{"empty header", []string{""}, nil},
	} {
		if _, err := idempotency.NewFingerprinter(tc.headers, tc.fields); err == nil {
			t.Errorf("%s: NewFingerprinter accepted %q %q", tc.name, tc.headers, tc.fields)
		}
	}
}

// FuzzFingerprint checks that reformatting a JSON body (reordering nothing,
// adding white space) never changes its fingerprint, and that it is stable.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,2,{"c":"d"}]}`, `[]`, `"x"`, `1.50`, `{"a":{"b":{}}}`, `not json`, ``} {
		f.Add([]byte(s))
	}
	fpr, _ := idempotency.NewFingerprinter(nil, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		in := idempotency.FingerprintInput{Method: "POST", Route: "r", Path: "/p", ContentType: "application/json", Body: body}
		a, errA := fpr.Fingerprint(in)
		if again, err := fpr.Fingerprint(in); again != a || (err == nil) != (errA == nil) {
			t.Fatal("fingerprint is not deterministic")
		}
		if errA != nil {
			if !errors.Is(errA, ijson.ErrNotIJSON) || ijson.Check(body) == nil {
				t.Fatalf("refused %q with %v, which ijson.Check accepts", body, errA)
			}
			return
		}
		spaced := append(append([]byte(" \n"), body...), '\t')
		in2 := in
		in2.Body = spaced
		if b, err := fpr.Fingerprint(in2); json.Valid(body) && (b != a || err != nil) {
			t.Fatalf("white space around valid JSON %q changed the fingerprint (%v)", body, err)
		}
	})
}

// TestFingerprintStable pins fingerprints: stored records carry them, so a
// change here would make every retry after an upgrade a 422.
func TestFingerprintStable(t *testing.T) {
	t.Parallel()
	plain, err := idempotency.NewFingerprinter([]string{"x-partner"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := idempotency.NewFingerprinter(nil, []string{"/amount", "/items/0/sku"})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Partner": {" acme ", "b"}}
	for i, c := range []struct {
		in            idempotency.FingerprintInput
		plain, fields string
	}{
		{idempotency.FingerprintInput{Method: "POST", Route: "payments", Path: "/v1/payments", ContentType: "application/json", Body: []byte(`{"b":1,"a":[true,false,null,-0.5e+3,"x"],"c":{"z":{},"y":[]}}`)},
			"e16d09cbe161c0d5a832297c6d05ef165cc3fe268160748544ac841fbd854b33", "45366594d5d9890f732fcf71a073888574fce3323fd10c8471de30452dd80ea2"},
		{idempotency.FingerprintInput{Method: "POST", Route: "payments", Path: "/v1/payments", RawQuery: "b=2&a=1&a=0", ContentType: "application/json; charset=UTF-8", Header: h, Body: []byte(`{"amount":100,"currency":"EUR","note":"caf\u00e9 <b>"}`)},
			"12b3deb6253cf1603c33d2a0908edb3c09eaad4c2c16b8fc9ae110b7815bd2bb", "1ec6ad55f3f6ada6836b7ccd4bdd5e19e002f8abb97f45666fd0d87f4331887a"},
		{idempotency.FingerprintInput{Method: "PUT", Route: "r", Path: "/p", ContentType: "text/plain", Body: []byte("hello")},
			"6dac6eed140ff1e8f0405ed0c30db91ed5f59479025b4ca1339af28a0ffb6111", "f389cd7cc8b220d4225aa71562e43a80a914d88748f27b33f1be989187c68f14"},
		{idempotency.FingerprintInput{Method: "POST", Route: "r", Path: "/p", ContentType: "application/json", Body: []byte(`{"a":1} x`)},
			"73c9c001eee3c2a8d382c83a5fd68e322410e34d8db96836aff4d8e4d7f1fad3", "71ad059dddd9db227f5ab106ea3e2ab9fd17d2b5067b6248c1ea414bc5c42746"},
	} {
		if got, _ := plain.Fingerprint(c.in); got != c.plain {
			t.Errorf("case %d: fingerprint %s, was %s", i, got, c.plain)
		}
		if got, _ := fields.Fingerprint(c.in); got != c.fields {
			t.Errorf("case %d: json_fields fingerprint %s, was %s", i, got, c.fields)
		}
	}
}
