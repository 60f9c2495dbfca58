package receiver

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
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
	good := testenv.WebhookSignature(t, testSecret, id, ts, body)
	for _, tc := range []struct {
		name      string
		secrets   []string
		tolerance time.Duration
		h         http.Header
		body      []byte
		want      error
	}{
		{name: "good", h: headers(good, ts), want: nil},
		{name: "signed with another secret", h: headers(testenv.WebhookSignature(t, otherSecret, id, ts, body), ts), want: ErrSignature},
		{name: "body changed", h: headers(good, ts), body: []byte(`{"tenant":"evil"}`), want: ErrSignature},
		{name: "id changed", h: func() http.Header { h := headers(good, ts); h.Set("webhook-id", "job_2"); return h }(), want: ErrSignature},
		{name: "timestamp changed", h: headers(good, ts+1), want: ErrSignature},
		{name: "not base64", h: headers("v1,###", ts), want: ErrSignature},
		{name: "other version only", h: headers("v1a,"+good[3:], ts), want: ErrSignature},
		{name: "rotated: old secret still accepted", secrets: []string{otherSecret, testSecret}, h: headers(good, ts), want: nil},
		{name: "rotated: sender sends both signatures", secrets: []string{otherSecret},
			h: headers(good+" "+testenv.WebhookSignature(t, otherSecret, id, ts, body), ts), want: nil},
		{name: "expired", h: headers(testenv.WebhookSignature(t, testSecret, id, ts-301, body), ts-301), want: ErrTimestamp},
		{name: "from the future", h: headers(testenv.WebhookSignature(t, testSecret, id, ts+301, body), ts+301), want: ErrTimestamp},
		{name: "at the edge of the tolerance", h: headers(testenv.WebhookSignature(t, testSecret, id, ts-300, body), ts-300), want: nil},
		{name: "shorter tolerance", tolerance: time.Minute,
			h: headers(testenv.WebhookSignature(t, testSecret, id, ts-61, body), ts-61), want: ErrTimestamp},
		{name: "far past does not overflow", h: headers(testenv.WebhookSignature(t, testSecret, id, -1<<62, body), -1<<62), want: ErrTimestamp},
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
	h.Set("webhook-signature", testenv.WebhookSignature(t, testSecret, "job_1", ts, body))
	if err := v.Verify(h, body); err != nil {
		t.Fatalf("Verify with the wall clock: %v", err)
	}
	old := time.Now().Add(-time.Hour).Unix()
	h.Set("webhook-timestamp", strconv.FormatInt(old, 10))
	h.Set("webhook-signature", testenv.WebhookSignature(t, testSecret, "job_1", old, body))
	if err := v.Verify(h, body); !errors.Is(err, ErrTimestamp) {
		t.Fatalf("Verify of an hour-old timestamp = %v, want ErrTimestamp", err)
	}
}
