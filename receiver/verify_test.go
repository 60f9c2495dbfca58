package receiver

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

func TestNewVerifier(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		secrets []string
		wantErr string
	}{
		{"one", []string{testSecret}, ""},
		{"two while rotating", []string{testSecret, otherSecret}, ""},
		{"none", nil, "no webhook secret"},
		{"no prefix", []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, `secret 1: does not start with "whsec_"`},
		{"not base64", []string{testSecret, "whsec_%%%"}, "secret 2: not base64"},
		{"empty key", []string{"whsec_"}, "secret 1: empty key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := NewVerifier(tc.secrets...)
			if tc.wantErr == "" {
				if err != nil || v == nil {
					t.Fatalf("NewVerifier: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewVerifier error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"tenant":"acme"}`)
	const id = "job_1"
	ts := now.Unix()
	headers := func(sig string, ts int64) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", sig)
		return h
	}
	good := testkit.WebhookSignature(t, testSecret, id, ts, body)
	for _, tc := range []struct {
		name      string
		secrets   []string
		tolerance time.Duration
		h         http.Header
		body      []byte
		want      error
	}{
		{name: "good", h: headers(good, ts), want: nil},
		{name: "signed with another secret", h: headers(testkit.WebhookSignature(t, otherSecret, id, ts, body), ts), want: ErrSignature},
		{name: "body changed", h: headers(good, ts), body: []byte(`{"tenant":"evil"}`), want: ErrSignature},
		{name: "id changed", h: func() http.Header { h := headers(good, ts); h.Set("webhook-id", "job_2"); return h }(), want: ErrSignature},
		{name: "timestamp changed", h: headers(good, ts+1), want: ErrSignature},
		{name: "not base64", h: headers("v1,###", ts), want: ErrSignature},
		{name: "other version only", h: headers("v1a,"+good[3:], ts), want: ErrSignature},
		{name: "rotated: old secret still accepted", secrets: []string{otherSecret, testSecret}, h: headers(good, ts), want: nil},
		{name: "rotated: sender sends both signatures", secrets: []string{otherSecret},
			h: headers(good+" "+testkit.WebhookSignature(t, otherSecret, id, ts, body), ts), want: nil},
		{name: "expired", h: headers(testkit.WebhookSignature(t, testSecret, id, ts-301, body), ts-301), want: ErrTimestamp},
		{name: "from the future", h: headers(testkit.WebhookSignature(t, testSecret, id, ts+301, body), ts+301), want: ErrTimestamp},
		{name: "at the edge of the tolerance", h: headers(testkit.WebhookSignature(t, testSecret, id, ts-300, body), ts-300), want: nil},
		{name: "shorter tolerance", tolerance: time.Minute,
			h: headers(testkit.WebhookSignature(t, testSecret, id, ts-61, body), ts-61), want: ErrTimestamp},
		{name: "far past does not overflow", h: headers(testkit.WebhookSignature(t, testSecret, id, -1<<62, body), -1<<62), want: ErrTimestamp},
		{name: "now + MinInt64 does not wrap to now", h: headers(testkit.WebhookSignature(t, testSecret, id, ts+math.MinInt64, body), ts+math.MinInt64), want: ErrTimestamp},
		{name: "MaxInt64 does not wrap", h: headers(testkit.WebhookSignature(t, testSecret, id, math.MaxInt64, body), math.MaxInt64), want: ErrTimestamp},
		{name: "MinInt64 does not wrap", h: headers(testkit.WebhookSignature(t, testSecret, id, math.MinInt64, body), math.MinInt64), want: ErrTimestamp},
		{name: "timestamp not a number", h: func() http.Header { h := headers(good, ts); h.Set("webhook-timestamp", "soon"); return h }(), want: ErrTimestamp},
		{name: "no signature", h: func() http.Header { h := headers(good, ts); h.Del("webhook-signature"); return h }(), want: ErrMissingHeaders},
		{name: "no id", h: func() http.Header { h := headers(good, ts); h.Del("webhook-id"); return h }(), want: ErrMissingHeaders},
		{name: "no timestamp", h: func() http.Header { h := headers(good, ts); h.Del("webhook-timestamp"); return h }(), want: ErrMissingHeaders},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := testVerifier(t, tc.secrets...)
			v.Tolerance = tc.tolerance
			b := body
			if tc.body != nil {
				b = tc.body
			}
			err := v.Verify(tc.h, b)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify error = %v, want %v", err, tc.want)
			}
			for _, other := range []error{ErrMissingHeaders, ErrTimestamp, ErrSignature} {
				if other != tc.want && errors.Is(err, other) {
					t.Fatalf("Verify error %v also matches %v", err, other)
				}
			}
		})
	}
}

func TestVerifyUsesWallClockByDefault(t *testing.T) {
	t.Parallel()
	v, err := NewVerifier(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{}`)
	h := http.Header{}
	h.Set("webhook-id", "job_1")
	ts := time.Now().Unix()
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", testkit.WebhookSignature(t, testSecret, "job_1", ts, body))
	if err := v.Verify(h, body); err != nil {
		t.Fatalf("Verify with the wall clock: %v", err)
	}
	old := time.Now().Add(-time.Hour).Unix()
	h.Set("webhook-timestamp", strconv.FormatInt(old, 10))
	h.Set("webhook-signature", testkit.WebhookSignature(t, testSecret, "job_1", old, body))
	if err := v.Verify(h, body); !errors.Is(err, ErrTimestamp) {
		t.Fatalf("Verify of an hour-old timestamp = %v, want ErrTimestamp", err)
	}
}

// FuzzVerify: whatever the timestamp, signature list and fencing-token
// header, Read accepts a delivery only when one of the signatures is the
// right one for a timestamp within the tolerance, and every refusal
// matches exactly one of the documented errors.
func FuzzVerify(f *testing.F) {
	body := []byte(`{"type":"a","job_id":"job_1","tenant":"acme","business_key":"k","fencing_token":"7","data":{}}`)
	f.Add(now.Unix(), "", "7")
	f.Add(now.Unix()+math.MinInt64, "", "7")
	f.Add(int64(math.MaxInt64), "v1,AAAA v1a,xyz", "")
	f.Add(now.Unix()-301, "v2,abc", "-1")
	f.Fuzz(func(t *testing.T, ts int64, extra, token string) {
		v := testVerifier(t)
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set("webhook-id", "job_1")
		r.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		r.Header.Set("webhook-signature", extra+" "+testkit.WebhookSignature(t, testSecret, "job_1", ts, body))
		r.Header.Set("Idempotency-Key", "k")
		r.Header.Set("Idemgate-Tenant", "acme")
		r.Header.Set("Idempotency-Fencing-Token", token)
		d, err := Read(r, v, 0)
		inTolerance := ts >= now.Unix()-300 && ts <= now.Unix()+300
		if err == nil {
			if !inTolerance {
				t.Fatalf("Read accepted timestamp %d, %ds from now", ts, ts-now.Unix())
			}
			if n, perr := strconv.ParseInt(token, 10, 64); perr != nil || n != 7 || d.FencingToken != 7 {
				t.Fatalf("Read accepted fencing-token header %q for token %d", token, d.FencingToken)
			}
			return
		}
		if inTolerance && errors.Is(err, ErrTimestamp) {
			t.Fatalf("Read refused timestamp %d within the tolerance: %v", ts, err)
		}
		n := 0
		for _, e := range []error{ErrMissingHeaders, ErrTimestamp, ErrSignature, ErrEnvelope} {
			if errors.Is(err, e) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("Read error %v matches %d of the documented errors, want 1", err, n)
		}
	})
}
