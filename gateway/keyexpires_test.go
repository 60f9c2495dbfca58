package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/openapi"
)

// An enqueue route's 202 says until when its key is kept: the retention
// after now, or for a scheduled job the retention after its not_before,
// and its replay says the same; a proxied route never passes on an
// upstream's own Idempotency-Key-Expires, only the gateway's.
func TestKeyExpiresOnJobsAndProxies(t *testing.T) {
	lg := newListGateway(t)
	const retention = idempotency.DefaultRetention // testOptions sets none
	at := func(t *testing.T, resp *http.Response) time.Time {
		t.Helper()
		v := resp.Header.Get(idempotency.HeaderKeyExpires)
		got, err := http.ParseTime(v)
		if err != nil {
			t.Fatalf("%d: %s %q is not an HTTP-date", resp.StatusCode, idempotency.HeaderKeyExpires, v)
		}
		return got
	}
	for _, tc := range []struct {
		name   string
		header []string
		after  time.Duration // until not_before
	}{
		{"at once", nil, 0},
		{"scheduled a week ahead", []string{HeaderDelay, "604800"}, 7 * 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := lg.run + strings.ReplaceAll(tc.name, " ", "-")
			header := append([]string{"Authorization", "Bearer " + testAPIKey, "Idempotency-Key", key, "Content-Type", "application/json"}, tc.header...)
			body := `{"order_id":"o-1","amount_cents":100,"currency":"EUR"}`
			before := time.Now()
			first, got := serve(t, lg.g.Handler(), http.MethodPost, "/v1/invoices", body, header...)
			if first.StatusCode != http.StatusAccepted {
				t.Fatalf("POST: %d %s", first.StatusCode, got)
			}
			var doc openapi.Job
			if err := json.Unmarshal([]byte(got), &doc); err != nil {
				t.Fatal(err)
			}
			want := before.Add(retention)
			if doc.NotBefore != nil {
				want = doc.NotBefore.Add(retention)
			}
			if e := at(t, first); e.After(want.Add(time.Second)) || e.Before(want.Add(-time.Minute)) || e.Before(before.Add(tc.after+retention-time.Minute)) {
				t.Errorf("the 202 says %s, want about %s", e, want)
			}
			replay, _ := serve(t, lg.g.Handler(), http.MethodPost, "/v1/invoices", body, header...)
			if replay.Header.Get(idempotency.HeaderReplayed) != "true" || !at(t, replay).Equal(at(t, first)) {
				t.Errorf("the replay says %q, the first answer %q", replay.Header.Get(idempotency.HeaderKeyExpires), first.Header.Get(idempotency.HeaderKeyExpires))
			}
		})
	}

	t.Run("a proxied upstream's own", func(t *testing.T) {
		opts := testOptions(fakeJobs{})
		g, srv := servePayments(t, opts, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("idempotency_key-expires", "Thu, 01 Jan 1970 00:00:00 GMT")
			w.Header().Set(idempotency.HeaderKeyExpires, "Thu, 01 Jan 1970 00:00:00 GMT")
			w.WriteHeader(http.StatusCreated)
		})
		_ = g
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/payments", nil)
		req.Header.Set("Authorization", "Bearer "+testAPIKey)
		req.Header.Set("Idempotency-Key", lg.run+"proxied")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if vs := resp.Header.Values(idempotency.HeaderKeyExpires); resp.StatusCode != http.StatusCreated || len(vs) != 1 || resp.Header.Get("Idempotency_key-Expires") != "" {
			t.Fatalf("%d with %v", resp.StatusCode, resp.Header)
		}
		if e := at(t, resp); e.Before(time.Now().Add(retention - time.Minute)) {
			t.Errorf("the proxied 201 says %s, want the gateway's retention ahead", e)
		}
	})
}
